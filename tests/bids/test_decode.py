"""BOLD decoding: ISA-L equals nibabel, region means in the same pass; the serial runner
reads ahead within its bound."""

import threading

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp import cleaning, decode, participant
from connscale.bidsapp.decode import load_masked_bold
from connscale.engines.batch import ReadAheadEngine


def _bold(tmp_path, dtype, *, name="bold.nii.gz", slope=None, big_endian=False):
    rng = np.random.default_rng(0)
    data = (100 + 20 * rng.standard_normal((7, 6, 5, 9))).astype(dtype)
    if big_endian:
        data = data.astype(data.dtype.newbyteorder(">"))
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0]))
    if slope is not None:
        img.header.set_slope_inter(*slope)
    path = tmp_path / name
    nib.save(img, path)
    mask = rng.random((7, 6, 5)) > 0.4
    return path, mask


@pytest.mark.parametrize(
    "dtype, slope, big_endian",
    [
        (np.float32, None, False),
        (np.int16, (0.5, 10.0), False),
        (np.float32, None, True),
        (np.float64, None, False),
    ],
)
@pytest.mark.parametrize("use_isal", [True, False])
def test_masked_bold_equals_nibabel(tmp_path, dtype, slope, big_endian, use_isal):
    if use_isal and not decode.HAVE_ISAL:
        pytest.skip("isal is not installed")
    path, mask = _bold(tmp_path, dtype, slope=slope, big_endian=big_endian)
    expected = np.asarray(nib.load(path).dataobj, dtype=np.float64)[mask].T
    img, data = load_masked_bold(path, mask, use_isal=use_isal)
    assert data.dtype == np.float32 and data.flags.c_contiguous and data.shape == (9, mask.sum())
    np.testing.assert_allclose(data, expected, rtol=1e-6)
    np.testing.assert_array_equal(img.affine, np.diag([2.0, 2.0, 2.0, 1.0]))


@pytest.mark.parametrize(
    "dtype, slope, big_endian",
    [(np.float32, None, False), (np.int16, (0.5, 10.0), False), (np.float32, None, True)],
)
@pytest.mark.parametrize("use_isal", [True, False])
def test_region_means_and_voxels_in_one_pass(
    tmp_path, monkeypatch, dtype, slope, big_endian, use_isal
):
    """Blocks of two volumes (the last one short): every block lands in its rows; the
    region means equal float64 means of nibabel's data over each label's in-mask voxels."""
    if use_isal and not decode.HAVE_ISAL:
        pytest.skip("isal is not installed")
    path, mask = _bold(tmp_path, dtype, slope=slope, big_endian=big_endian)
    monkeypatch.setattr(decode, "_BLOCK_BYTES", 2 * 7 * 6 * 5 * np.dtype(dtype).itemsize)
    labels = np.zeros((7, 6, 5), dtype=np.int64)
    labels[1:6, 1:5, 1:4] = np.arange(1, 6)[:, None, None] * 3  # labels 3, 6, .., 15
    labels[1, 1, 1] = 0
    full = np.asarray(nib.load(path).dataobj, dtype=np.float64)
    read = decode.read_masked_bold(path, mask, labels=labels, use_isal=use_isal)
    np.testing.assert_allclose(read.data, full[mask].T, rtol=1e-6)
    present = np.unique(labels[mask & (labels > 0)])
    assert read.regions.tolist() == present.tolist()
    expected = np.stack([full[mask & (labels == r)].mean(axis=0) for r in present], axis=1)
    np.testing.assert_allclose(read.region_means, expected, rtol=1e-12)
    only = decode.read_masked_bold(path, mask, labels=labels, voxels=False, use_isal=use_isal)
    assert only.data is None
    np.testing.assert_array_equal(only.region_means, read.region_means)


def test_region_sums_do_not_depend_on_the_voxel_gather(tmp_path, monkeypatch):
    """Values of every magnitude (float64 sums that round): the region means read with the
    voxel series and without them are the same bits, and close to the float64 means; a
    region split by unlabelled and masked-out voxels, in blocks of 3 volumes."""
    rng = np.random.default_rng(1)
    shape = (9, 7, 6, 8)
    data = (rng.choice([-1, 1], shape) * 10.0 ** rng.uniform(-3, 8, shape)).astype(np.float32)
    path = tmp_path / "wide.nii.gz"
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    mask = rng.random(shape[:3]) > 0.2
    labels = rng.integers(0, 4, shape[:3]) * 7  # 0 (unlabelled), 7, 14, 21, interleaved
    monkeypatch.setattr(decode, "_BLOCK_BYTES", 3 * 9 * 7 * 6 * 4)
    for use_isal in [False] + [True] * decode.HAVE_ISAL:
        both = decode.read_masked_bold(path, mask, labels=labels, use_isal=use_isal)
        only = decode.read_masked_bold(path, mask, labels=labels, voxels=False, use_isal=use_isal)
        np.testing.assert_array_equal(only.region_means, both.region_means)
        full = data.astype(np.float64)
        expected = np.stack([full[mask & (labels == r)].mean(axis=0) for r in (7, 14, 21)], axis=1)
        assert both.regions.tolist() == [7, 14, 21]
        np.testing.assert_allclose(both.region_means, expected, rtol=1e-9, atol=1e-9)


def test_uncompressed_and_errors(tmp_path):
    path, mask = _bold(tmp_path, np.float32, name="bold.nii")
    expected = np.asarray(nib.load(path).dataobj, dtype=np.float32)[mask].T
    np.testing.assert_array_equal(load_masked_bold(path, mask)[1], expected)
    with pytest.raises(ValueError, match="mask has shape"):
        load_masked_bold(path, mask[:-1])
    if decode.HAVE_ISAL:
        gz, _ = _bold(tmp_path, np.float32)
        truncated = tmp_path / "cut.nii.gz"
        import gzip

        raw = gzip.decompress(gz.read_bytes())
        truncated.write_bytes(gzip.compress(raw[:-100]))
        with pytest.raises(ValueError, match="truncated"):
            decode.read_nifti_data(nib.load(gz), truncated, use_isal=True)
        with pytest.raises(ValueError, match="truncated"):
            decode.read_masked_bold(truncated, mask, use_isal=True)


@pytest.mark.parametrize("readers", [1, 2])
def test_serial_runner_reads_ahead_within_bounds(monkeypatch, readers):
    """Run i's compute waits until run i+1's read has started (they overlap), and run
    i+readers+1's read never starts before run i is done (at most readers+1 runs in
    memory)."""
    names = [f"r{i}" for i in range(5)]
    runs = [
        participant.BoldRun(bold=n, mask=None, confounds=None, confounds_json=None, t_r=2.0)
        for n in names
    ]
    log, started = [], {n: threading.Event() for n in names}
    lock = threading.Lock()

    def fake_decode(config, run):
        with lock:
            log.append(("decode", run.bold))
        started[run.bold].set()
        return participant.DecodedRun(None, None, np.zeros((1, 1)), 0.0)

    def fake_process(config, run, decoded):
        assert decoded is not None
        i = names.index(run.bold)
        if i + 1 < len(names):
            assert started[names[i + 1]].wait(timeout=60), "no read ahead"
        with lock:
            log.append(("done", run.bold))
        return {"status": "ok", "outputs": []}

    # The reads run cleaning.prefetch (the module the reader processes import).
    monkeypatch.setattr(cleaning, "decode_run", fake_decode)
    monkeypatch.setattr(cleaning, "needs_decode", lambda config, run: True)
    monkeypatch.setattr(participant, "_process", fake_process)
    # Reader threads: the fakes are patched into this process only.
    monkeypatch.setattr(participant, "_readers", ReadAheadEngine)
    config = participant.ParticipantConfig("d", "o", "a", "A")
    records = participant.run_serial(config, runs, readers=readers)
    assert [r["status"] for r in records] == ["ok"] * len(names)
    for i in range(len(names) - readers - 1):
        assert log.index(("done", names[i])) < log.index(("decode", names[i + readers + 1]))


def test_serial_runner_shows_progress(monkeypatch, capsys):
    """With verbose the serial runner shows a bar over the runs, naming the last
    run and its status; silent without."""
    runs = [
        participant.BoldRun(
            bold=f"r{i}",
            mask=None,
            confounds=None,
            confounds_json=None,
            t_r=2.0,
            entities={"sub": f"0{i}"},
        )
        for i in range(3)
    ]
    monkeypatch.setattr(participant, "needs_decode", lambda config, run: False)
    monkeypatch.setattr(cleaning, "needs_decode", lambda config, run: False)  # its prefetch
    monkeypatch.setattr(
        participant, "_process", lambda config, run, decoded: {"status": "ok", "outputs": []}
    )
    config = participant.ParticipantConfig("d", "o", "a", "A")
    participant.run_serial(config, runs, verbose=0)
    assert "runs" not in capsys.readouterr().err
    participant.run_serial(config, runs, verbose=1)
    err = capsys.readouterr().err
    assert "runs" in err and "3/3" in err and "sub-02: ok" in err
