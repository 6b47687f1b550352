"""BOLD decoding: ISA-L equals nibabel; the serial runner decodes one run ahead, no more."""

import threading

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp import decode, participant
from connscale.bidsapp.decode import load_masked_bold


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


def test_serial_runner_decodes_one_run_ahead(monkeypatch):
    """Run i's compute waits until run i+1's decode has started (they overlap), and run
    i+2's decode never starts before run i is done (at most two runs in memory)."""
    names = [f"r{i}" for i in range(4)]
    runs = [
        participant.BoldRun(bold=n, mask=None, confounds=None, confounds_json=None, t_r=2.0)
        for n in names
    ]
    log, started = [], {n: threading.Event() for n in names}
    lock = threading.Lock()

    def fake_decode(run):
        with lock:
            log.append(("decode", run.bold))
        started[run.bold].set()
        return participant.DecodedRun(None, None, np.zeros((1, 1)), 0.0)

    def fake_process(config, run, decoded):
        assert decoded is not None
        i = names.index(run.bold)
        if i + 1 < len(names):
            assert started[names[i + 1]].wait(timeout=60), "no decode ahead"
        with lock:
            log.append(("done", run.bold))
        return {"status": "ok", "outputs": []}

    monkeypatch.setattr(participant, "decode_run", fake_decode)
    monkeypatch.setattr(participant, "needs_decode", lambda config, run: True)
    monkeypatch.setattr(participant, "_process", fake_process)
    config = participant.ParticipantConfig("d", "o", "a", "A")
    records = participant.run_serial(config, runs)
    assert [r["status"] for r in records] == ["ok"] * 4
    for i in range(len(names) - 2):
        assert log.index(("done", names[i])) < log.index(("decode", names[i + 2]))
