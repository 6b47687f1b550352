"""BOLD decoding checks: a damaged stream is refused in one line; read in blocks, the
data are the file's."""

import gzip
import struct
import zlib

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp import decode


def _image(tmp_path, name="bold.nii", n_volumes=7):
    rng = np.random.default_rng(3)
    data = (100 + 20 * rng.standard_normal((6, 5, 4, n_volumes))).astype(np.float32)
    path = tmp_path / name
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    mask = rng.random((6, 5, 4)) > 0.3
    return path, data, mask


def _gzip_with_crc(raw: bytes, crc: int) -> bytes:
    """A gzip member of ``raw`` whose trailer holds ``crc`` (its deflate data intact)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(raw) + deflate.flush()
    header = b"\x1f\x8b\x08\x00" + b"\x00" * 4 + b"\x00\xff"
    return header + body + struct.pack("<II", crc, len(raw) & 0xFFFFFFFF)


def _one_line_error(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture
def isal():
    if not decode.HAVE_ISAL:
        pytest.skip("isal is not installed")


@pytest.mark.parametrize("voxels", [True, False])
def test_a_stream_failing_its_crc_is_refused(tmp_path, monkeypatch, isal, voxels):
    """A stream that inflates past the image's bytes (as damaged deflate data may) and
    fails its CRC is refused, read in blocks or whole: the reads go on to the stream's
    end. The same stream with its CRC right (bytes after the image) is read."""
    path, _, mask = _image(tmp_path)
    raw = path.read_bytes() + bytes(5000)
    good = tmp_path / "good.nii.gz"
    good.write_bytes(_gzip_with_crc(raw, zlib.crc32(raw)))
    bad = tmp_path / "bad.nii.gz"
    bad.write_bytes(_gzip_with_crc(raw, (zlib.crc32(raw) + 1) & 0xFFFFFFFF))
    labels = np.where(mask, 1, 0)
    monkeypatch.setattr(decode, "_BLOCK_BYTES", 2 * 6 * 5 * 4 * 4)
    read = decode.read_masked_bold(good, mask, labels=labels, voxels=voxels, use_isal=True)
    assert read.region_means.shape == (7, 1)
    message = _one_line_error(
        lambda: decode.read_masked_bold(bad, mask, labels=labels, voxels=voxels, use_isal=True)
    )
    # where nibabel reads through indexed_gzip, its header read meets the CRC first
    assert message.startswith(("bad.nii.gz is truncated or corrupt", "bad.nii.gz is not a"))
    with pytest.raises(gzip.BadGzipFile):
        decode.read_nifti_data(nib.load(good), bad, use_isal=True)


def test_a_file_cut_mid_read_is_one_line(tmp_path, monkeypatch, isal):
    path, _, mask = _image(tmp_path, "bold.nii.gz", n_volumes=40)
    cut = tmp_path / "cut.nii.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    monkeypatch.setattr(decode, "_BLOCK_BYTES", 3 * 6 * 5 * 4 * 4)
    message = _one_line_error(lambda: decode.read_masked_bold(cut, mask, use_isal=True))
    assert message.startswith("cut.nii.gz is truncated or corrupt")


def test_a_cut_uncompressed_file_is_one_line(tmp_path):
    """nibabel's short read (a two-line OSError) becomes one line naming the file."""
    path, _, mask = _image(tmp_path)
    cut = tmp_path / "cut.nii"
    cut.write_bytes(path.read_bytes()[:-500])
    message = _one_line_error(lambda: decode.read_masked_bold(cut, mask))
    assert message.startswith("cut.nii is truncated or corrupt")
    with pytest.raises(FileNotFoundError):  # the system's errors stay as they are
        with decode.reading(tmp_path / "none.nii"):
            open(tmp_path / "none.nii", "rb")


@pytest.mark.parametrize("per_block", [1, 2, 3, 7])
def test_blocks_are_the_files(tmp_path, monkeypatch, isal, per_block):
    """One to seven volumes a block (the last block short): the voxel series are the
    file's, bit for bit, and the region sums are those of a single block."""
    path, data, mask = _image(tmp_path, "bold.nii.gz")
    labels = np.zeros(mask.shape, dtype=np.int16)
    labels[1:5, 1:4, :] = np.arange(1, 5)[None, None, :]
    whole = decode.read_masked_bold(path, mask, labels=labels, use_isal=True)
    monkeypatch.setattr(decode, "_BLOCK_BYTES", per_block * 6 * 5 * 4 * 4)
    read = decode.read_masked_bold(path, mask, labels=labels, use_isal=True)
    np.testing.assert_array_equal(read.data, data[mask].T)
    np.testing.assert_array_equal(read.region_means, whole.region_means)
