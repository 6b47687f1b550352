"""Per-atom checkpoints of r1DL: a killed run resumes from its last finished atom.

A checkpoint is a folder with one small file per learned atom,
``atom_00000.npz``, ``atom_00001.npz``, ...: the atom's u, its r loadings
(indices and values, exactly as the driver committed them), its update count
and convergence flag, the random generator's state after it, and the run's
key (the digest of the data's fingerprint and the parameters that shape the
atoms; ``run.json`` beside them records that fingerprint in full). Each file
is written whole under a temporary name, then renamed, so
a kill leaves whole atoms only; a file that cannot be read back (a torn
write after a power loss) ends the resumable prefix, and the atoms after it
are learned again.

Resuming replays the saved atoms into the updater (the same commits an
uninterrupted run made), restores the generator and goes on from the next
atom: the dictionary is the one an uninterrupted run with the same seed
gives, bitwise where the arithmetic is the same (backend, device, dtype and
thread count).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from connscale.io.atomic import write_json_atomic

__all__ = ["AtomCheckpoint"]

logger = logging.getLogger("connscale")

_FORMAT = "connscale-r1dl-atom-1"


class AtomCheckpoint:
    """The per-atom checkpoint folder of one r1DL run.

    Parameters
    ----------
    folder : path
        Where the atom files live (created).
    fingerprint : dict
        :func:`connscale.io.fingerprint.run_fingerprint` of the data and the
        parameters; atom files of another ``digest`` are never resumed from.
    """

    def __init__(self, folder: str | os.PathLike, fingerprint: dict) -> None:
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.key = str(fingerprint["digest"])
        self.resumed_atoms = 0

    def _file(self, k: int) -> Path:
        return self.folder / f"atom_{k:05d}.npz"

    def load(self, n_atoms: int, n_timepoints: int, r: int) -> list[dict]:
        """Load the atoms already learned by this run, in order (may be empty).

        Each is a dict with ``u`` (T,), ``idx`` (r,), ``val`` (r,), ``n_iter``,
        ``converged`` and ``rng_state`` (the generator's state after it).
        """
        atoms = []
        for k in range(n_atoms):
            file = self._file(k)
            if not file.is_file() or file.is_symlink():
                break
            atom = self._read(file, n_timepoints, r)
            if atom is None:
                logger.info(
                    "r1dl: %s belongs to another run or cannot be read; atoms from %d "
                    "on are learned again.",
                    file,
                    k,
                )
                break
            atoms.append(atom)
        self.resumed_atoms = len(atoms)
        if atoms:
            logger.info(
                "r1dl: resuming from checkpoint %s after atom %d of %d.",
                self.folder,
                len(atoms),
                n_atoms,
            )
        return atoms

    def _read(self, file: Path, n_timepoints: int, r: int) -> dict | None:
        try:
            with np.load(file, allow_pickle=False) as data:
                if str(data["format"]) != _FORMAT or str(data["key"]) != self.key:
                    return None
                atom = {name: data[name] for name in ("u", "idx", "val")}
                atom["n_iter"] = int(data["n_iter"])
                atom["converged"] = bool(data["converged"])
                atom["rng_state"] = json.loads(str(data["rng_state"]))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
            return None
        if (
            atom["u"].shape != (n_timepoints,)
            or atom["idx"].shape != (r,)
            or atom["val"].shape != (r,)
        ):
            return None
        return atom

    def save(
        self,
        k: int,
        *,
        u: np.ndarray,
        idx: np.ndarray,
        val: np.ndarray,
        n_iter: int,
        converged: bool,
        rng_state: dict,
    ) -> Path:
        """Write atom ``k`` (whole, then renamed into place).

        Not fsynced: a checkpoint outlives a killed process as it is, and one
        torn by a power loss is detected on reading (see the module
        docstring); an fsync per atom would cost more than a fast atom.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        if k == self.resumed_atoms:
            write_json_atomic(self.folder / "run.json", self.fingerprint)
        file = self._file(k)
        fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(
                    fh,
                    format=np.array(_FORMAT),
                    key=np.array(self.key),
                    u=u,
                    idx=idx,
                    val=val,
                    n_iter=np.int64(n_iter),
                    converged=np.bool_(converged),
                    rng_state=np.array(json.dumps(rng_state)),
                )
            os.replace(tmp, file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return file
