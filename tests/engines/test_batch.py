"""The batch runner (connscale.engines.batch) on every engine: records, failures,
progress, threads, resume, the logs' one schema, the memory budget, the device."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import engine_funcs as ef
import pytest
import torch

from connscale import MemoryLimitError
from connscale.engines import SerialEngine
from connscale.engines import batch as batch_module
from connscale.engines.batch import (
    ERROR_COLUMNS,
    BatchLogs,
    BatchOptions,
    Later,
    Progress,
    ReadAheadEngine,
    Task,
    TaskBudget,
    TaskCall,
    batch_device,
    map_tasks,
    run_batch,
)

ENGINES = [
    "serial",
    "local_engine",
    pytest.param("dask_engine", marks=pytest.mark.cluster),
    pytest.param("spark_engine", marks=pytest.mark.cluster),
]


@pytest.fixture(params=ENGINES)
def engine(request):
    return SerialEngine() if request.param == "serial" else request.getfixturevalue(request.param)


def _tasks(values, log=None):
    return [
        Task(f"sub-0{i}", f"0{i}", f"in{i}", ef.square_or_fail, (x, log))
        for i, x in enumerate(values)
    ]


def test_records_failures_and_progress_on_every_engine(engine, capsys):
    seen = []
    records = map_tasks(engine, _tasks([2, -1, 3]), progress=seen.append)
    assert [r["status"] for r in records] == ["ok", "error", "ok"]
    assert [r.get("square") for r in records] == [4, None, 9]
    failed = records[1]
    assert failed["name"] == "sub-01" and failed["input"] == "in1" and failed["subject"] == "01"
    assert failed["error"] == "ValueError: negative input -1 second line"  # one line
    assert "Traceback" in failed["traceback"]
    assert sorted(r["name"] for r in seen) == ["sub-00", "sub-01", "sub-02"]  # one call per task


def test_one_bar_over_the_tasks_and_each_outcome_with_verbose_2(local_engine, capsys, caplog):
    bar = Progress("cmd", "things", "thing", 3, 0, 1)
    map_tasks(local_engine, _tasks([1, 2, 3]), progress=bar)
    bar.close()
    err = capsys.readouterr().err
    assert "things" in err and "3/3" in err
    caplog.set_level("INFO", logger="connscale")
    quiet = Progress("cmd", "things", "thing", 2, 0, 0)
    map_tasks(local_engine, _tasks([1, 2]), progress=quiet)
    assert "things" not in capsys.readouterr().err and "sub-00 ok" not in caplog.text
    detailed = Progress("cmd", "things", "thing", 2, 0, 2)
    map_tasks(local_engine, _tasks([1, 2]), progress=detailed)
    assert "cmd: sub-00 ok" in caplog.text and "cmd: sub-01 ok" in caplog.text


def test_threads_per_task_and_restored(tmp_path):
    before = torch.get_num_threads()
    log = tmp_path / "threads"
    map_tasks(SerialEngine(), _tasks([1], str(log)), threads=1)
    assert log.read_text() == "1" and torch.get_num_threads() == before


def test_run_batch_skips_what_is_done_and_writes_one_log_schema(tmp_path):
    def is_done(task):
        if task.name == "sub-02":
            raise ValueError("foreign output\nsecond line")
        return task.name == "sub-00"

    opened = []

    def open_engine():
        opened.append(True)
        return SerialEngine()

    logs = BatchLogs(tmp_path, "x_report.json", "x_errors.tsv")
    options = BatchOptions("x", logs, desc="x", unit="task", verbose=0)
    result = run_batch(
        _tasks([1, 2, 3, -4]), options, is_done=is_done, open_engine=open_engine, meta={"a": 1}
    )
    assert [r["status"] for r in result.records] == ["skipped", "ok", "error", "error"]
    assert result.records[2]["error"] == "ValueError: foreign output second line"
    assert result.counts == {"ok": 1, "skipped": 1, "error": 2} and opened == [True]
    report = json.loads(result.report_path.read_text())
    assert report["a"] == 1 and report["command"] == "x" and report["engine"] == "SerialEngine()"
    assert report["counts"] == result.counts and len(report["records"]) == 4
    with open(result.errors_path, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    assert tuple(rows[0]) == ERROR_COLUMNS
    assert [r[:3] for r in rows[1:]] == [["sub-02", "in2", "error"], ["sub-03", "in3", "error"]]
    # nothing left to run: no engine is started
    again = run_batch(
        _tasks([1]), options, is_done=lambda task: True, open_engine=open_engine, meta={}
    )
    assert again.counts == {"ok": 0, "skipped": 1, "error": 0} and opened == [True]


def test_read_ahead_engine_runs_tasks_without_prepare_as_serial():
    records = map_tasks(ReadAheadEngine(2), _tasks([1, 2, 3]))
    assert [r["square"] for r in records] == [1, 4, 9]


def _release_then_square(payload, prepared) -> dict:
    """Compute a task: touch the file its payload names, if any (a held read's release)."""
    value, release = payload
    if release is not None:
        Path(release).touch()
    return {"square": value * value, "read": prepared.result()}


def test_read_ahead_engine_computes_a_task_as_soon_as_its_read_ends(tmp_path):
    """Task 0's read is held until task 2 computes: tasks compute as their reads end,
    not in order (in order, task 0's read would hold every later task: it never ends).
    Results still come back in task order."""
    release = str(tmp_path / "release")
    payloads = [(1, None), (2, None), (3, release), (4, None)]
    reads = [(ef.wait_for_file, release)] + [(str, i) for i in range(1, 4)]
    tasks = [
        Task(f"t{i}", None, None, _release_then_square, payload, {}, _ReadOf(*reads[i]))
        for i, payload in enumerate(payloads)
    ]
    order = []
    results = ReadAheadEngine(2).map(
        lambda call: call.task.function(call.task.payload, call.prepared),
        [TaskCall(t) for t in tasks],
        on_result=lambda index, _: order.append(index),
    )
    assert [r["square"] for r in results] == [1, 4, 9, 16]
    assert results[0]["read"] == release and order.index(2) < order.index(0)


def test_read_ahead_engine_warms_up_while_the_first_reads_run(tmp_path):
    """``warm`` runs once, in this process, after the first reads started (it
    waits for task 1's read) and before the first task computes (task 0's read
    waits for a file that only ``warm`` writes)."""
    release, read_one = tmp_path / "release", tmp_path / "read_one"
    events = []

    def warm():
        ef.wait_for_file(str(read_one))
        events.append("warm")
        release.write_text("")

    reads = [(ef.wait_for_file, str(release)), (ef.count_attempt, str(read_one)), (str, 2)]
    tasks = [
        Task(f"t{i}", None, None, _release_then_square, (i + 1, None), {}, _ReadOf(*reads[i]))
        for i in range(3)
    ]

    def compute(call):
        events.append(call.task.name)
        return call.task.function(call.task.payload, call.prepared)

    results = ReadAheadEngine(2, warm=warm).map(compute, [TaskCall(t) for t in tasks])
    assert [r["square"] for r in results] == [1, 4, 9]
    assert events[0] == "warm" and events.count("warm") == 1


class _ReadOf:
    """A task's read: ``function(argument)``, whatever the task's payload."""

    def __init__(self, function, argument) -> None:
        self.function, self.argument = function, argument

    def __call__(self, _payload):
        return self.function(self.argument)


class _Deferred:
    """Tasks whose records are finished later: each once its event is set.

    ``release[v]``: the events task ``v`` sets as it computes (a float: set
    one by a timer after that many seconds); ``seen[v]``: the tasks finished
    when task ``v`` computed.
    """

    def __init__(self, release: dict) -> None:
        self.release = release
        self.events = {v: threading.Event() for v in range(1, 6)}
        self.finished: list[int] = []
        self.seen: dict[int, list[int]] = {}

    def __call__(self, value, prepared) -> Later:
        self.seen[value] = list(self.finished)
        for other in self.release.get(value, ()):
            if isinstance(other, tuple):  # (task, seconds): set by a timer
                threading.Timer(other[1], self.events[other[0]].set).start()
            else:
                self.events[other].set()

        def finish() -> dict:
            self.events[value].wait()
            self.finished.append(value)
            if value == 3:
                raise OSError("the report could not be written")
            return {"square": value * value}

        return Later(self.events[value].is_set, finish)


def test_read_ahead_engine_finishes_later_tasks_in_order_holding_at_most_readers():
    """A task that returns a Later is finished once ready, in order, while the
    next tasks compute; when more wait than there are readers, the oldest is
    waited for. A failure as it finishes is the task's record."""
    deferred = _Deferred({2: [(1, 0.2)], 3: [2], 4: [3, 4], 5: [5]})
    tasks = [Task(f"t{i}", None, None, deferred, i, {}, _ReadOf(str, i)) for i in range(1, 6)]
    records = map_tasks(ReadAheadEngine(1), tasks)
    assert [r["name"] for r in records] == ["t1", "t2", "t3", "t4", "t5"]
    assert deferred.finished == [1, 2, 3, 4, 5]
    # Task 2 computed while task 1 waited; task 3 only once task 1 was finished (two
    # waited, one reader); task 4 after task 2 was, as soon as it was ready.
    assert deferred.seen == {1: [], 2: [], 3: [1], 4: [1, 2], 5: [1, 2, 3, 4]}
    assert [r.get("square") for r in records] == [1, 4, None, 16, 25]
    assert records[2]["status"] == "error" and "could not be written" in records[2]["error"]
    assert all(r["status"] == "ok" for i, r in enumerate(records) if i != 2)


def test_a_later_task_on_an_engine_that_does_not_wait_is_finished_at_once():
    deferred = _Deferred({1: [1], 2: [2]})
    tasks = [Task(f"t{i}", None, None, deferred, i) for i in (1, 2)]
    records = map_tasks(SerialEngine(), tasks)
    assert [r["square"] for r in records] == [1, 4] and deferred.finished == [1, 2]


def test_a_later_whose_finish_defers_again_is_a_failed_record():
    """A finish must give the record's fields: a second Later is the task's error, not an
    unfinished record."""

    def deferring(value, prepared) -> Later:
        return Later(lambda: True, lambda: Later(lambda: True, dict))

    records = map_tasks(SerialEngine(), [Task("t1", None, None, deferring, 1)])
    assert records[0]["status"] == "error"
    assert "finish returned another Later" in records[0]["error"]
    assert records[0]["seconds"] >= 0


def test_task_budget_covers_the_whole_task():
    budget = TaskBudget("10MB")
    budget.hold(4_000_000, "the scan")
    assert budget.left == 6_000_000
    with pytest.raises(
        MemoryLimitError, match=r"the cleaned series needs .*\(memory_limit='10MB'\)"
    ):
        budget.hold(6_000_000, "the cleaned series")
    assert TaskBudget(None).left is None


def test_device_auto_is_resolved_once_per_batch(monkeypatch):
    assert batch_device("cpu", one_task_per_gpu=True) == "cpu"
    assert batch_device("cuda:1", one_task_per_gpu=False) == "cuda:1"
    assert batch_device("auto", one_task_per_gpu=False) == "cpu"  # workers share the GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert batch_device("auto", one_task_per_gpu=True) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert batch_device("auto", one_task_per_gpu=True) == "cpu"


def test_the_module_is_a_service():
    # the runner serves the cohort and the BIDS-App: it imports neither
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(batch_module))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {
        m for m in imported if m and m.startswith(("connscale.cohort", "connscale.bidsapp"))
    }
