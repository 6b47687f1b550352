"""A command's outputs published as one set, keyed on the inputs' identity.

Commands whose result is several files (``r1dl``, ``life``) write them into
the hidden staging folder of a :class:`connscale.io.publish.OutputSet`,
with their resume state beside them; :func:`publish` adds the run log to the
set, publishes it with its manifest, then writes ``report.html`` (shared by
every command writing to the folder, so not part of the set).
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

from connscale.io.atomic import write_json_atomic
from connscale.io.fingerprint import run_fingerprint

logger = logging.getLogger("connscale")

# Arguments that do not change a result: where it goes, how much is said,
# whether to wait for another run or replace its result, how often to checkpoint.
_NOT_PARAMETERS = ("func", "out", "verbose", "wait", "overwrite", "checkpoint_every")


def command_fingerprint(args: argparse.Namespace, inputs: list) -> dict:
    """Return the fingerprint of a command's run.

    It covers its input files' contents and the arguments that shape its result (input
    paths enter through their files).
    """
    paths = {Path(p) for p in inputs}
    parameters = {
        k: v
        for k, v in vars(args).items()
        if k not in _NOT_PARAMETERS and not (isinstance(v, Path) and v in paths)
    }
    return run_fingerprint(inputs, parameters)


def _published_files(outputs) -> set[str]:
    """Return the names of the files of the set of this prefix published before.

    The set is empty when there is no complete one.
    """
    from connscale.io.publish import IncompleteOutputError, read_manifest

    try:
        return set(read_manifest(outputs.out_dir, outputs.prefix, verify="none")["files"])
    except IncompleteOutputError:
        return set()


def publish(outputs, record, prefix: str) -> Path:
    """Write ``<prefix>_log.json`` into ``outputs``, publish the set, then ``report.html``.

    ``report.html`` is written in the output folder.

    The files of a set it replaces (``--overwrite``) that it does not hold
    (a map or a state no longer asked for) are removed with the old set.

    A report that fails is warned about (RuntimeWarning and the log) and
    never costs the published result. Returns the log's path.
    """
    name = f"{prefix}_log.json"
    data = record.as_dict()
    write_json_atomic(outputs.path(name), data)
    replaced = _published_files(outputs) - set(outputs.names)
    outputs.commit()
    for stale in replaced:  # files of the set replaced that this one does not hold
        (outputs.out_dir / stale).unlink(missing_ok=True)
    log = outputs.out_dir / name
    record.report_path = None
    try:
        from connscale.report.html import write_report

        record.report_path = write_report(data, outputs.out_dir)
    except Exception as exc:  # noqa: BLE001 - the result is published; say what failed
        message = (
            f"report.html could not be written ({type(exc).__name__}: {exc}); "
            f"the run log is in {log}."
        )
        logger.warning("%s", message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return log
