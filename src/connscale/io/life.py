"""LiFE's files: streamline weights and the λ-sweep table.

The pruned tractogram is :func:`connscale.io.streamlines.save_streamlines`,
the RMSE map :func:`connscale.io.nifti.save_nifti_gz`, the connectome a relmat.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from connscale.io.atomic import atomic_path, write_text_atomic

__all__ = ["save_weights", "write_lambda_sweep"]


def save_weights(weights: npt.ArrayLike, path: str | os.PathLike) -> Path:
    """Write weights as ``.npy`` or as a ``.tsv`` (streamline index, weight)."""
    path = Path(path)
    weights = np.asarray(weights, dtype=np.float64)
    with atomic_path(path) as tmp:
        if path.suffix == ".npy":
            with open(tmp, "wb") as fh:
                np.save(fh, weights)
        elif path.suffix == ".tsv":
            with open(tmp, "w") as fh:
                fh.write("streamline\tweight\n")
                fh.writelines(f"{i}\t{w:.9g}\n" for i, w in enumerate(weights))
        else:
            raise ValueError(f"Weights are written as .npy or .tsv; got '{path.name}'.")
    return path


_SWEEP_COLUMNS = (
    "lambda",
    "weight_sum",
    "n_nonzero",
    "cv_rmse_median",
    "rmse_median",
    "objective",
    "n_iter",
)


def write_lambda_sweep(path: str | os.PathLike, rows: Iterable[Mapping]) -> Path:
    """Write the rows of :func:`connscale.life.lambda_sweep` as a TSV, atomically."""
    lines = ["\t".join(_SWEEP_COLUMNS)]
    lines += [
        f"{r['lam']:.9g}\t{r['weight_sum']:.9g}\t{r['n_nonzero']}\t"
        f"{r['cv_rmse_median']:.9g}\t{r['rmse_median']:.9g}\t{r['objective']:.9g}\t"
        f"{r['n_iter']}"
        for r in rows
    ]
    return write_text_atomic(path, "\n".join(lines) + "\n")
