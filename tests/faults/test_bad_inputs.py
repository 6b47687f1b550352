"""The catalogue of bad inputs: every one ends the CLI with exit status 2, one
line on stderr naming what was expected and what was got, no traceback, and
no output that could pass for complete.

Each case builds its tiny files in ``tmp_path`` and returns the command line;
the CLI runs in-process (``connscale.cli.main.main``) so the table stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import nibabel as nib
import numpy as np
import pytest

from connscale.cli.main import main

pytestmark = pytest.mark.faults

T, N = 24, 4  # time points and series of the tiny ROI inputs
SHAPE = (3, 3, 2)  # grid of the tiny NIfTI inputs
AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])


# --------------------------------------------------------------------------
# Tiny inputs
# --------------------------------------------------------------------------


def _series(seed=0, t=T, n=N):
    return np.random.default_rng(seed).standard_normal((t, n))


def tsv(d, name="sub-01_timeseries.tsv", array=None, header=True):
    array = _series() if array is None else np.asarray(array)
    lines = ["\t".join(f"r{i}" for i in range(array.shape[1]))] if header else []
    lines += ["\t".join(repr(float(v)) for v in row) for row in array]
    path = d / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def npy(d, array, name="sub-01_timeseries.npy"):
    path = d / name
    np.save(path, array)
    return str(path)


def raw(d, name, content: bytes):
    path = d / name
    path.write_bytes(content)
    return str(path)


def random_bytes(d, name):
    return raw(d, name, np.random.default_rng(1).bytes(4096))


def nii(d, data, name="sub-01_bold.nii.gz", affine=AFFINE):
    path = d / name
    nib.save(nib.Nifti1Image(data, affine), path)
    return str(path)


def bold(d, **kwargs):
    data = (100 + _series(t=T, n=int(np.prod(SHAPE)))).T.reshape(SHAPE + (T,))
    return nii(d, data.astype(np.float32), **kwargs)


def bold_with_nan(d):
    data = (100 + _series(t=T, n=int(np.prod(SHAPE)))).T.reshape(SHAPE + (T,))
    data[1, 1, 0, 5] = np.nan
    return nii(d, data.astype(np.float32))


def brain_with_nan(d):
    """A 6 x 6 x 5 image with a zero background, so nilearn's computed mask
    keeps the brain, and one NaN inside it."""
    data = np.zeros((6, 6, 5, T), np.float32)
    data[1:5, 1:5, 1:4] = 100 + np.random.default_rng(4).standard_normal((4, 4, 3, T))
    data[3, 3, 2, 5] = np.nan
    return nii(d, data)


def truncated_gz(d, name="sub-01_bold.nii.gz", make=bold):
    """A .nii.gz cut in the middle of its compressed voxel data."""
    path = make(d, name=name)
    content = open(path, "rb").read()
    return raw(d, name, content[: len(content) // 2])


def dwi_image(d, name="sub-01_dwi.nii.gz"):
    data = np.random.default_rng(2).uniform(100, 200, DWI_SHAPE + (len(BVALS),))
    return nii(d, data.astype(np.float32), name=name, affine=np.eye(4))


def mask(d, values=None, name="mask.nii.gz", shape=SHAPE, affine=AFFINE):
    values = np.ones(shape, np.float32) if values is None else values
    return nii(d, values, name=name, affine=affine)


def atlas(d, dtype=np.int16, offset=0.0, shape=SHAPE, affine=AFFINE, ndim=3):
    labels = (np.arange(int(np.prod(shape))) % 3 + 1).reshape(shape).astype(dtype) + offset
    if ndim == 4:
        labels = labels[..., None].repeat(2, axis=3)
    return nii(d, labels.astype(dtype), name="atlas.nii.gz", affine=affine)


# LiFE: a 4 x 4 x 4 scan, one b=0 and six directions, three streamlines.
DWI_SHAPE = (4, 4, 4)
BVECS = np.r_[[[0, 0, 0]], np.eye(3), np.eye(3)[::-1]].astype(float)
BVALS = np.r_[0.0, [1000.0] * 6]


def life_files(d, *, bvals=BVALS, bvecs=BVECS, streamlines=None, dwi=None, tract_name="tracks.tck"):
    dwi = dwi_image(d) if dwi is None else dwi
    np.savetxt(d / "dwi.bval", np.atleast_2d(bvals))
    np.savetxt(d / "dwi.bvec", np.asarray(bvecs).T)
    if streamlines is None:
        streamlines = [
            np.array([[0.5, 0.5, 0.5], [1.5, 1.5, 1.5], [2.5, 2.5, 2.5]]),
            np.array([[0.5, 2.5, 1.0], [2.5, 0.5, 1.0]]),
            np.array([[1.0, 1.0, 0.2], [1.0, 1.0, 2.8]]),
        ]
    tract = d / tract_name
    if tract_name.endswith((".tck", ".trk")):
        nib.streamlines.save(
            nib.streamlines.Tractogram(streamlines, affine_to_rasmm=np.eye(4)), str(tract)
        )
    return [
        dwi,
        "--bvals",
        str(d / "dwi.bval"),
        "--bvecs",
        str(d / "dwi.bvec"),
        "--tractogram",
        str(tract),
    ]


def life(d, *extra, **files):
    return ["life", *life_files(d, **files), *extra]


# classify: six subjects' 4 x 4 connectomes and a participants table.
PARTICIPANTS = "participant_id\tgroup\n" + "".join(
    f"sub-{i:02d}\t{'patient' if i % 2 else 'control'}\n" for i in range(1, 7)
)


def classify_files(
    d,
    *,
    participants=PARTICIPANTS,
    n_subjects=6,
    matrix=None,
):
    paths = []
    for i in range(1, n_subjects + 1):
        m = np.corrcoef(_series(seed=i).T) if matrix is None else matrix(i)
        paths.append(npy(d, m, name=f"sub-{i:02d}_relmat.npy"))
    (d / "participants.tsv").write_text(participants)
    return [*paths, "--participants", str(d / "participants.tsv")]


def classify(d, *extra, label="group", extra_features=(), **files):
    return [
        "classify",
        *extra_features,
        *classify_files(d, **files),
        "--label",
        label,
        "--repeats",
        "1",
        "--folds",
        "2",
        *extra,
    ]


def dfc_out_is_directory(d):
    path = tsv(d)
    (d / "out" / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_dfc.h5").mkdir(parents=True)
    return ["dfc", path, "--window", "8"]


def fc_out_is_directory(d):
    path = npy(d, _series(n=1200))
    (d / "out" / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_relmat.h5").mkdir(parents=True)
    return ["fc", path]


def _shift(affine, dx):
    moved = affine.copy()
    moved[0, 3] += dx
    return moved


# --------------------------------------------------------------------------
# The table: (id, builder(d) -> argv without --out and the quiet flag)
# --------------------------------------------------------------------------

CASES = [
    # ---- fc: series tables ----
    ("fc-npy-1d", lambda d: ["fc", npy(d, np.arange(10.0))]),
    ("fc-npy-3d", lambda d: ["fc", npy(d, np.zeros((4, 5, 6)))]),
    ("fc-tsv-nan", lambda d: ["fc", tsv(d, array=np.where(np.eye(T, N) > 0, np.nan, _series()))]),
    ("fc-tsv-inf", lambda d: ["fc", tsv(d, array=np.where(np.eye(T, N) > 0, np.inf, _series()))]),
    ("fc-npy-complex", lambda d: ["fc", npy(d, _series() + 1j * _series(seed=3))]),
    ("fc-npy-strings", lambda d: ["fc", npy(d, np.array([["a", "b"], ["c", "d"], ["e", "f"]]))]),
    ("fc-tsv-two-rows", lambda d: ["fc", tsv(d, array=_series(t=2))]),
    ("fc-tsv-text-body", lambda d: ["fc", raw(d, "sub-01_timeseries.tsv", b"a\tb\n1\tx\n2\ty\n")]),
    ("fc-tsv-empty", lambda d: ["fc", raw(d, "sub-01_timeseries.tsv", b"")]),
    (
        "fc-tsv-ragged",
        lambda d: ["fc", raw(d, "sub-01_timeseries.tsv", b"1\t2\t3\n4\t5\n6\t7\t8\n")],
    ),
    ("fc-npy-random-bytes", lambda d: ["fc", random_bytes(d, "sub-01_timeseries.npy")]),
    ("fc-all-constant", lambda d: ["fc", tsv(d, array=np.ones((T, N)))]),
    ("fc-missing-input", lambda d: ["fc", str(d / "absent.tsv")]),
    ("fc-unknown-suffix", lambda d: ["fc", raw(d, "sub-01_timeseries.xyz", b"1 2\n3 4\n")]),
    ("fc-threshold-above-1", lambda d: ["fc", tsv(d), "--threshold", "1.5"]),
    ("fc-threshold-below-minus-1", lambda d: ["fc", tsv(d), "--threshold", "-2"]),
    ("fc-threshold-nan", lambda d: ["fc", tsv(d), "--threshold", "nan"]),
    ("fc-threshold-with-triu", lambda d: ["fc", tsv(d), "--kind", "triu", "--threshold", "0.5"]),
    ("fc-mask-for-table", lambda d: ["fc", tsv(d), "--mask", mask(d)]),
    ("fc-unknown-option", lambda d: ["fc", tsv(d), "--frobnicate"]),
    ("fc-bad-memory-limit", lambda d: ["fc", tsv(d), "--memory-limit", "lots"]),
    ("fc-bad-device", lambda d: ["fc", tsv(d), "--device", "tpu"]),
    ("fc-out-is-directory", fc_out_is_directory),
    # ---- fc: NIfTI ----
    ("fc-nii-truncated-gz", lambda d: ["fc", truncated_gz(d), "--mask", mask(d)]),
    ("fc-nii-random-bytes", lambda d: ["fc", random_bytes(d, "sub-01_bold.nii.gz")]),
    ("fc-nii-3d", lambda d: ["fc", nii(d, np.ones(SHAPE, np.float32)), "--mask", mask(d)]),
    (
        "fc-nii-two-volumes",
        lambda d: ["fc", nii(d, np.random.default_rng(0).random(SHAPE + (2,)))],
    ),
    ("fc-nii-nan-in-mask", lambda d: ["fc", bold_with_nan(d), "--mask", mask(d)]),
    ("fc-nii-nan-in-atlas", lambda d: ["fc", bold_with_nan(d), "--atlas", atlas(d)]),
    ("fc-nii-nan-default-mask", lambda d: ["fc", brain_with_nan(d)]),
    ("fc-mask-wrong-grid", lambda d: ["fc", bold(d), "--mask", mask(d, shape=(3, 3, 3))]),
    (
        "fc-mask-wrong-affine",
        lambda d: ["fc", bold(d), "--mask", mask(d, affine=_shift(AFFINE, 5.0))],
    ),
    ("fc-mask-empty", lambda d: ["fc", bold(d), "--mask", mask(d, np.zeros(SHAPE, np.uint8))]),
    (
        "fc-mask-truncated",
        lambda d: ["fc", bold(d), "--mask", truncated_gz(d, "mask.nii.gz", make=mask)],
    ),
    (
        "fc-atlas-float-labels",
        lambda d: ["fc", bold(d), "--atlas", atlas(d, dtype=np.float32, offset=0.5)],
    ),
    ("fc-atlas-wrong-grid", lambda d: ["fc", bold(d), "--atlas", atlas(d, shape=(3, 3, 3))]),
    (
        "fc-atlas-wrong-affine",
        lambda d: ["fc", bold(d), "--atlas", atlas(d, affine=_shift(AFFINE, -3.0))],
    ),
    ("fc-atlas-4d", lambda d: ["fc", bold(d), "--atlas", atlas(d, ndim=4)]),
    (
        "fc-atlas-empty",
        lambda d: [
            "fc",
            bold(d),
            "--atlas",
            nii(d, np.zeros(SHAPE, np.int16), name="atlas.nii.gz"),
        ],
    ),
    # ---- dfc ----
    ("dfc-window-0", lambda d: ["dfc", tsv(d), "--window", "0"]),
    ("dfc-window-negative", lambda d: ["dfc", tsv(d), "--window", "-5"]),
    ("dfc-window-2", lambda d: ["dfc", tsv(d), "--window", "2"]),
    ("dfc-window-above-T", lambda d: ["dfc", tsv(d), "--window", str(T + 1)]),
    ("dfc-window-not-int", lambda d: ["dfc", tsv(d), "--window", "8.5"]),
    ("dfc-step-0", lambda d: ["dfc", tsv(d), "--window", "8", "--step", "0"]),
    ("dfc-step-negative", lambda d: ["dfc", tsv(d), "--window", "8", "--step", "-1"]),
    ("dfc-lowrank-no-rank", lambda d: ["dfc", tsv(d), "--window", "8", "--kind", "lowrank"]),
    ("dfc-rank-0", lambda d: ["dfc", tsv(d), "--window", "8", "--kind", "factor", "--rank", "0"]),
    (
        "dfc-rank-at-n-series",
        lambda d: ["dfc", tsv(d), "--window", "8", "--kind", "lowrank", "--rank", str(N)],
    ),
    ("dfc-rank-with-triu", lambda d: ["dfc", tsv(d), "--window", "8", "--rank", "2"]),
    ("dfc-sparse-no-threshold", lambda d: ["dfc", tsv(d), "--window", "8", "--kind", "sparse"]),
    ("dfc-threshold-2", lambda d: ["dfc", tsv(d), "--window", "8", "--threshold", "2"]),
    ("dfc-too-short", lambda d: ["dfc", tsv(d, array=_series(t=2)), "--window", "2"]),
    ("dfc-all-constant", lambda d: ["dfc", tsv(d, array=np.full((T, N), 3.0)), "--window", "8"]),
    ("dfc-npy-complex", lambda d: ["dfc", npy(d, _series() * 1j), "--window", "8"]),
    (
        "dfc-nii-nan-in-mask",
        lambda d: ["dfc", bold_with_nan(d), "--mask", mask(d), "--window", "8"],
    ),
    ("dfc-nii-truncated-gz", lambda d: ["dfc", truncated_gz(d), "--window", "8"]),
    ("dfc-out-is-directory", dfc_out_is_directory),
    ("dfc-missing-window", lambda d: ["dfc", tsv(d)]),
    # ---- pairs ----
    ("pairs-window-0", lambda d: ["pairs", tsv(d), "--window", "0"]),
    ("pairs-window-2", lambda d: ["pairs", tsv(d), "--window", "2"]),
    ("pairs-window-above-T", lambda d: ["pairs", tsv(d), "--window", str(T + 1)]),
    ("pairs-step-0", lambda d: ["pairs", tsv(d), "--window", "8", "--step", "0"]),
    ("pairs-threshold-1.5", lambda d: ["pairs", tsv(d), "--window", "8", "--threshold", "1.5"]),
    ("pairs-one-region", lambda d: ["pairs", tsv(d, array=_series(n=1)), "--window", "8"]),
    (
        "pairs-region-counts-differ",
        lambda d: [
            "pairs",
            tsv(d),
            tsv(d, name="sub-02_timeseries.tsv", array=_series(n=N + 1)),
            "--window",
            "8",
        ],
    ),
    ("pairs-same-name-twice", lambda d: ["pairs", tsv(d), tsv(d), "--window", "8"]),
    ("pairs-nan", lambda d: ["pairs", tsv(d, array=np.full((T, N), np.nan)), "--window", "8"]),
    ("pairs-npy-complex", lambda d: ["pairs", npy(d, _series() + 0j), "--window", "8"]),
    ("pairs-nifti-input", lambda d: ["pairs", bold(d), "--window", "8"]),
    ("pairs-bad-format", lambda d: ["pairs", tsv(d), "--window", "8", "--format", "csv"]),
    # ---- cohort ----
    ("cohort-dfc-no-window", lambda d: ["cohort", tsv(d), "--job", "dfc"]),
    ("cohort-window-0", lambda d: ["cohort", tsv(d), "--job", "pairs", "--window", "0"]),
    ("cohort-window-2", lambda d: ["cohort", tsv(d), "--job", "dfc", "--window", "2"]),
    (
        "cohort-step-0",
        lambda d: ["cohort", tsv(d), "--job", "pairs", "--window", "8", "--step", "0"],
    ),
    (
        "cohort-threshold-3",
        lambda d: ["cohort", tsv(d), "--job", "pairs", "--window", "8", "--threshold", "3"],
    ),
    ("cohort-fc-threshold", lambda d: ["cohort", tsv(d), "--job", "fc", "--threshold", "0.5"]),
    ("cohort-fc-kind-sparse", lambda d: ["cohort", tsv(d), "--job", "fc", "--kind", "sparse"]),
    (
        "cohort-lowrank-no-rank",
        lambda d: ["cohort", tsv(d), "--job", "dfc", "--window", "8", "--kind", "lowrank"],
    ),
    ("cohort-no-input-found", lambda d: ["cohort", str(d / "nothing-*.tsv"), "--job", "fc"]),
    ("cohort-unknown-job", lambda d: ["cohort", tsv(d), "--job", "r1dl"]),
    ("cohort-n-jobs-0", lambda d: ["cohort", tsv(d), "--job", "fc", "--n-jobs", "0"]),
    ("cohort-retries-negative", lambda d: ["cohort", tsv(d), "--job", "fc", "--retries", "-1"]),
    # ---- r1dl ----
    (
        "r1dl-atoms-0",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", "0", "--sparsity", "5"],
    ),
    (
        "r1dl-atoms-above-T",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", str(T + 1), "--sparsity", "5"],
    ),
    (
        "r1dl-sparsity-0",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", "2", "--sparsity", "0"],
    ),
    (
        "r1dl-sparsity-1.5",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", "2", "--sparsity", "1.5"],
    ),
    (
        "r1dl-sparsity-above-P",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", "2", "--sparsity", "31"],
    ),
    (
        "r1dl-npy-complex",
        lambda d: [
            "r1dl",
            npy(d, _series(n=30) * (1 + 1j)),
            "--n-components",
            "2",
            "--sparsity",
            "5",
        ],
    ),
    (
        "r1dl-npy-nan",
        lambda d: [
            "r1dl",
            npy(d, np.where(np.eye(T, 30) > 0, np.nan, _series(n=30))),
            "--n-components",
            "2",
            "--sparsity",
            "5",
        ],
    ),
    (
        "r1dl-tsv-nan",
        lambda d: [
            "r1dl",
            tsv(d, array=np.full((T, 6), np.nan)),
            "--n-components",
            "2",
            "--sparsity",
            "2",
        ],
    ),
    (
        "r1dl-npy-random-bytes",
        lambda d: ["r1dl", random_bytes(d, "S.npy"), "--n-components", "2", "--sparsity", "5"],
    ),
    (
        "r1dl-npy-1d",
        lambda d: ["r1dl", npy(d, np.arange(30.0)), "--n-components", "2", "--sparsity", "5"],
    ),
    (
        "r1dl-mask-for-npy",
        lambda d: [
            "r1dl",
            npy(d, _series(n=30)),
            "--mask",
            mask(d),
            "--n-components",
            "2",
            "--sparsity",
            "5",
        ],
    ),
    (
        "r1dl-nii-truncated-gz",
        lambda d: [
            "r1dl",
            truncated_gz(d),
            "--mask",
            mask(d),
            "--n-components",
            "2",
            "--sparsity",
            "3",
        ],
    ),
    (
        "r1dl-nii-nan-in-mask",
        lambda d: [
            "r1dl",
            bold_with_nan(d),
            "--mask",
            mask(d),
            "--n-components",
            "2",
            "--sparsity",
            "3",
        ],
    ),
    (
        "r1dl-tol-0",
        lambda d: [
            "r1dl",
            npy(d, _series(n=30)),
            "--n-components",
            "2",
            "--sparsity",
            "5",
            "--tol",
            "0",
        ],
    ),
    (
        "r1dl-max-iter-0",
        lambda d: [
            "r1dl",
            npy(d, _series(n=30)),
            "--n-components",
            "2",
            "--sparsity",
            "5",
            "--max-iter",
            "0",
        ],
    ),
    (
        "r1dl-sparsity-text",
        lambda d: ["r1dl", npy(d, _series(n=30)), "--n-components", "2", "--sparsity", "many"],
    ),
    # ---- life ----
    ("life-dwi-random-bytes", lambda d: life(d, dwi=random_bytes(d, "sub-01_dwi.nii.gz"))),
    (
        "life-dwi-truncated-gz",
        lambda d: life(d, dwi=truncated_gz(d, "sub-01_dwi.nii.gz", make=dwi_image)),
    ),
    (
        "life-dwi-3d",
        lambda d: life(d, dwi=nii(d, np.ones(DWI_SHAPE, np.float32), name="sub-01_dwi.nii.gz")),
    ),
    ("life-bvals-count", lambda d: life(d, bvals=BVALS[:-1])),
    ("life-bvecs-count", lambda d: life(d, bvecs=BVECS[:-1])),
    ("life-bvecs-norm-3", lambda d: life(d, bvecs=BVECS * 3)),
    ("life-bvals-text", lambda d: life(d) + ["--bvals", raw(d, "bad.bval", b"zero one two\n")]),
    (
        "life-no-b0",
        lambda d: life(d, bvals=np.full(7, 1000.0), bvecs=np.r_[[[1, 0, 0]], BVECS[1:]]),
    ),
    ("life-tractogram-empty", lambda d: life(d, streamlines=[])),
    (
        "life-tractogram-outside",
        lambda d: life(
            d,
            streamlines=[
                np.array([[50.0, 50.0, 50.0], [60.0, 60.0, 60.0]]),
                np.array([[-40.0, 0.0, 0.0], [-30.0, 1.0, 1.0]]),
            ],
        ),
    ),
    (
        "life-tractogram-random-bytes",
        lambda d: life(d, tract_name="tracks.tck") + ["--tractogram", random_bytes(d, "junk.tck")],
    ),
    ("life-tractogram-suffix", lambda d: life(d) + ["--tractogram", raw(d, "t.txt", b"1 2 3\n")]),
    ("life-mask-wrong-shape", lambda d: life(d, "--mask", mask(d, shape=(5, 4, 4)))),
    ("life-iters-0", lambda d: life(d, "--max-iter", "0")),
    ("life-lambda-negative", lambda d: life(d, "--lambda", "-1")),
    # ---- classify ----
    ("classify-no-label-column", lambda d: classify(d, label="diagnosis")),
    (
        "classify-no-participant-id",
        lambda d: classify(
            d,
            participants="subject\tgroup\n"
            + "".join(f"sub-{i:02d}\t{'a' if i % 2 else 'b'}\n" for i in range(1, 7)),
        ),
    ),
    (
        "classify-one-class",
        lambda d: classify(
            d,
            participants="participant_id\tgroup\n"
            + "".join(f"sub-{i:02d}\tcontrol\n" for i in range(1, 7)),
        ),
    ),
    (
        "classify-subject-missing",
        lambda d: classify(d, participants="participant_id\tgroup\nsub-01\ta\nsub-02\tb\n"),
    ),
    ("classify-folds-1", lambda d: classify(d, "--folds", "1")),
    (
        "classify-feature-random-bytes",
        lambda d: classify(d, extra_features=[random_bytes(d, "sub-07_relmat.npy")]),
    ),
    (
        "classify-feature-sizes-differ",
        lambda d: classify(d, matrix=lambda i: np.corrcoef(_series(seed=i, n=4 + (i == 3)).T)),
    ),
    ("classify-feature-nan", lambda d: classify(d, matrix=lambda i: np.full((4, 4), np.nan))),
    ("classify-top-0", lambda d: classify(d, "--top", "0")),
    ("classify-positive-unknown", lambda d: classify(d, "--positive", "martian")),
]


def _complete_outputs(out):
    """Files under ``out`` that could pass for a finished result: any visible
    file, and any HDF5 file carrying a ``complete`` flag."""
    if not out.exists():
        return []
    found = []
    for path in out.rglob("*"):
        if not path.is_file():
            continue
        if not path.name.startswith("."):
            found.append(path)
            continue
        try:
            with h5py.File(path, "r") as h5:
                if h5.attrs.get("complete", False):
                    found.append(path)
        except OSError:
            pass
    return found


def test_catalogue_is_large_and_unique():
    ids = [case_id for case_id, _ in CASES]
    assert len(ids) >= 60 and len(set(ids)) == len(ids)
    commands = {case_id.split("-")[0] for case_id in ids}
    assert commands == {"fc", "dfc", "pairs", "cohort", "r1dl", "life", "classify"}


@pytest.mark.parametrize("build", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(build, tmp_path, capsys):
    argv = build(tmp_path)
    out = tmp_path / "out"
    command = argv[0]
    extra = ["--out", str(out), "-q"]
    if command != "classify" and "--device" not in argv:
        extra += ["--device", "cpu"]
    if command == "cohort":
        extra += ["--backend", "serial"]
    capsys.readouterr()
    status = main([*argv, *extra])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"connscale {command}: error: "), lines[0]
    assert _complete_outputs(out) == []


# --------------------------------------------------------------------------
# Flags: a bad value, a missing or incompatible option, a missing input file
# or an --out that is a file is refused at once, in one line that names the
# flag (or INPUT) and the value typed and says what is allowed, before any
# input is read: the inputs below are empty files, which would fail to load.
# --------------------------------------------------------------------------


def empty(d, name):
    path = d / name
    path.write_bytes(b"")
    return str(path)


def _fc(d, *extra):
    return ["fc", empty(d, "sub-01_timeseries.tsv"), "--out", str(d / "out"), *extra]


def _dfc(d, *extra):
    return [
        "dfc",
        empty(d, "sub-01_timeseries.tsv"),
        "--window",
        "8",
        "--out",
        str(d / "o"),
        *extra,
    ]


def _states(d, *extra):
    return ["dfc-states", empty(d, "sub-01_timeseries.tsv"), "--out", str(d / "o"), *extra]


def _pairs(d, *extra):
    return [
        "pairs",
        empty(d, "sub-01_timeseries.tsv"),
        "--window",
        "8",
        "--out",
        str(d / "o"),
        *extra,
    ]


def _cohort(d, *extra):
    return ["cohort", empty(d, "sub-01_timeseries.tsv"), "--out", str(d / "o"), *extra]


def _bids(d, *extra, level="participant"):
    (d / "fmriprep").mkdir(exist_ok=True)
    return ["bids", str(d / "fmriprep"), str(d / "o"), level, *extra]


def _bids_ready(d, *extra):
    atlas = empty(d, "atlas.nii.gz")
    return _bids(d, "--atlas", atlas, "--atlas-name", "Schaefer", "--denoise", "simple", *extra)


def _maps(d, *extra):
    return ["maps", empty(d, "sub-01_bold.nii.gz"), "--out", str(d / "o"), *extra]


def _r1dl(d, *extra):
    return ["r1dl", empty(d, "S.npy"), "-k", "2", "--sparsity", "5", "--out", str(d / "o"), *extra]


def _life(d, *extra):
    files = [empty(d, n) for n in ("dwi.nii.gz", "dwi.bval", "dwi.bvec", "t.tck")]
    return [
        "life",
        files[0],
        "--bvals",
        files[1],
        "--bvecs",
        files[2],
        "--tractogram",
        files[3],
        "--out",
        str(d / "o"),
        *extra,
    ]


def _classify(d, *extra):
    subjects = [empty(d, f"sub-0{i}_relmat.npy") for i in (1, 2)]
    table = empty(d, "participants.tsv")
    return ["classify", *subjects, "--participants", table, "--label", "g", "--out", str(d), *extra]


# (id, builder(d) -> argv, what the one line must hold: the flag, the value, what is allowed)
FLAG_CASES = [
    ("fc-threshold", lambda d: _fc(d, "--threshold", "1.5"), ["--threshold", "'1.5'", "[-1, 1]"]),
    ("fc-threshold-text", lambda d: _fc(d, "--threshold", "high"), ["--threshold", "'high'"]),
    ("fc-kind", lambda d: _fc(d, "--kind", "full"), ["--kind", "'full'", "'dense'"]),
    ("fc-dtype", lambda d: _fc(d, "--dtype", "float16"), ["--dtype", "'float16'", "'float32'"]),
    ("fc-device", lambda d: _fc(d, "--device", "gpu"), ["--device", "'gpu'", "'cuda:N'"]),
    ("fc-memory", lambda d: _fc(d, "--memory-limit", "8XB"), ["--memory-limit", "'8XB'", "8GB"]),
    ("fc-memory-0", lambda d: _fc(d, "--memory-limit", "0"), ["--memory-limit", "'0'"]),
    ("fc-precision", lambda d: _fc(d, "--precision", "fast"), ["--precision", "'fast'", "'exact'"]),
    ("fc-atlas-name", lambda d: _fc(d, "--atlas-name", "a_b"), ["--atlas-name", "'a_b'", "digits"]),
    (
        "fc-threshold-with-triu",
        lambda d: _fc(d, "--kind", "triu", "--threshold", "0.5"),
        ["--threshold", "--kind triu", "sparse"],
    ),
    ("fc-mask-for-table", lambda d: _fc(d, "--mask", empty(d, "m.nii")), ["--mask", "NIfTI"]),
    (
        "fc-missing-input",
        lambda d: ["fc", str(d / "nope.tsv"), "--out", str(d / "o")],
        ["INPUT", "nope.tsv", "no such file"],
    ),
    (
        "fc-input-is-folder",
        lambda d: ["fc", str(d), "--out", str(d / "o")],
        ["INPUT", "is a folder"],
    ),
    (
        "fc-missing-atlas",
        lambda d: _fc(d, "--atlas", str(d / "atlas.nii.gz")),
        ["--atlas", "atlas.nii.gz", "no such file"],
    ),
    (
        "fc-out-is-a-file",
        lambda d: ["fc", empty(d, "sub-01_timeseries.tsv"), "--out", empty(d, "results")],
        ["--out", "results", "is a file", "folder"],
    ),
    (
        "fc-out-under-a-file",
        lambda d: ["fc", empty(d, "sub-01_timeseries.tsv"), "--out", empty(d, "f") + "/sub"],
        ["--out", "f/sub", "under the file"],
    ),
    ("fc-unknown-suffix", lambda d: ["fc", empty(d, "x.xyz"), "--out", str(d)], ["INPUT", "x.xyz"]),
    ("dfc-window-2", lambda d: _dfc(d, "--window", "2"), ["--window", "'2'", ">= 3", "'44s'"]),
    ("dfc-window-float", lambda d: _dfc(d, "--window", "8.5"), ["--window", "'8.5'", ">= 3"]),
    ("dfc-window-seconds-0", lambda d: _dfc(d, "--window", "0s"), ["--window", "'0s'"]),
    ("dfc-window-text", lambda d: _dfc(d, "--window", "long"), ["--window", "'long'"]),
    ("dfc-step-0", lambda d: _dfc(d, "--step", "0"), ["--step", "'0'", ">= 1"]),
    ("dfc-step-negative", lambda d: _dfc(d, "--step", "-2"), ["--step", "'-2'", ">= 1"]),
    ("dfc-t-r-0", lambda d: _dfc(d, "--t-r", "0"), ["--t-r", "'0'", "> 0"]),
    ("dfc-t-r-inf", lambda d: _dfc(d, "--t-r", "inf"), ["--t-r", "'inf'", "> 0"]),
    ("dfc-taper", lambda d: _dfc(d, "--taper", "hann"), ["--taper", "'hann'", "'gaussian'"]),
    ("dfc-taper-sigma", lambda d: _dfc(d, "--taper-sigma", "-1"), ["--taper-sigma", "'-1'"]),
    ("dfc-rank-0", lambda d: _dfc(d, "--kind", "factor", "--rank", "0"), ["--rank", "'0'", ">= 1"]),
    ("dfc-power-iter", lambda d: _dfc(d, "--power-iterations", "-1"), ["--power-iterations"]),
    ("dfc-seed", lambda d: _dfc(d, "--seed", "-1"), ["--seed", "'-1'", ">= 0"]),
    ("dfc-method", lambda d: _dfc(d, "--method", "qr"), ["--method", "'qr'", "'svd'"]),
    ("dfc-lowrank-no-rank", lambda d: _dfc(d, "--kind", "lowrank"), ["--kind lowrank", "--rank"]),
    ("dfc-sparse-no-threshold", lambda d: _dfc(d, "--kind", "sparse"), ["--kind sparse"]),
    ("dfc-rank-with-triu", lambda d: _dfc(d, "--rank", "2"), ["--rank", "--kind triu"]),
    ("dfc-error-with-triu", lambda d: _dfc(d, "--error"), ["--error", "--kind triu"]),
    ("dfc-states-k-0", lambda d: _states(d, "--window", "8", "--states", "0"), ["--states", "'0'"]),
    ("dfc-states-n-init", lambda d: _states(d, "--window", "8", "--n-init", "0"), ["--n-init"]),
    ("dfc-states-max-iter", lambda d: _states(d, "--window", "8", "--max-iter", "x"), ["'x'"]),
    ("dfc-states-metric", lambda d: _states(d, "--window", "8", "--metric", "cos"), ["--metric"]),
    ("dfc-states-no-window", lambda d: _states(d), ["--window", "sub-01_timeseries.tsv"]),
    ("pairs-window-2", lambda d: _pairs(d, "--window", "2"), ["--window", "'2'", ">= 3"]),
    ("pairs-step-0", lambda d: _pairs(d, "--step", "0"), ["--step", "'0'", ">= 1"]),
    ("pairs-threshold", lambda d: _pairs(d, "--threshold", "2"), ["--threshold", "'2'", "[-1, 1]"]),
    (
        "pairs-nifti-input",
        lambda d: ["pairs", empty(d, "sub-01_bold.nii.gz"), "--window", "8", "--out", str(d)],
        ["INPUT", "sub-01_bold.nii.gz", ".tsv"],
    ),
    ("cohort-n-jobs-0", lambda d: _cohort(d, "--job", "fc", "--n-jobs", "0"), ["--n-jobs", "'0'"]),
    ("cohort-n-jobs-x", lambda d: _cohort(d, "--job", "fc", "--n-jobs", "all"), ["--n-jobs", "-1"]),
    ("cohort-retries", lambda d: _cohort(d, "--job", "fc", "--retries", "-1"), ["--retries"]),
    ("cohort-window-2", lambda d: _cohort(d, "--job", "dfc", "--window", "2"), ["--window", "'2'"]),
    ("cohort-backend", lambda d: _cohort(d, "--job", "fc", "--backend", "ray"), ["--backend"]),
    ("cohort-dfc-no-window", lambda d: _cohort(d, "--job", "dfc"), ["--job dfc", "--window"]),
    ("cohort-fc-rank", lambda d: _cohort(d, "--job", "fc", "--rank", "2"), ["--rank", "--job fc"]),
    (
        "cohort-pairs-kind",
        lambda d: _cohort(d, "--job", "pairs", "--window", "8", "--kind", "sparse"),
        ["--kind", "--job"],
    ),
    (
        "bids-missing-atlas-name",
        lambda d: _bids(d, "--atlas", empty(d, "a.nii.gz"), "--denoise", "simple"),
        ["--atlas-name"],
    ),
    ("bids-denoise", lambda d: _bids(d, "--denoise", "aggressive"), ["--denoise", "'aggressive'"]),
    ("bids-measures", lambda d: _bids_ready(d, "--measures", "fc,bogus"), ["--measures", "bogus"]),
    ("bids-dummy-scans", lambda d: _bids_ready(d, "--dummy-scans", "x"), ["--dummy-scans", "auto"]),
    ("bids-fd-threshold-0", lambda d: _bids_ready(d, "--fd-threshold", "0"), ["'0'", "> 0"]),
    ("bids-windowed", lambda d: _bids_ready(d, "--measures", "fc,dfc"), ["--window-length"]),
    ("bids-window-2", lambda d: _bids_ready(d, "--window-length", "2"), ["--window-length", "'2'"]),
    ("bids-step-0", lambda d: _bids_ready(d, "--step", "0"), ["--step", "'0'"]),
    ("bids-n-jobs-0", lambda d: _bids_ready(d, "--n-jobs", "0"), ["--n-jobs", "'0'", "-1"]),
    ("bids-gpus", lambda d: _bids_ready(d, "--gpus", "0"), ["--gpus", "'0'", "'all'"]),
    ("bids-low-pass", lambda d: _bids_ready(d, "--low-pass", "0"), ["--low-pass", "'0'", "> 0"]),
    ("bids-t-r", lambda d: _bids_ready(d, "--t-r", "-2"), ["--t-r", "'-2'", "> 0"]),
    ("bids-sparsity", lambda d: _bids_ready(d, "--sparsity", "0"), ["--sparsity", "'0'"]),
    ("bids-n-atoms", lambda d: _bids_ready(d, "--n-atoms", "0"), ["--n-atoms", "'0'"]),
    (
        "bids-degree-thresholds",
        lambda d: _bids_ready(d, "--degree-thresholds", "0.2,1.5"),
        ["--degree-thresholds", "'1.5'", "[-1, 1]"],
    ),
    ("bids-pairs-thr", lambda d: _bids_ready(d, "--pairs-threshold", "2"), ["--pairs-threshold"]),
    ("bids-atlas-name", lambda d: _bids(d, "--atlas-name", "Schaefer_400"), ["'Schaefer_400'"]),
    ("bids-folds", lambda d: _bids(d, "--folds", "1", level="group"), ["--folds", "'1'", ">= 2"]),
    (
        "bids-group-features",
        lambda d: _bids(d, "--group-features", "edges,nodes", level="group"),
        ["--group-features", "nodes", "edges, dfc, states, maps"],
    ),
    ("bids-repeats", lambda d: _bids(d, "--repeats", "0", level="group"), ["--repeats", "'0'"]),
    ("bids-states", lambda d: _bids(d, "--states", "0", level="group"), ["--states", "'0'"]),
    ("bids-seed", lambda d: _bids(d, "--random-state", "-1", level="group"), ["--random-state"]),
    ("bids-level", lambda d: _bids(d, level="run"), ["level", "'run'", "'group'"]),
    (
        "bids-no-derivatives",
        lambda d: ["bids", str(d / "nope"), str(d / "o"), "group"],
        ["DERIVATIVES", "nope", "no such folder"],
    ),
    ("maps-no-map", lambda d: _maps(d), ["--degree", "--ecm"]),
    ("maps-degree", lambda d: _maps(d, "--degree", "0.3,2"), ["--degree", "'2'", "[-1, 1]"]),
    ("maps-sparsity", lambda d: _maps(d, "--sparsity", "0"), ["--sparsity", "'0'", "(0, 1]"]),
    ("maps-seed", lambda d: _maps(d, "--seed", "1,2"), ["--seed", "'1,2'", "x,y,z"]),
    ("maps-seed-radius", lambda d: _maps(d, "--seed=1,2,3", "--seed-radius", "0"), ["'0'", "> 0"]),
    ("maps-radius-no-seed", lambda d: _maps(d, "--gcor", "--seed-radius", "6"), ["--seed-radius"]),
    (
        "maps-table-input",
        lambda d: ["maps", empty(d, "sub-01_timeseries.tsv"), "--gcor", "--out", str(d)],
        ["NIfTI", "sub-01_timeseries.tsv"],
    ),
    ("r1dl-k-0", lambda d: _r1dl(d, "-k", "0"), ["--n-components", "'0'", ">= 1"]),
    ("r1dl-sparsity", lambda d: _r1dl(d, "--sparsity", "1.5"), ["--sparsity", "'1.5'", "(0, 1]"]),
    ("r1dl-tol", lambda d: _r1dl(d, "--tol", "0"), ["--tol", "'0'", "> 0"]),
    ("r1dl-max-iter", lambda d: _r1dl(d, "--max-iter", "0"), ["--max-iter", "'0'"]),
    ("r1dl-n-init", lambda d: _r1dl(d, "--n-init", "0"), ["--n-init", "'0'"]),
    ("r1dl-block-size", lambda d: _r1dl(d, "--block-size", "0"), ["--block-size", "'0'"]),
    ("r1dl-storage", lambda d: _r1dl(d, "--storage", "ram"), ["--storage", "'ram'", "'host'"]),
    ("r1dl-seed", lambda d: _r1dl(d, "--seed", "-3"), ["--seed", "'-3'"]),
    ("r1dl-mask-for-npy", lambda d: _r1dl(d, "--mask", empty(d, "m.nii")), ["--mask", "NIfTI"]),
    ("life-max-iter", lambda d: _life(d, "--max-iter", "0"), ["--max-iter", "'0'", ">= 1"]),
    ("life-lambda", lambda d: _life(d, "--lambda", "-1"), ["--lambda", "'-1'", ">= 0"]),
    ("life-sweep", lambda d: _life(d, "--lambda-sweep", "0.1,x"), ["--lambda-sweep", "'x'"]),
    ("life-tol", lambda d: _life(d, "--tol", "-1"), ["--tol", "'-1'"]),
    ("life-checkpoint", lambda d: _life(d, "--checkpoint-every", "0"), ["--checkpoint-every"]),
    ("life-measure", lambda d: _life(d, "--measure", "fa"), ["--measure", "'fa'", "'weight'"]),
    (
        "life-missing-bvals",
        lambda d: _life(d) + ["--bvals", str(d / "none.bval")],
        ["--bvals", "none.bval", "no such file"],
    ),
    ("classify-folds", lambda d: _classify(d, "--folds", "1"), ["--folds", "'1'", ">= 2"]),
    ("classify-repeats", lambda d: _classify(d, "--repeats", "0"), ["--repeats", "'0'"]),
    ("classify-n-features", lambda d: _classify(d, "--n-features", "1.5"), ["'1.5'", "'cv'"]),
    ("classify-permutations", lambda d: _classify(d, "--permutations", "-1"), ["--permutations"]),
    ("classify-top", lambda d: _classify(d, "--top", "0"), ["--top", "'0'", ">= 1"]),
    ("classify-n-jobs", lambda d: _classify(d, "--n-jobs", "0"), ["--n-jobs", "'0'"]),
    ("classify-model", lambda d: _classify(d, "--model", "rf"), ["--model", "'rf'", "'svm'"]),
    ("demo-n-voxels", lambda d: ["demo", "--n-voxels", "1", "--out", str(d)], ["--n-voxels"]),
    ("demo-device", lambda d: ["demo", "--device", "tpu", "--out", str(d)], ["--device", "'tpu'"]),
]


def test_flag_catalogue_covers_every_command():
    from connscale.cli.main import _COMMANDS

    ids = [case_id for case_id, _, _ in FLAG_CASES]
    assert len(set(ids)) == len(ids)
    assert [c for c in _COMMANDS if not any(i.startswith(f"{c}-") for i in ids)] == []


@pytest.mark.parametrize(
    "build, expected", [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES]
)
def test_bad_flag_names_flag_value_and_what_is_allowed(build, expected, tmp_path, capsys):
    argv = build(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"connscale {argv[0]}: error: "), lines[0]
    for text in expected:
        assert text in lines[0], (text, lines[0])
    for internal in ("window_length", "n_jobs", "random_state", "parameter of", "a str", "int "):
        assert internal not in lines[0], (internal, lines[0])
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written, not even --out


def test_flag_errors_come_before_any_heavy_import(tmp_path):
    """Every case of FLAG_CASES, in one fresh interpreter: none imports torch,
    nilearn, nibabel, pybids, matplotlib, h5py, scipy, sklearn, dask or pyspark."""
    argvs = [build(tmp_path / case_id) for case_id, build, _ in _in_folders(FLAG_CASES, tmp_path)]
    code = (
        "import contextlib, io, json, sys\n"
        "from connscale.cli.main import main\n"
        f"argvs = json.loads({json.dumps(json.dumps(argvs))})\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(a) for a in argvs]\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_src_env(), check=True
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["codes"] == [2] * len(argvs)
    assert report["heavy"] == []


def _in_folders(cases, root):
    for case in cases:
        (root / case[0]).mkdir()
        yield case


HEAVY = (
    "torch",
    "nilearn",
    "nibabel",
    "bids",
    "matplotlib",
    "h5py",
    "scipy",
    "sklearn",
    "dask",
    "distributed",
    "pyspark",
    "pandas",
)


def _src_env() -> dict:
    """The environment of a child interpreter that imports this checkout's connscale."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def test_n_jobs_minus_one_is_every_core(tmp_path, capsys):
    from connscale._validation import resolve_n_jobs, validate_parameter_values
    from connscale.engines import LocalEngine

    cpus = os.cpu_count() or 1
    assert resolve_n_jobs(None) == resolve_n_jobs(-1) == cpus
    assert resolve_n_jobs(-cpus) == 1 and resolve_n_jobs(3) == 3
    for bad in (0, -cpus - 1, 1.5, True):
        with pytest.raises(ValueError, match="'n_jobs' must be"):
            resolve_n_jobs(bad)
    assert LocalEngine(-1).n_jobs == cpus  # no worker starts before the first task
    # One declared constraint wherever the API takes n_jobs.
    from connscale.bidsapp.participant import run_participant
    from connscale.classify.cross_validation import cross_validate
    from connscale.cohort import run_cohort

    for entry in (run_cohort, run_participant, cross_validate):
        constraints = entry.parameter_constraints
        validate_parameter_values(constraints, {"n_jobs": -1}, entry.__name__)
        with pytest.raises(ValueError, match="-1 for every core"):
            validate_parameter_values(constraints, {"n_jobs": 0}, entry.__name__)
    # The command line: --n-jobs -1 runs (it exited 2), for every command taking it.
    path = tsv(tmp_path)
    argv = ["cohort", path, "--job", "fc", "--out", str(tmp_path / "o"), "--n-jobs", "-1"]
    assert main([*argv, "--backend", "serial", "-q"]) == 0, capsys.readouterr().err
    from connscale.cli.main import build_parser

    parser = build_parser()
    for command in ("cohort", "bids", "classify"):
        actions = {a.dest: a for a in parser.subcommands[command]._actions}
        assert actions["n_jobs"].type("-1") == -1 and actions["n_jobs"].type("-2") == -2


# --------------------------------------------------------------------------
# The same checks through the Python API, and the lossy-but-valid warnings
# --------------------------------------------------------------------------


def test_one_window_minimum_everywhere():
    from connscale._validation import MIN_WINDOW_LENGTH
    from connscale.cohort import check_job_params
    from connscale.fc.dynamic import dynamic_correlation
    from connscale.fc.pairs import pairwise_dfc

    x = _series()
    short = MIN_WINDOW_LENGTH - 1
    message = (
        rf"The 'window_length' parameter of .+ must be an int in the range "
        rf"\[{MIN_WINDOW_LENGTH}, inf\) or a str. Got {short} instead."
    )
    for call in (
        lambda: dynamic_correlation(x, short, device="cpu"),
        lambda: pairwise_dfc(x[None], short, device="cpu"),
        lambda: check_job_params("pairs", {"window_length": short}),
        lambda: check_job_params("dfc", {"window_length": short}),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    dynamic_correlation(x, MIN_WINDOW_LENGTH, device="cpu")
    pairwise_dfc(x[None], MIN_WINDOW_LENGTH, device="cpu")


def test_complex_input_refused_by_every_entry_point():
    from connscale import correlation
    from connscale.fc.dynamic import dynamic_correlation
    from connscale.fc.pairs import pairwise_dfc
    from connscale.networks._r1dl import r1dl

    x = _series() * (1 + 1e-3j)
    for call in (
        lambda: correlation(x, device="cpu"),
        lambda: dynamic_correlation(x, 8, device="cpu"),
        lambda: pairwise_dfc(x[None], 8, device="cpu"),
        lambda: r1dl(x, 1, 2, device="cpu"),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no ComplexWarning on the way
            with pytest.raises(ValueError, match="real numbers"):
                call()


def test_lowrank_rank_at_least_window_warns():
    from connscale.fc.dynamic import dynamic_correlation

    x = _series(n=12)
    with pytest.warns(UserWarning, match=r"'rank' \(8\) >= 'window_length' \(8\)"):
        dynamic_correlation(x, 8, 4, kind="lowrank", rank=8, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynamic_correlation(x, 8, 4, kind="lowrank", rank=7, device="cpu")
        dynamic_correlation(x, 8, 4, kind="factor", rank=9, device="cpu")


def test_r1dl_all_zeros_warns_and_atoms_bounded_by_time_points():
    from connscale.networks._r1dl import r1dl

    with pytest.warns(UserWarning, match="2 of 2 atoms are empty"):
        result = r1dl(np.zeros((T, 10)), 2, 3, random_state=0, device="cpu")
    assert result.loadings.nnz == 0
    with pytest.raises(ValueError, match=rf"at most the number of time points \({T}\)"):
        r1dl(_series(n=10), T + 1, 3, device="cpu")


def test_out_a_directory_is_refused_before_any_work(tmp_path):
    from connscale import correlation
    from connscale.fc.dynamic import dynamic_correlation

    for call in (
        lambda: correlation(_series(), kind="triu", device="cpu", out=tmp_path),
        lambda: dynamic_correlation(_series(), 8, device="cpu", out=tmp_path),
    ):
        with pytest.raises(ValueError, match="which is a directory"):
            call()
    assert list(tmp_path.iterdir()) == []


def test_bvecs_close_to_unit_norm_accepted(tmp_path):
    # Rounding in a text file (norm 1 +- 1e-3) is not an error; norm 3 is (above).
    bvecs = BVECS.copy()
    bvecs[1:] *= 1.001
    status = main(
        [
            "life",
            *life_files(tmp_path, bvecs=bvecs),
            "--max-iter",
            "2",
            "--sphere",
            "20",
            "--out",
            str(tmp_path / "out"),
            "--device",
            "cpu",
            "-q",
        ]
    )
    assert status == 0
