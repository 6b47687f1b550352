"""The files of an r1DL run (``connscale r1dl``), each written atomically.

Named by suffix and extension; ``connscale r1dl`` puts them in
``sub-<s>/[ses-<t>/]func/`` as ``<source>_meas-R1DL_<suffix><extension>``
(``<source>`` the input's BIDS entities, see :mod:`connscale.io.bids`)::

components.npz      sparse (n_atoms, n_voxels) loadings (scipy.sparse CSR)
components.nii.gz   the loadings as a 4-D image (image inputs only)
mixing.tsv          the (n_timepoints, n_atoms) dictionary, one column
                    per network (network_000, ...)
iterations.tsv      per network: updates, convergence, non-zero voxels
iterations.json     the run's summary (n_atoms, sparsity, iterations, info)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from connscale.io.atomic import atomic_path, write_text_atomic
from connscale.io.nifti import save_nifti_gz
from connscale.io.tables import write_float_table

if TYPE_CHECKING:
    import scipy.sparse as sp
    from nibabel.spatialimages import SpatialImage

__all__ = ["network_names", "write_r1dl"]


def network_names(n_atoms: int) -> list[str]:
    """``network_000``, ``network_001``, ...: the names of the networks' columns."""
    return [f"network_{k:03d}" for k in range(n_atoms)]


def write_r1dl(
    path_of: Callable[[str], Path],
    *,
    loadings: sp.spmatrix | sp.sparray,
    dictionary: np.ndarray,
    n_iter: np.ndarray,
    converged: np.ndarray,
    sparsity: int,
    mean_iterations: float,
    info: dict,
    maps_img: SpatialImage | None = None,
) -> dict:
    """Write the files of an r1DL run (see the module docstring).

    Parameters
    ----------
    path_of : callable
        Maps a file's suffix and extension (``components.npz``...) to the
        path to write it at.
    loadings : scipy.sparse matrix of shape (n_atoms, n_voxels)
    dictionary : ndarray of shape (n_timepoints, n_atoms)
    n_iter, converged : ndarray of shape (n_atoms,)
    sparsity, mean_iterations, info
        The run's summary values.
    maps_img : nibabel image or None
        The loadings as an image (written as ``components.nii.gz``).

    Returns
    -------
    dict
        The summary written to ``iterations.json``.
    """
    import scipy.sparse as sp

    n_atoms = dictionary.shape[1]
    names = network_names(n_atoms)
    with atomic_path(path_of("components.npz")) as tmp, open(tmp, "wb") as fh:
        sp.save_npz(fh, loadings)
    if maps_img is not None:
        save_nifti_gz(path_of("components.nii.gz"), maps_img)
    write_float_table(path_of("mixing.tsv"), dictionary, names, fmt="%.8g")
    nnz = np.diff(loadings.indptr)
    lines = ["network\tn_iter\tconverged\tn_voxels"]
    lines += [
        f"{names[k]}\t{n_iter[k]}\t{str(bool(converged[k])).lower()}\t{nnz[k]}"
        for k in range(n_atoms)
    ]
    write_text_atomic(path_of("iterations.tsv"), "\n".join(lines) + "\n")
    summary = {
        "n_atoms": n_atoms,
        "sparsity": sparsity,
        "mean_iterations": mean_iterations,
        "n_iter": n_iter.tolist(),
        "converged": converged.tolist(),
        "info": info,
    }
    write_text_atomic(path_of("iterations.json"), json.dumps(summary, indent=2) + "\n")
    return summary
