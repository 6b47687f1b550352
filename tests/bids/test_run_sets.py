"""A run's output sets: their fingerprints, and the resume check before a read."""

import nibabel as nib
import pytest

from connscale.bidsapp import run_sets
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import find_runs
from connscale.io import fingerprint
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

MEASURES = ("fc", "timeseries", "maps", "alff")
CLEANING = {"strategy": "simple", "strategy_params": {"motion": "basic"}}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sets")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    return tmp, root


def _config(tmp, root, out):
    return ParticipantConfig(
        str(root),
        str(out),
        atlas=str(tmp / ATLAS),
        atlas_name="Slab4",
        measures=MEASURES,
        **CLEANING,
    )


def _count_prints(monkeypatch) -> list:
    """Record the files fingerprinted from now on."""
    seen = []
    real = fingerprint.file_fingerprint

    def counted(path):
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(fingerprint, "file_fingerprint", counted)
    return seen


def test_each_input_is_fingerprinted_once_for_all_sets(tree, tmp_path, monkeypatch):
    """Four sets (region, maps, ALFF, QC) share one fingerprint of each input file,
    and their digests are those of the inputs fingerprinted set by set."""
    tmp, root = tree
    config = _config(tmp, root, tmp_path / "out")
    (run,) = find_runs(root, strategy="simple")
    seen = _count_prints(monkeypatch)
    sets = run_sets.output_sets(config, run)
    assert {"region", "maps", "alff", "qc"} <= set(sets)
    assert sorted(seen) == sorted(set(seen))  # no file twice
    inputs = [p for p in (run.bold, run.mask, run.confounds, run.confounds_json) if p]
    assert set(seen) == {str(p) for p in inputs} | {str(tmp / ATLAS)}
    monkeypatch.undo()
    again = fingerprint.run_fingerprint([fingerprint.file_fingerprint(p) for p in inputs], {})
    for _, _, made in sets.values():
        assert made["inputs"][: len(inputs)] == again["inputs"]


def _publish(config, run) -> None:
    """Publish every set of the run (one file each), as a run's task does."""
    from connscale.io.publish import OutputSet

    for folder, prefix, made in run_sets.output_sets(config, run).values():
        with OutputSet(folder, prefix, command="bids participant", fingerprint=made) as out:
            out.path(f"{prefix}_values.txt").write_text("1\n")
            out.commit()


def test_no_output_folder_means_a_read_without_fingerprints(tree, tmp_path, monkeypatch):
    """A run whose output folder does not exist is read at once (no input hashed);
    once its sets are published it is skipped, which takes its fingerprints; a set
    removed, it is read again."""
    tmp, root = tree
    config = _config(tmp, root, tmp_path / "out")
    (run,) = find_runs(root, strategy="simple")
    seen = _count_prints(monkeypatch)
    assert run_sets.needs_decode(config, run)
    assert seen == []
    monkeypatch.undo()
    _publish(config, run)
    seen = _count_prints(monkeypatch)
    assert not run_sets.needs_decode(config, run)
    assert seen
    manifest = next(run_sets.run_folder(config, run).glob("*alff*_manifest.json"))
    manifest.unlink()
    assert run_sets.needs_decode(config, run)
