"""What every sub-command shares: errors in its flags' words, outputs, logging, the run record."""

from __future__ import annotations

import argparse
import logging
import platform
import re
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from connscale._version import __version__
from connscale.io.atomic import write_json_atomic

logger = logging.getLogger("connscale")

#: API parameter names that the command line spells otherwise: the
#: destinations (argparse ``dest``) they may go by, first found wins.
API_ALIASES = {
    "window_length": ("window", "window_length"),
    "random_state": ("seed", "random_state"),
    "strategy": ("denoise",),
    "n_states": ("states",),
    "network_sparsity": ("sparsity",),
    "permutation_test": ("permutations",),
    "n_features_to_select": ("n_features",),
    "timeseries": ("input", "inputs"),
    "S": ("input",),
    "compute_error": ("error",),
    "img": ("input",),
    "engine": ("backend",),
}
_QUOTED = re.compile(r"'([A-Za-z_]\w*)'")
_ASSIGNED = re.compile(r"\b([A-Za-z_]\w*)=('[^']*'|[^\s,;)]+)")


def api_to_flags(message: str, parser: argparse.ArgumentParser) -> str:
    """Return ``message`` with the API's parameter names written as the flags of ``parser``.

    ``parser`` is a sub-command's: ``'window_length'`` -> ``--window``,
    ``kind='sparse'`` -> ``--kind sparse``, ``absolute=True`` -> ``--absolute``.
    Names the command has no flag for are left as they are.
    """
    flags = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list
        longest = max(action.option_strings, key=len, default=None)
        flags.setdefault(action.dest, longest or action.metavar or action.dest.upper())

    def flag(name: str) -> str | None:
        return next(
            (flags[d] for d in (*API_ALIASES.get(name, ()), name) if d in flags and d != "help"),
            None,
        )

    def assigned(match: re.Match) -> str:
        name, value = match.group(1), match.group(2).strip("'")
        option = flag(name)
        if option is None:
            return match.group(0)
        return option if value == "True" else f"{option} {value}"

    message = _ASSIGNED.sub(assigned, message)
    return _QUOTED.sub(lambda m: flag(m.group(1)) or m.group(0), message)


def compute_options(args) -> dict:
    """``device``, ``dtype`` and ``memory_limit`` of the compute options, as keywords."""
    return {"device": args.device, "dtype": args.dtype, "memory_limit": args.memory_limit}


def output_set(args, folder: Path, stem: str, *, command: str, fingerprint: dict):
    """Return the :class:`~connscale.io.publish.OutputSet` of a run.

    It honours --wait and --overwrite.
    """
    from connscale.io.publish import OutputSet

    return OutputSet(
        folder,
        stem,
        command=command,
        fingerprint=fingerprint,
        wait=args.wait,
        overwrite=args.overwrite,
    )


def input_files(args) -> list[Path]:
    """Return the input files a run reads, for the run's fingerprint.

    INPUT, and --mask / --atlas when given.
    """
    return [
        p
        for p in (args.input, getattr(args, "mask", None), getattr(args, "atlas", None))
        if p is not None
    ]


def configure_logging(verbose: int) -> None:
    """Log to stderr at INFO (verbose 1), DEBUG (2+) or WARNING (0)."""
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logger.setLevel(level)


class RunRecord:
    """Parameters, timings, warnings and outputs of one sub-command run.

    ``finish()`` writes them as ``<prefix>_log.json`` beside the outputs,
    then the self-contained ``report.html`` (figures embedded).

    Parameters
    ----------
    command : str
        Sub-command name.
    out_dir : path
        Output folder (created).
    parameters : dict
        The run's parameters, as given.
    """

    def __init__(self, command: str, out_dir, parameters: dict) -> None:
        self.command = command
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # "command" first, as the parsed command line's namespace gave it.
        self.parameters = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in {"command": command, **parameters}.items()
            if not callable(v)
        }
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []
        self.outputs: list[str] = []
        self.figures: list[str] = []
        self.results: dict = {}
        self.device: str | None = None
        self.report_path: Path | None = None
        self._start = time.perf_counter()
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    @contextmanager
    def timer(self, name: str):
        """Time a block into ``timings[name]`` (seconds); record its warnings."""
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        self.timings[name] = round(time.perf_counter() - start, 6)
        for w in caught:
            message = f"{w.category.__name__}: {w.message}"
            if message not in self.warnings:
                self.warnings.append(message)
                logger.warning("%s", message)

    def add_output(self, path) -> None:
        self.outputs.append(str(path))

    def add_figure(self, path) -> None:
        self.figures.append(str(path))

    def as_dict(self) -> dict:
        return {
            "command": self.command,
            "software": {"connscale": __version__, "python": platform.python_version()},
            "started": self.started,
            "device": self.device,
            "parameters": self.parameters,
            "timings_s": {**self.timings, "total": round(time.perf_counter() - self._start, 6)},
            "results": self.results,
            "warnings": self.warnings,
            "outputs": self.outputs,
            "figures": self.figures,
        }

    def finish(self, prefix: str, outputs=None) -> Path:
        """Write the run log ``<prefix>_log.json``, then the HTML report.

        Without ``outputs`` both go to ``out_dir`` (``report.html``). With an
        :class:`~connscale.io.publish.OutputSet`, they are written into its
        staging folder as ``<prefix>_log.json`` and ``<prefix>_report.html``
        and published with the set's other files (``outputs.commit()``);
        recorded outputs and figures of the set are read from the staging
        folder for the report, while the log names their final paths.

        The log is written first; a report that fails is warned about
        (RuntimeWarning and the log) and never loses the log. Returns the
        log's (final) path; ``report_path`` holds the report's (None on
        failure).
        """
        record = self.as_dict()
        self.report_path = None
        if outputs is None:
            path = self.out_dir / f"{prefix}_log.json"
            write_json_atomic(path, record)
            report_name = "report.html"
        else:
            path = outputs.out_dir / f"{prefix}_log.json"
            write_json_atomic(outputs.path(path.name), record)
            report_name = f"{prefix}_report.html"
            outputs.path(report_name)
            staged = {
                **record,
                **{
                    key: [_staged(p, outputs) for p in record[key]]
                    for key in ("outputs", "figures")
                },
            }
        try:
            from connscale.report.html import write_report

            if outputs is None:
                self.report_path = write_report(record, self.out_dir)
            else:
                write_report(staged, outputs.staging, filename=report_name)
                self.report_path = outputs.out_dir / report_name
        except Exception as exc:  # noqa: BLE001 - the log is safe; say what failed
            if outputs is not None:
                outputs.discard(report_name)
            message = (
                f"{report_name} could not be written ({type(exc).__name__}: {exc}); "
                f"the run log is in {path}."
            )
            logger.warning("%s", message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return path


def _staged(path: str, outputs) -> str:
    """Where a recorded output of ``outputs`` lies until the set is published."""
    path = Path(path)
    if path.parent.resolve() == outputs.out_dir.resolve() and path.name in outputs.names:
        return str(outputs.staging / path.name)
    return str(path)
