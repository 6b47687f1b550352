"""Publish the files of one result together, with a manifest.

A command that writes several files for one result (a matrix, its sidecar,
its log, figures; r1DL's maps, loadings and time courses) writes them into a
hidden staging folder ``<out>/.<prefix>.staging/`` under the output's lock
(:class:`connscale.io.lock.OutputLock`). :meth:`OutputSet.commit` then

1. flushes every file and records its size and SHA-256 in a manifest,
2. removes the previous manifest of this prefix (so an old set is never
   read as complete while it is being replaced),
3. renames each file into ``<out>``, and the manifest
   ``<out>/<prefix>_manifest.json`` last.

A set is complete exactly when its manifest exists and every file it lists
is there with its size (and, on request, its checksum): a crash, a full disk
or a kill at any point leaves either the previous complete set, or files
without a manifest that readers refuse and a re-run replaces. The staging
folder survives a failed run, so resume state kept there (checkpoints) is
found again; it is removed once the set is published.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from connscale._version import __version__
from connscale.io.atomic import check_free_space, fsync_path, private_dir, write_json_atomic
from connscale.io.lock import OutputLock

__all__ = [
    "IncompleteOutputError",
    "OutputSet",
    "check_published",
    "manifest_path",
    "read_manifest",
]

FORMAT = "connscale-manifest-1"
_HASH_CHUNK = 8 * 1024**2


class IncompleteOutputError(ValueError):
    """An output set is missing its manifest or a file, or a file differs."""


def manifest_path(out_dir: str | os.PathLike, prefix: str) -> Path:
    """``<out_dir>/<prefix>_manifest.json``."""
    return Path(out_dir) / f"{prefix}_manifest.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(out_dir: str | os.PathLike, prefix: str, *, verify: str = "size") -> dict:
    """Read and check the manifest of a published set.

    Parameters
    ----------
    out_dir : path
        The output folder.
    prefix : str
        The set's prefix (its manifest is ``<prefix>_manifest.json``).
    verify : {'size', 'full', 'none'}, default='size'
        Check each listed file's size, its size and SHA-256, or nothing.

    Returns
    -------
    dict
        The manifest: ``format``, ``software``, ``command``, ``fingerprint``,
        ``files`` ({name: {"bytes", "sha256"}}), ``published``.

    Raises
    ------
    IncompleteOutputError
        No manifest, or a listed file missing or different.
    """
    out_dir = Path(out_dir)
    path = manifest_path(out_dir, prefix)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise IncompleteOutputError(
            f"{out_dir} holds no complete '{prefix}' result (no {path.name})."
        ) from None
    except (OSError, ValueError) as exc:
        raise IncompleteOutputError(f"{path} cannot be read ({exc}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IncompleteOutputError(f"{path} is not a connscale manifest.")
    if verify not in ("size", "full", "none"):
        raise ValueError(f"verify must be 'size', 'full' or 'none'; got {verify!r}.")
    for name, entry in manifest.get("files", {}).items():
        if verify == "none":
            break
        file = out_dir / name
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise IncompleteOutputError(f"{file} listed in {path.name} is missing.") from None
        if size != entry["bytes"] or (verify == "full" and _sha256(file) != entry["sha256"]):
            raise IncompleteOutputError(
                f"{file} differs from what {path.name} records (changed after it was written)."
            )
    return manifest


def check_published(path: str | os.PathLike) -> None:
    """Refuse a file that a connscale file set has not finished publishing.

    For readers of single files of a set: a file whose set was being
    replaced by a run that stopped part-way (its staging folder still holds
    the publication journal naming it), or that differs in size from what
    its set's manifest records, raises. A file that no set names (written
    by hand, or by another tool) is accepted.

    Raises
    ------
    IncompleteOutputError
    """
    path = Path(path)
    folder, name = path.parent, path.name
    for journal in folder.glob(".*.staging/.publishing.json"):
        prefix = journal.parent.name[1 : -len(".staging")]
        if manifest_path(folder, prefix).exists():
            continue  # published (the old set until its manifest goes, or the new one)
        try:
            names = json.loads(journal.read_text())
        except (OSError, ValueError):
            continue
        if name in names:
            raise IncompleteOutputError(
                f"{path} belongs to a result whose publication did not finish "
                f"({journal.parent.name} is left); re-run the command that wrote it."
            )
    for manifest in folder.glob("*_manifest.json"):
        try:
            entry = json.loads(manifest.read_text()).get("files", {}).get(name)
        except (OSError, ValueError, AttributeError):
            continue
        if entry is not None and path.stat().st_size != entry.get("bytes"):
            raise IncompleteOutputError(
                f"{path} differs from what {manifest.name} records (changed after it was "
                "written, or replaced by a run that did not finish)."
            )


class OutputSet:
    """The files of one result, written in a staging folder and published together.

    Parameters
    ----------
    out_dir : path
        The output folder (created).
    prefix : str
        Common prefix of the set's file names; names the lock, the staging
        folder and the manifest.
    command : str
        What wrote it (recorded in the manifest).
    fingerprint : dict or None
        :func:`connscale.io.fingerprint.run_fingerprint` of the run,
        recorded in the manifest; :meth:`complete` compares against it.
    wait : bool, default=False
        Wait for another run holding this output instead of failing.
    overwrite : bool, default=False
        Replace a published set that was made with other parameters. Without
        it such a set is never replaced silently: entering raises
        FileExistsError naming the parameters that differ. A set made with
        the same parameters from inputs that have changed since is
        recomputed and replaced (resume is keyed on the inputs' content).

    Examples
    --------
    >>> outputs = OutputSet(out, "sub-01_fc", command="fc", fingerprint=fp)  # doctest: +SKIP
    >>> with outputs:  # doctest: +SKIP
    ...     if outputs.complete():
    ...         return                              # same inputs and parameters: done
    ...     np.save(outputs.path("sub-01_matrix.npy"), matrix)
    ...     outputs.commit()
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        prefix: str,
        *,
        command: str,
        fingerprint: dict | None = None,
        wait: bool = False,
        overwrite: bool = False,
    ) -> None:
        if not prefix or "/" in prefix or prefix.startswith("."):
            raise ValueError(f"prefix must be a plain file-name prefix; got {prefix!r}.")
        self.out_dir = Path(out_dir)
        self.prefix = prefix
        self.command = command
        self.fingerprint = fingerprint
        self.overwrite = bool(overwrite)
        self.lock = OutputLock(self.out_dir / prefix, wait=wait)
        self.staging = self.out_dir / f".{prefix}.staging"
        self.published: list[Path] = []
        self._names: list[str] = []

    def __enter__(self) -> OutputSet:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            self._refuse_other_parameters()
            private_dir(self.staging)
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        # A staging folder left empty (nothing to publish or resume) goes.
        try:
            self.staging.rmdir()
        except OSError:
            pass
        self.lock.release()

    def _refuse_other_parameters(self) -> None:
        """Raise FileExistsError when a published set of this prefix has other parameters.

        Nothing is raised when ``overwrite`` was given.
        """
        if self.overwrite or self.fingerprint is None:
            return
        try:
            manifest = read_manifest(self.out_dir, self.prefix, verify="none")
        except IncompleteOutputError:
            return
        recorded = (manifest.get("fingerprint") or {}).get("parameters")
        wanted = self.fingerprint.get("parameters")
        if recorded is None or wanted is None or recorded == wanted:
            return
        keys = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
        shown = ", ".join(f"{k}: {recorded.get(k)!r} -> {wanted.get(k)!r}" for k in keys[:4])
        raise FileExistsError(
            f"{self.out_dir} holds a '{self.prefix}' result made with other parameters ({shown}"
            f"{', ...' if len(keys) > 4 else ''}); pass --overwrite (overwrite=True) to replace "
            "it, or choose another output folder or name."
        )

    def _require_lock(self) -> None:
        if not self.lock.held:
            raise RuntimeError("Use OutputSet as a context manager (it holds the output's lock).")

    def path(self, name: str) -> Path:
        """Where to write file ``name`` of the set (inside the staging folder)."""
        self._require_lock()
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"file name must be a plain, visible name; got {name!r}.")
        if name not in self._names:
            self._refuse_foreign([name])  # before any work is done for it
            self._names.append(name)
        return self.staging / name

    @property
    def names(self) -> list[str]:
        """Names of the files of the set so far."""
        return list(self._names)

    def discard(self, name: str) -> None:
        """Leave file ``name`` out of the set (one that could not be written)."""
        if name in self._names:
            self._names.remove(name)
            (self.staging / name).unlink(missing_ok=True)

    def _refuse_foreign(self, names: list[str]) -> None:
        """Raise FileExistsError when a name of the set is taken by a foreign file.

        A foreign file is one that no manifest of this prefix lists (nor an interrupted
        publication).
        """
        try:
            previous = set(read_manifest(self.out_dir, self.prefix, verify="none")["files"])
        except IncompleteOutputError:
            previous = set()
        try:
            interrupted = set(json.loads((self.staging / ".publishing.json").read_text()))
        except (FileNotFoundError, ValueError):
            interrupted = set()
        foreign = [
            n
            for n in names
            if os.path.lexists(self.out_dir / n) and n not in previous and n not in interrupted
        ]
        if foreign:
            raise FileExistsError(
                f"{self.out_dir / foreign[0]} exists and is not part of a connscale "
                f"'{self.prefix}' "
                "result; remove it or choose another output folder."
            )

    def check_space(self, nbytes: int, what: str = "the result") -> None:
        """Fail up front when the output's file system cannot take ``nbytes``."""
        check_free_space(self.out_dir, nbytes, what=what)

    def complete(self) -> bool:
        """Return whether a published set with the same fingerprint is already there."""
        try:
            manifest = read_manifest(self.out_dir, self.prefix)
        except IncompleteOutputError:
            return False
        recorded = (manifest.get("fingerprint") or {}).get("digest")
        return self.fingerprint is not None and recorded == self.fingerprint.get("digest")

    def commit(self, extra: dict | None = None) -> Path:
        """Publish the files named through :meth:`path`; return the manifest's path.

        Other files in the staging folder (resume state, leftovers of an
        earlier run) are not published and are removed with the folder.

        Raises
        ------
        FileExistsError
            When a file of the set would replace a file that no manifest of
            this prefix lists (a foreign file): nothing is moved.
        """
        self._require_lock()
        names = sorted(self._names)
        if not names:
            raise RuntimeError(f"Nothing to publish in {self.staging}.")
        missing = [
            n for n in names if not (self.staging / n).is_file() or (self.staging / n).is_symlink()
        ]
        if missing:
            raise RuntimeError(f"{self.staging / missing[0]} was never written.")
        target = manifest_path(self.out_dir, self.prefix)
        self._refuse_foreign(names)
        journal = self.staging / ".publishing.json"
        try:
            interrupted = set(json.loads(journal.read_text()))
        except (FileNotFoundError, ValueError):
            interrupted = set()
        files = {}
        for name in names:
            file = self.staging / name
            fsync_path(file)
            files[name] = {"bytes": file.stat().st_size, "sha256": _sha256(file)}
        manifest = {
            "format": FORMAT,
            "software": f"connscale {__version__}",
            "command": self.command,
            "prefix": self.prefix,
            "fingerprint": self.fingerprint,
            "files": files,
            "published": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(extra or {}),
        }
        # A crash from here on leaves files without a manifest; the journal
        # lets the next run recognise them as this set's, not foreign.
        write_json_atomic(journal, sorted(interrupted | set(names)))
        if target.exists():
            target.unlink()
            fsync_path(self.out_dir)
        for name in names:
            os.replace(self.staging / name, self.out_dir / name)
        fsync_path(self.out_dir)
        write_json_atomic(target, manifest)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.published = [self.out_dir / n for n in names]
        return target
