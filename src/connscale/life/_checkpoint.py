"""Checkpoints of the SBB-NNLS solver, so a killed LiFE fit resumes.

A checkpoint folder holds one file per solved problem, named after its key
(the fingerprint of the model's signal and column scales, λ, the iteration
budget, the tolerance and the warm start): ``sbb_<key>.npz`` with the
solver's state (k, x, g, g_old, the objective histories, and the stop
reason once it stopped; see :mod:`connscale.life.sbb`). One folder can
therefore serve every solve of a run (a λ sweep, the cross-validation
fits). Files are written whole, flushed, then renamed.
"""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from connscale.io.atomic import atomic_path
from connscale.io.fingerprint import array_fingerprint, run_fingerprint

__all__ = ["SolverCheckpoint", "solver_key"]

logger = logging.getLogger("connscale")

_FORMAT = "connscale-sbb-state-1"


def _numpy(t: torch.Tensor | npt.ArrayLike) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def solver_key(
    signal: torch.Tensor | npt.ArrayLike,
    column_scale: torch.Tensor | npt.ArrayLike,
    *,
    x0: torch.Tensor | npt.ArrayLike | None,
    **parameters,
) -> str:
    """Digest identifying one SBB problem (see the module docstring)."""
    inputs = [
        {"signal": array_fingerprint(_numpy(signal))},
        {"column_scale": array_fingerprint(_numpy(column_scale))},
    ]
    x0 = None if x0 is None else array_fingerprint(_numpy(x0))
    return run_fingerprint(inputs, {**parameters, "x0": x0})["digest"]


class SolverCheckpoint:
    """The saved state of one SBB problem in a checkpoint folder.

    Parameters
    ----------
    folder : path
        The checkpoint folder (created on the first save).
    key : str
        :func:`solver_key` of the problem.
    """

    def __init__(self, folder: str | os.PathLike, key: str) -> None:
        self.folder = Path(folder)
        self.key = str(key)
        self.path = self.folder / f"sbb_{self.key[:32]}.npz"

    def load(self) -> dict | None:
        """Return the saved state, or None when there is none (or it cannot be read)."""
        if not self.path.is_file() or self.path.is_symlink():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as data:
                if str(data["format"]) != _FORMAT or str(data["key"]) != self.key:
                    return None
                state = {name: data[name] for name in ("x", "g", "g_old")}
                state["k"] = int(data["k"])
                state["objective"] = data["objective"].tolist()
                state["data_term"] = data["data_term"].tolist()
                state["stop_reason"] = str(data["stop_reason"])
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
            logger.info("life: %s cannot be read; solving from the start.", self.path)
            return None
        logger.info("life: resuming the solver from %s at iteration %d.", self.path, state["k"])
        return state

    def save(self, state: dict) -> None:
        """Write the state given by the solver (whole, flushed, renamed)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp, open(tmp, "wb") as fh:
            np.savez(
                fh,
                format=np.array(_FORMAT),
                key=np.array(self.key),
                k=np.int64(state["k"]),
                **{name: _numpy(state[name]) for name in ("x", "g", "g_old")},
                objective=np.asarray(state["objective"], dtype=np.float64),
                data_term=np.asarray(state["data_term"], dtype=np.float64),
                stop_reason=np.array(state["stop_reason"]),
            )
