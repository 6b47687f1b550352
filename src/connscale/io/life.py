"""LiFE's streamline weights as files (the pruned tractogram is
:func:`connscale.io.streamlines.save_streamlines`, the connectome a relmat)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from connscale.io._atomic import atomic_path

__all__ = ["save_weights"]


def save_weights(weights, path) -> Path:
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
