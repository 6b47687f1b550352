"""Locks, fingerprints, free-space checks and published file sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from connscale.io.atomic import (
    InsufficientSpaceError,
    atomic_path,
    check_free_space,
    open_new,
    private_dir,
)
from connscale.io.fingerprint import array_fingerprint, file_fingerprint, run_fingerprint
from connscale.io.lock import OutputLock, OutputLockedError, is_locked, lock_path
from connscale.io.publish import IncompleteOutputError, OutputSet, read_manifest

pytestmark = pytest.mark.faults

_HOLD = textwrap.dedent("""
    import sys, time
    from connscale.io.lock import OutputLock
    lock = OutputLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def _holder(target, seconds):
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(target), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_fails_naming_the_holder(tmp_path):
    target = tmp_path / "sub-01_dfc.h5"
    proc = _holder(target, 60)
    try:
        assert is_locked(target)
        with pytest.raises(OutputLockedError, match=f"pid {proc.pid}"):
            OutputLock(target).acquire()
    finally:
        proc.kill()
        proc.wait()
    # kill -9 released it: the kernel drops the flock with the process.
    assert not is_locked(target)
    with OutputLock(target) as lock:
        assert lock.held
    assert not lock_path(target).exists()


def test_wait_takes_the_lock_when_the_holder_ends(tmp_path):
    target = tmp_path / "out"
    proc = _holder(target, 0.5)
    try:
        with OutputLock(target, wait=True, timeout=30) as lock:
            assert lock.held
            assert proc.poll() is not None  # the holder had finished
    finally:
        proc.kill()
        proc.wait()


def test_wait_times_out(tmp_path):
    target = tmp_path / "out"
    proc = _holder(target, 60)
    try:
        with pytest.raises(OutputLockedError):
            OutputLock(target, wait=True, timeout=0.3).acquire()
    finally:
        proc.kill()
        proc.wait()


def test_lock_file_is_never_followed_through_a_link(tmp_path):
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.h5"
    lock_path(target).symlink_to(victim)
    with pytest.raises(OutputLockedError, match="symbolic link"):
        OutputLock(target).acquire()
    assert victim.read_text() == "keep me"


def test_private_dir_refuses_a_planted_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / ".x.staging").symlink_to(elsewhere)
    with pytest.raises(PermissionError, match="symbolic link"):
        private_dir(tmp_path / ".x.staging")
    made = private_dir(tmp_path / ".y.staging")
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    assert private_dir(made) == made  # reopening our own folder is fine


def test_open_new_refuses_links_and_existing_files(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        open_new(tmp_path / "link")
    assert not (tmp_path / "target").exists()
    with open_new(tmp_path / "fresh") as fh:
        fh.write(b"x")
    with pytest.raises(FileExistsError):
        open_new(tmp_path / "fresh")


def test_free_space_check_names_path_and_bytes(tmp_path):
    check_free_space(tmp_path, 1024)
    with pytest.raises(
        InsufficientSpaceError, match=r"not enough free space in .* needed, .* available"
    ):
        check_free_space(tmp_path / "not" / "yet", 1 << 62, what="the DFC store")


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "a.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_file_fingerprint_follows_content(tmp_path):
    small = tmp_path / "a.tsv"
    small.write_text("1\t2\n")
    first = file_fingerprint(small)
    assert first["hashed"] == "whole" and first["bytes"] == 4
    small.write_text("1\t3\n")
    assert file_fingerprint(small)["sha256"] != first["sha256"]
    big = tmp_path / "b.npy"
    data = np.zeros(6 << 20, dtype=np.uint8)
    big.write_bytes(data.tobytes())
    before = file_fingerprint(big)
    assert before["hashed"] == "ends"
    data[-1] = 1  # inside the last MiB
    big.write_bytes(data.tobytes())
    assert file_fingerprint(big)["sha256"] != before["sha256"]


def test_run_fingerprint_covers_inputs_and_parameters(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text("1\n")
    a = run_fingerprint([path], {"window_length": 10, "out": tmp_path})
    assert a == run_fingerprint([path], {"window_length": 10, "out": tmp_path})
    assert a["digest"] != run_fingerprint([path], {"window_length": 11, "out": tmp_path})["digest"]
    array = np.arange(6.0).reshape(2, 3)
    assert run_fingerprint([array], {})["inputs"][0]["array"] == array_fingerprint(array)
    assert json.loads(json.dumps(a)) == a


def _publish(out, names, fingerprint, content="v1"):
    outputs = OutputSet(out, "sub-01_fc", command="fc", fingerprint=fingerprint)
    with outputs:
        for name in names:
            outputs.path(name).write_text(f"{content} {name}")
        return outputs.commit()


def test_output_set_publishes_with_a_manifest(tmp_path):
    fp = run_fingerprint([], {"k": 1})
    manifest = _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.json"], fp)
    assert manifest.name == "sub-01_fc_manifest.json"
    record = read_manifest(tmp_path, "sub-01_fc", verify="full")
    assert set(record["files"]) == {"sub-01_fc_a.tsv", "sub-01_fc_b.json"}
    assert record["fingerprint"]["digest"] == fp["digest"]
    assert not (tmp_path / ".sub-01_fc.staging").exists()
    outputs = OutputSet(tmp_path, "sub-01_fc", command="fc", fingerprint=fp)
    with outputs:
        assert outputs.complete()
    other = OutputSet(
        tmp_path,
        "sub-01_fc",
        command="fc",
        overwrite=True,
        fingerprint=run_fingerprint([], {"k": 2}),
    )
    with other:
        assert not other.complete()


def test_readers_refuse_a_changed_or_missing_file(tmp_path):
    _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.tsv"], None)
    (tmp_path / "sub-01_fc_a.tsv").write_text("v1 sub-01_fc_a.tsx")  # same size, other bytes
    read_manifest(tmp_path, "sub-01_fc", verify="size")
    with pytest.raises(IncompleteOutputError, match="differs"):
        read_manifest(tmp_path, "sub-01_fc", verify="full")
    (tmp_path / "sub-01_fc_b.tsv").unlink()
    with pytest.raises(IncompleteOutputError, match="missing"):
        read_manifest(tmp_path, "sub-01_fc")
    with pytest.raises(IncompleteOutputError, match="no complete"):
        read_manifest(tmp_path, "sub-02_fc")


def test_foreign_file_is_an_error_and_nothing_moves(tmp_path):
    (tmp_path / "sub-01_fc_a.tsv").write_text("the user's own file")
    with pytest.raises(FileExistsError, match="not part of a connscale"):
        _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.tsv"], None)
    assert (tmp_path / "sub-01_fc_a.tsv").read_text() == "the user's own file"
    assert not (tmp_path / "sub-01_fc_b.tsv").exists()


def test_interrupted_publish_is_never_complete_and_is_replaced(tmp_path, monkeypatch):
    _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.tsv"], None, content="old")
    real_replace = os.replace
    calls = []

    def crash_on_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second)
    with pytest.raises(OSError, match="No space"):
        _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.tsv"], None, content="new")
    monkeypatch.setattr(os, "replace", real_replace)
    # the old manifest is gone before any file moved: no set on disk reads as complete
    with pytest.raises(IncompleteOutputError):
        read_manifest(tmp_path, "sub-01_fc")
    _publish(tmp_path, ["sub-01_fc_a.tsv", "sub-01_fc_b.tsv"], None, content="new")
    read_manifest(tmp_path, "sub-01_fc", verify="full")
    assert (tmp_path / "sub-01_fc_b.tsv").read_text() == "new sub-01_fc_b.tsv"


def test_only_named_files_are_published(tmp_path):
    outputs = OutputSet(tmp_path, "run", command="r1dl")
    with outputs:
        (outputs.staging / "checkpoint.npz").write_bytes(b"state")
        outputs.path("run_maps.tsv").write_text("m")
        outputs.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_manifest.json", "run_maps.tsv"]


def test_output_set_needs_its_lock(tmp_path):
    outputs = OutputSet(tmp_path, "run", command="fc")
    with pytest.raises(RuntimeError, match="context manager"):
        outputs.path("run_a.tsv")
    with pytest.raises(ValueError, match="prefix"):
        OutputSet(tmp_path, "../x", command="fc")


def test_check_published_refuses_files_of_an_interrupted_publication(tmp_path):
    from connscale.io.publish import check_published

    with OutputSet(tmp_path, "run", command="test") as outputs:
        outputs.path("a.txt").write_text("one")
        outputs.commit()
    check_published(tmp_path / "a.txt")
    # A second run stopped after removing the manifest and moving a.txt in.
    staging = tmp_path / ".run.staging"
    staging.mkdir()
    (staging / ".publishing.json").write_text(json.dumps(["a.txt"]))
    (tmp_path / "run_manifest.json").rename(tmp_path / "old_manifest.json")
    with pytest.raises(IncompleteOutputError, match="publication did not finish"):
        check_published(tmp_path / "a.txt")
    # Stopped after writing the new manifest, before removing its journal: published.
    (tmp_path / "old_manifest.json").rename(tmp_path / "run_manifest.json")
    check_published(tmp_path / "a.txt")
    (tmp_path / "a.txt").write_text("changed")
    with pytest.raises(IncompleteOutputError, match="differs from what run_manifest.json"):
        check_published(tmp_path / "a.txt")
    (tmp_path / "by_hand.txt").write_text("no set names it")
    check_published(tmp_path / "by_hand.txt")


def test_a_set_made_with_other_parameters_is_never_replaced_silently(tmp_path):
    source = tmp_path / "in.tsv"
    source.write_text("1\n")
    _publish(tmp_path, ["sub-01_fc_a.tsv"], run_fingerprint([source], {"window": 10}))
    with pytest.raises(
        FileExistsError, match=r"other parameters \(window: 10 -> 12\).*--overwrite"
    ):
        _publish(tmp_path, ["sub-01_fc_a.tsv"], run_fingerprint([source], {"window": 12}), "v2")
    assert (tmp_path / "sub-01_fc_a.tsv").read_text() == "v1 sub-01_fc_a.tsv"
    # the same parameters on changed input: recomputed and replaced
    source.write_text("2\n")
    _publish(tmp_path, ["sub-01_fc_a.tsv"], run_fingerprint([source], {"window": 10}), "v3")
    assert (tmp_path / "sub-01_fc_a.tsv").read_text() == "v3 sub-01_fc_a.tsv"
    # other parameters with consent
    outputs = OutputSet(
        tmp_path,
        "sub-01_fc",
        command="fc",
        overwrite=True,
        fingerprint=run_fingerprint([source], {"window": 12}),
    )
    with outputs:
        outputs.path("sub-01_fc_a.tsv").write_text("v4")
        outputs.commit()
    assert read_manifest(tmp_path, "sub-01_fc")["fingerprint"]["parameters"] == {"window": 12}
