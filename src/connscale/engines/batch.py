"""One batch runner: many tasks (a cohort's scans, a BIDS dataset's runs) on any engine.

A task is (inputs, parameters, outputs): a :class:`Task` names what it
reads (``input``), the function that computes and writes it and that
function's argument (``payload``: the parameters and the outputs). The
runner does the rest, the same way for every command:

* resume: a task whose outputs are already complete is skipped, by the
  command's own "is it done?" hook (the cohort's fingerprints, the BIDS-App's
  :class:`~connscale.io.publish.OutputSet` manifests);
* the thread budget: torch threads per task, restored after;
* failures: an exception gives one record (``status`` 'error', a one-line
  ``error``, the ``traceback``); a task whose worker died on every attempt
  (:class:`~connscale.engines.TaskFailure`) is recorded as
  ``WorkerLost: ...``; the other tasks go on either way;
* the logs: a report JSON (every record) and an errors TSV (the failures,
  :data:`ERROR_COLUMNS`), one schema for every command;
* progress: one bar over the tasks on every engine, and each task's outcome
  with ``verbose > 1``;
* the memory budget of a task: :class:`TaskBudget`, the task's
  ``memory_limit`` less what it holds (the scan or run it read, its cleaned
  series), so that the limit covers the whole task;
* tasks finished later: on :class:`ReadAheadEngine`, a task whose outputs
  wait for work beside this process (a run's report drawn by a drawing
  process) returns a :class:`Later`; the next tasks compute meanwhile.
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import os
import stat
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from connscale._validation import parse_memory
from connscale._version import __version__
from connscale.engines.base import Engine, SerialEngine, TaskFailure
from connscale.io.atomic import write_json_atomic, write_text_atomic

__all__ = [
    "ERROR_COLUMNS",
    "STATUSES",
    "BatchLogs",
    "BatchOptions",
    "BatchResult",
    "Later",
    "Progress",
    "ReadAheadEngine",
    "Task",
    "TaskBudget",
    "batch_device",
    "count_statuses",
    "error_rows",
    "error_text",
    "failure_fields",
    "logs_folder",
    "map_tasks",
    "run_batch",
    "run_task",
    "write_logs",
]

logger = logging.getLogger("connscale")

#: Statuses of a record: done, already done, some measures failed (the others
#: published), refused (the data cannot support it), failed.
STATUSES = ("ok", "skipped", "partial", "refused", "error")

#: The errors table of every command: one row per failed task, or per failed measure.
ERROR_COLUMNS = ("name", "input", "status", "measure", "error")


@dataclass(frozen=True)
class Task:
    """One task of a batch (picklable: it travels to the worker).

    Attributes
    ----------
    name : str
        The task's name in the logs (a scan's or run's BIDS entities).
    subject : str or None
    input : str
        What it reads (the scan, the BOLD): the errors table's ``input``.
    function : callable
        A module-level ``function(payload, prepared) -> dict`` that computes
        and writes the task and returns its record's fields (``status``
        'ok' when it has none); ``prepared`` is None, or a future of
        ``prepare(payload)`` started ahead (:class:`ReadAheadEngine`).
    payload : object
        The task's parameters and outputs, as ``function`` takes them.
    fields : dict
        Record fields known before it runs (its outputs, a session).
    prepare : callable or None
        A module-level ``prepare(payload)``: the task's reading, which the
        serial engine may run ahead of the task (its error is the task's).

    Examples
    --------
    >>> from connscale.engines import Task
    >>> Task("sub-01_task-rest", "01", "sub-01_bold.nii.gz", print, {"out": "x.h5"}).subject
    '01'
    """

    name: str
    subject: str | None
    input: str
    function: Callable
    payload: Any
    fields: dict = field(default_factory=dict)
    prepare: Callable | None = None

    def record(self) -> dict:
        """Return the record's fields known before the task runs.

        Returns
        -------
        dict
            ``name``, ``subject``, ``input`` and :attr:`fields`.

        Examples
        --------
        >>> from connscale.engines import Task
        >>> task = Task("sub-01_task-rest", "01", "sub-01_bold.nii.gz", print, None, {"ses": "1"})
        >>> task.record()
        {'name': 'sub-01_task-rest', 'subject': '01', 'input': 'sub-01_bold.nii.gz', 'ses': '1'}
        """
        return {"name": self.name, "subject": self.subject, "input": self.input, **self.fields}


@dataclass(frozen=True)
class Later:
    """What a task finishes later: ``finish()`` once ``ready()``, in the process that made it.

    A task's function returns one (in place of its record's fields) when its
    outputs wait for work running beside this process; the serial engine
    reading ahead computes the next tasks meanwhile and calls ``finish()``
    (which returns the fields) once ``ready()``, or at once when it holds as
    many as it has readers. The same pair tells when a part of a task (one
    of a run's output sets) is ready to publish.

    Attributes
    ----------
    ready : callable
        ``ready() -> bool``, never blocking.
    finish : callable
        ``finish()``: waits for what is left, then completes the task (or part).
    """

    ready: Callable[[], bool]
    finish: Callable[[], Any]


@dataclass(frozen=True)
class TaskCall:
    """A task as an engine runs it: with its torch threads and what was read ahead."""

    task: Task
    threads: int = 1
    prepared: Future | None = None


class TaskBudget:
    """The memory budget of one task: its ``memory_limit`` less what it holds.

    A task counts what it keeps for its whole duration (the scan or run it
    read, its cleaned series) with :meth:`hold` and passes :attr:`left` to
    each computation as its ``memory_limit``, so that the limit covers the
    whole task rather than each call.

    Parameters
    ----------
    memory_limit : int, str or None
        The task's limit (None: no limit; :attr:`left` is then None).
    hint : str, default='Raise --memory-limit.'
        What to do when the task's data alone exceed the limit.

    Examples
    --------
    >>> from connscale.engines import TaskBudget
    >>> budget = TaskBudget("1GB")
    >>> budget.hold(400 * 1000**2, "the run's series")
    >>> budget.held
    400000000
    """

    def __init__(self, memory_limit, *, hint: str = "Raise --memory-limit.") -> None:
        self.memory_limit = memory_limit
        self.limit = parse_memory(memory_limit)
        self.hint = hint
        self.held = 0

    def hold(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` held for the rest of the task.

        Raises
        ------
        MemoryLimitError
            When they leave nothing of the limit (naming ``what``).

        Parameters
        ----------
        nbytes : int
            The bytes held.
        what : str
            What they are, for the error's message.

        Examples
        --------
        >>> from connscale.engines import TaskBudget
        >>> budget = TaskBudget("1MB")
        >>> budget.hold(2 * 1000**2, "the scan")
        Traceback (most recent call last):
        ...
        connscale._compute.memory.MemoryLimitError: ...
        """
        self.held += int(nbytes)
        if self.limit is not None and self.held >= self.limit:
            from connscale._compute.memory import limit_error

            raise limit_error(what, self.held, self.limit, self.memory_limit, self.hint)

    @property
    def left(self) -> int | None:
        """Bytes left for the task's computations (None without a limit)."""
        return None if self.limit is None else self.limit - self.held


def error_text(exc: BaseException) -> str:
    """Return ``Type: message`` of a failure on one line (for the records and errors tables)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def failure_fields(exc: BaseException) -> dict:
    """``status`` 'error', a one-line ``error`` (type and message) and the ``traceback``."""
    return {"status": "error", "error": error_text(exc), "traceback": traceback.format_exc()}


def lost_fields(failure: TaskFailure) -> dict:
    """Return the failure fields of a task the engine gave up on (its worker died)."""
    kind = "WorkerLost" if failure.worker_lost else "TaskFailed"
    return {
        "status": "error",
        "error": f"{kind}: {failure.reason}",
        "traceback": "",
        "attempts": failure.attempts,
        "seconds": None,
    }


def run_task(call: TaskCall) -> dict | Later:
    """Run one task where the engine put it; never raises (a failure is its record).

    A task that returns a :class:`Later` gives a :class:`Later` of its record.
    """
    import torch

    task = call.task
    record = {**task.record(), "started": round(time.time(), 3)}  # epoch seconds
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(call.threads)
    try:
        later = _merge(record, functools.partial(task.function, task.payload, call.prepared))
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    if later is not None:
        return Later(later.ready, functools.partial(_finish, record, seconds, later.finish))
    record["seconds"] = round(seconds, 6)
    return record


def _merge(record: dict, produce: Callable[[], dict | Later]) -> Later | None:
    """Merge the fields ``produce`` returns, or its failure, into ``record``; never raises.

    A :class:`Later` it returns is given back instead, not merged.
    """
    try:
        fields = produce()
        if isinstance(fields, Later):
            return fields
        record.update(fields)
        record.setdefault("status", "ok")
    except Exception as exc:  # noqa: BLE001 - recorded per task, never raised
        record.update(failure_fields(exc))
    return None


def _finish(record: dict, seconds: float, finish: Callable[[], dict]) -> dict:
    """Complete the record of a task that returned a :class:`Later`; never raises.

    Its ``seconds``: the task's own time and its finishing, not the time between.
    """
    start = time.perf_counter()
    if _merge(record, finish) is not None:
        record.update(failure_fields(TypeError("A Later's finish returned another Later.")))
    record["seconds"] = round(seconds + time.perf_counter() - start, 6)
    return record


class ReadAheadEngine(SerialEngine):
    """The serial engine, reading the next tasks' inputs while this one computes.

    ``readers`` threads, or processes with ``processes=True``
    (:class:`~connscale.engines.readers.ReaderPool`), run the
    :attr:`Task.prepare` of at most ``readers`` tasks ahead of the one
    computing, so at most ``readers + 1`` tasks' inputs are in memory. Items
    that are not :class:`TaskCall` of a task with a ``prepare`` run as on
    :class:`SerialEngine`.

    Parameters
    ----------
    readers : int
        Reads at once.
    processes : bool
        Read in processes (no GIL shared with the computing process; large
        arrays come back through shared memory, :mod:`connscale.engines.shared`)
        instead of threads: forked from this process when it has imported
        ``preload`` already (Linux), else from the fork server
        (:class:`~connscale.engines.readers.ReaderPool`'s ``fork_here``).
    preload : tuple of str
        Modules the reader processes import before their first read, once
        (see :class:`~connscale.engines.readers.ReaderPool`).
    warm : callable or None
        Called in this process once the first reads are under way (a GPU's
        context started), so that the first task does not pay it after its
        read while the readers wait for their next.
    """

    name = "serial"

    def __init__(
        self,
        readers: int = 1,
        *,
        processes: bool = False,
        preload: tuple[str, ...] = (),
        warm: Callable[[], None] | None = None,
    ) -> None:
        self.readers = max(int(readers), 1)
        self.processes = processes
        self.preload = preload
        self.warm = warm

    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item in order, reading ahead (see :meth:`Engine.map`).

        The :attr:`Task.prepare` of the next ``readers`` tasks runs in
        the readers while ``func`` computes the current one, which gets its
        future as :attr:`TaskCall.prepared`. Without any task to prepare,
        this is :meth:`SerialEngine.map`.
        """
        items = list(items)
        if not any(isinstance(i, TaskCall) and i.task.prepare for i in items):
            return super().map(func, items, errors=errors, on_result=on_result)
        with self._reader_pool() as pool:
            return self._map_ahead(pool, func, items, errors, on_result)

    @contextmanager
    def _reader_pool(self):
        from connscale.engines.readers import ReaderPool
        from connscale.engines.shared import handoff_folder

        with handoff_folder(self.processes) as folder:
            pool = ReaderPool(
                self.readers,
                processes=self.processes,
                folder=folder,
                preload=self.preload,
                fork_here=True,
            )
            try:
                yield pool
            finally:
                pool.shutdown()

    def _map_ahead(self, pool, func, items, errors, on_result) -> list:
        """Compute each task as soon as its read is done, in whatever order reads end.

        ``readers`` reads are under way at any time: when one ends, the next
        task's read starts, then the task whose read ended computes (the
        earliest in order among those ready). A slow read holds up its own
        task only, not the readers that finished after it (they would idle
        until it ends if tasks computed in order). At most ``readers + 1``
        tasks' inputs are in memory. Items without a read compute first.
        """
        results: list = [None] * len(items)
        reading: dict[Future, int] = {}  # each read under way -> its item's index
        later: deque[tuple[int, Later]] = deque()  # tasks to finish, oldest first
        upcoming = iter(range(len(items)))

        def read_next() -> None:
            """Start the read of the next item that has one."""
            for index in upcoming:
                item = items[index]
                if isinstance(item, TaskCall) and item.task.prepare is not None:
                    reading[pool.submit(item.task.prepare, item.task.payload)] = index
                    return
                compute(index, item)

        def compute(index: int, item) -> None:
            result = super(ReadAheadEngine, self).map(func, [item], errors=errors)[0]
            if isinstance(result, Later):
                later.append((index, result))
            else:
                finished(index, result)
            settle(self.readers)

        def settle(held: int) -> None:
            """Finish the ready tasks in order, and the oldest while more than ``held`` wait."""
            while later and (len(later) > held or later[0][1].ready()):
                index, pending = later.popleft()
                finished(index, pending.finish())

        def finished(index: int, result) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        for _ in range(self.readers):
            read_next()
        if self.warm is not None:
            self.warm()
        while reading:
            done, _ = wait(reading, return_when=FIRST_COMPLETED)
            current = min(done, key=reading.__getitem__)
            index = reading.pop(current)
            read_next()  # its reader is free: the next read starts before this task computes
            compute(index, replace(items[index], prepared=current))
            del current, done  # this task's data, before the next read ends
        settle(0)
        return results

    def __repr__(self) -> str:
        kind = "processes" if self.processes else "threads"
        return f"ReadAheadEngine(readers={self.readers}, {kind})"


class Progress:
    """One bar over a batch's tasks; each task's outcome with ``verbose > 1``.

    Called with each task's record as it ends; :meth:`close` when done.
    """

    def __init__(self, command: str, desc: str, unit: str, total: int, initial: int, verbose):
        from tqdm.auto import tqdm

        self.command = command
        self.verbose = int(verbose)
        self.bar = tqdm(
            total=total, initial=initial, desc=desc, unit=unit, disable=not self.verbose
        )

    def __call__(self, record: dict) -> None:
        """Advance the bar by one task, showing its name and status.

        A failure is logged as a warning; with ``verbose > 1`` every other
        outcome is logged too.
        """
        name, status = record["name"], record["status"]
        if status == "error":
            logger.warning("%s: %s failed: %s", self.command, name, record["error"])
        elif self.verbose > 1:
            logger.info("%s: %s %s (%s s)", self.command, name, status, record.get("seconds"))
        self.bar.set_postfix_str(f"{name}: {status}", refresh=False)
        self.bar.update()

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()


def map_tasks(
    engine: Engine,
    tasks: Sequence[Task],
    *,
    threads: int = 1,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run tasks on ``engine``: one record each, in task order.

    A task whose worker died on every attempt gets the record of
    :func:`lost_fields`; ``progress(record)`` is called as each task ends.
    """
    calls = [TaskCall(task, threads) for task in tasks]
    records: list[dict | None] = [None] * len(calls)

    def done(index: int, outcome) -> None:
        if isinstance(outcome, Later):  # an engine that does not finish tasks later
            outcome = outcome.finish()
        if isinstance(outcome, TaskFailure):
            outcome = {**tasks[index].record(), **lost_fields(outcome)}
        records[index] = outcome
        if progress is not None:
            progress(outcome)

    outcomes = engine.map(run_task, calls, errors="return", on_result=done)
    for index, outcome in enumerate(outcomes):
        if records[index] is None:  # an engine that reported no result as it came
            done(index, outcome)
    return records


def count_statuses(records: Sequence[dict]) -> dict:
    """Count the tasks per status.

    ``ok``, ``skipped`` and ``error`` always, ``partial`` and ``refused``
    when there are any.
    """
    counts = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    return {s: n for s, n in counts.items() if n or s in ("ok", "skipped", "error")}


def error_rows(records: Sequence[dict]) -> list[list[str]]:
    """Return the rows of the errors table (:data:`ERROR_COLUMNS`).

    One row per failed measure of a record (``failed_measures``), else one
    per failed or refused record (``measure`` empty).
    """
    rows = []
    for r in records:
        failed = r.get("failed_measures") or {}
        if failed:
            rows += [[r["name"], r["input"], r["status"], m, why] for m, why in failed.items()]
        elif r["status"] in ("error", "refused"):
            rows.append([r["name"], r["input"], r["status"], "", r["error"]])
    return [[str(c).replace("\t", " ").replace("\n", " ") for c in row] for row in rows]


@dataclass(frozen=True)
class BatchLogs:
    """Where a batch writes its logs: ``folder/report`` (JSON) and ``folder/errors`` (TSV).

    Parameters
    ----------
    folder : Path
        Where the logs go.
    report : str
        The JSON report's file name.
    errors : str
        The errors table's file name.

    Examples
    --------
    >>> from pathlib import Path
    >>> from connscale.engines import BatchLogs
    >>> BatchLogs(Path("out"), "cohort_report.json", "cohort_errors.tsv").report
    'cohort_report.json'
    """

    folder: Path
    report: str
    errors: str


def write_logs(logs: BatchLogs, records: Sequence[dict], meta: dict) -> tuple[Path, Path]:
    """Write the report (``meta``, ``counts``, every record) and the errors table."""
    report = write_json_atomic(
        Path(logs.folder) / logs.report,
        {**meta, "counts": count_statuses(records), "records": list(records)},
    )
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(ERROR_COLUMNS)
    writer.writerows(error_rows(records))
    return report, write_text_atomic(Path(logs.folder) / logs.errors, buffer.getvalue())


def logs_folder(path: Path) -> Path:
    """Return ``path``, created or reused without following a link.

    One planted there would send the logs outside the output.

    Raises
    ------
    PermissionError
        ``path`` is a symbolic link or not a folder.
    """
    path = Path(path)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            kind = "a symbolic link" if os.path.islink(path) else "not a folder"
            raise PermissionError(
                f"{path} is {kind}; connscale writes its logs there and does not "
                "follow links. Remove it and run again."
            ) from None
    return path


def batch_device(device: str, *, one_task_per_gpu: bool) -> str:
    """Resolve ``device='auto'`` once for a batch.

    'cuda' when torch sees a GPU and one task per GPU runs at a time (the
    serial engine, or one worker per GPU); 'cpu' otherwise (many workers
    share the machine). Any other device is returned as it is.
    """
    if str(device).lower() != "auto":
        return device
    if not one_task_per_gpu:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class BatchOptions:
    """How a batch runs and reports.

    Attributes
    ----------
    command : str
        The command, in the report and in messages ('cohort', 'bids participant').
    logs : BatchLogs
    desc, unit : str
        The progress bar's label and unit ('cohort fc', 'scan').
    threads : int, default=1
        torch threads of each task.
    batch_size : int or None
        Tasks handed to the engine at a time, the logs rewritten after each
        batch; None: ``per_worker`` per engine worker, or all at once.
    per_worker : int or None
    verbose : int, default=1
        0 silent; 1 the bar; 2 also each task's outcome.

    Examples
    --------
    >>> from pathlib import Path
    >>> from connscale.engines import BatchLogs, BatchOptions
    >>> options = BatchOptions("cohort", BatchLogs(Path("out"), "report.json", "errors.tsv"),
    ...                        "cohort fc", "scan", per_worker=4)
    >>> options.threads, options.verbose
    (1, 1)
    """

    command: str
    logs: BatchLogs
    desc: str
    unit: str
    threads: int = 1
    batch_size: int | None = None
    per_worker: int | None = None
    verbose: int = 1

    def size(self, engine: Engine, n_tasks: int) -> int:
        """Tasks per batch on ``engine``.

        Parameters
        ----------
        engine : Engine
            The engine the batch runs on (its ``n_jobs`` workers, if any).
        n_tasks : int
            The tasks left.

        Returns
        -------
        int

        Examples
        --------
        >>> from pathlib import Path
        >>> from connscale.engines import BatchLogs, BatchOptions, SerialEngine
        >>> logs = BatchLogs(Path("out"), "report.json", "errors.tsv")
        >>> BatchOptions("cohort", logs, "cohort", "scan", per_worker=4).size(SerialEngine(), 10)
        4
        >>> BatchOptions("cohort", logs, "cohort", "scan").size(SerialEngine(), 10)
        10
        """
        if self.batch_size is not None:
            return self.batch_size
        if self.per_worker is not None:
            return max(1, self.per_worker * (getattr(engine, "n_jobs", 1) or 1))
        return max(n_tasks, 1)


@dataclass
class BatchResult:
    """What :func:`run_batch` did: one record per task, in task order.

    Parameters
    ----------
    records : list of dict
        One per task, in task order (``status``: 'ok', 'skipped' or 'error').
    report_path, errors_path : Path
        The JSON report and the errors table written.
    engine : str, default=''
        The engine's name.
    seconds : float, default=0.0
        The batch's duration.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.engines import BatchLogs, BatchOptions, SerialEngine, Task, run_batch
    >>> def square(payload, prepared):  # a task: compute, write, return its record's fields
    ...     return {"value": payload**2}
    >>> tasks = [Task(f"task-{k}", None, f"input-{k}", square, k) for k in range(3)]
    >>> tmp = tempfile.TemporaryDirectory()
    >>> options = BatchOptions("demo", BatchLogs(Path(tmp.name), "report.json", "errors.tsv"),
    ...                        "demo", "task", verbose=0)
    >>> result = run_batch(tasks, options, is_done=lambda task: task.payload == 0,
    ...                    open_engine=SerialEngine, meta={})
    >>> result.counts
    {'ok': 2, 'skipped': 1, 'error': 0}
    >>> tmp.cleanup()
    """

    records: list[dict]
    report_path: Path
    errors_path: Path
    engine: str = ""
    seconds: float = 0.0

    @property
    def counts(self) -> dict:
        """Tasks per status (:func:`count_statuses`)."""
        return count_statuses(self.records)


def _resume(tasks: Sequence[Task], is_done: Callable[[Task], bool]) -> tuple[list, list]:
    """Return the records of the tasks already done (or that cannot start), and those to run."""
    records: list[dict | None] = [None] * len(tasks)
    todo = []
    for index, task in enumerate(tasks):
        try:
            done = is_done(task)
        except (OSError, ValueError) as exc:  # an unreadable input, or a foreign output
            records[index] = {**task.record(), "status": "error", "error": error_text(exc)}
            records[index]["seconds"] = 0.0
            continue
        if done:
            records[index] = {**task.record(), "status": "skipped", "seconds": 0.0}
        else:
            todo.append(index)
    return records, todo


def run_batch(
    tasks: Sequence[Task],
    options: BatchOptions,
    *,
    is_done: Callable[[Task], bool],
    open_engine: Callable[[], AbstractContextManager[Engine] | Engine],
    meta: dict,
) -> BatchResult:
    """Run the tasks not done yet, record every task, and write the logs.

    Parameters
    ----------
    tasks : sequence of Task
    options : BatchOptions
    is_done : callable
        ``is_done(task)``: whether its outputs are complete (it is then
        skipped); an ``OSError`` or ``ValueError`` it raises is the task's
        error (an unreadable input, a foreign output).
    open_engine : callable
        Gives the engine (a context manager), called only when a task is left
        to run.
    meta : dict
        The report's keys besides ``command``, ``software``, ``engine``,
        ``seconds``, ``counts`` and ``records``.

    Returns
    -------
    BatchResult

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.engines import BatchLogs, BatchOptions, SerialEngine, Task, run_batch
    >>> def square(payload, prepared):  # a task: compute, write, return its record's fields
    ...     return {"value": payload**2}
    >>> tasks = [Task(f"task-{k}", None, f"input-{k}", square, k) for k in range(3)]
    >>> tmp = tempfile.TemporaryDirectory()
    >>> options = BatchOptions("demo", BatchLogs(Path(tmp.name), "report.json", "errors.tsv"),
    ...                        "demo", "task", verbose=0)
    >>> result = run_batch(tasks, options, is_done=lambda task: task.payload == 0,
    ...                    open_engine=SerialEngine, meta={})
    >>> [record["status"] for record in result.records], result.records[2]["value"]
    (['skipped', 'ok', 'ok'], 4)
    >>> result.report_path.name
    'report.json'
    >>> tmp.cleanup()
    """
    tasks = list(tasks)
    start = time.perf_counter()
    records, todo = _resume(tasks, is_done)
    logger.info(
        "%s: %d %ss, %d to run, %d complete",
        options.command,
        len(tasks),
        options.unit,
        len(todo),
        len(tasks) - len(todo),
    )
    meta = {"command": options.command, "software": f"connscale {__version__}", **meta}
    meta["engine"] = None
    if todo:
        progress = Progress(
            options.command,
            options.desc,
            options.unit,
            len(tasks),
            len(tasks) - len(todo),
            options.verbose,
        )
        try:
            with open_engine() as engine:
                meta["engine"] = repr(engine)
                size = options.size(engine, len(todo))
                for first in range(0, len(todo), size):
                    batch = todo[first : first + size]
                    done = map_tasks(
                        engine,
                        [tasks[i] for i in batch],
                        threads=options.threads,
                        progress=progress,
                    )
                    for index, record in zip(batch, done):
                        records[index] = record
                    meta["seconds"] = round(time.perf_counter() - start, 6)
                    write_logs(options.logs, [r for r in records if r], meta)
        finally:
            progress.close()
    meta["seconds"] = round(time.perf_counter() - start, 6)
    final = [r for r in records if r is not None]
    paths = write_logs(options.logs, final, meta)
    return BatchResult(final, *paths, meta["engine"] or "", meta["seconds"])
