"""A SLURM of one localhost node for the tests: munged, slurmctld and slurmd.

Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them when root).
:func:`start_slurm` writes a ``slurm.conf`` (this host's cores and memory,
no accounting, state and spool in a temporary folder), a munge key, starts
the three daemons in the foreground (``-D``/``-F``, children of this
process) and waits until ``sinfo`` shows the node idle. Everything runs as
root: a SLURM of its own cannot be started otherwise.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from distributed.diagnostics.plugin import WorkerPlugin

DAEMONS = ("munged", "slurmctld", "slurmd")
NODE = "localhost"
PARTITION = "debug"
START_TIMEOUT = 30.0


class SlurmUnavailable(RuntimeError):
    """SLURM cannot be started here (the reason is the message)."""


@dataclass
class LocalSlurm:
    """The running daemons and the environment the SLURM commands need."""

    root: Path
    env: dict
    processes: list = field(default_factory=list)

    def command(self, *args: str) -> str:
        """Run a SLURM command (``squeue``, ``scancel``...) and return its output."""
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def running_jobs(self) -> list[str]:
        """Return the ids of the jobs running now."""
        return self.command("squeue", "-h", "-t", "RUNNING", "-o", "%i").split()

    def stop(self) -> None:
        """Cancel the jobs left, wait for them to end, then stop the daemons.

        SIGTERM, then SIGKILL after 10 s; the jobs' step daemons would
        outlive slurmd otherwise.
        """
        if self.processes and all(p.poll() is None for p in self.processes):
            subprocess.run(["scancel", "--me"], env=self.env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 15
            while self.command("squeue", "-h").strip() and time.monotonic() < deadline:
                time.sleep(0.5)
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()

    def log(self) -> str:
        """Return the daemons' logs (for a failure message)."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}"
            for path in sorted(self.root.glob("*.log"))
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _real_memory_mb() -> int:
    """Return 90% of MemTotal in MB (slurmd refuses a node declared with more than it has)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 9 // 10 // 1024
    raise SlurmUnavailable("no MemTotal in /proc/meminfo")


def _slurm_conf(root: Path, socket_path: Path) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""\
ClusterName=connscale
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=2
MinJobAge=10
SlurmdTimeout=30
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} \
RealMemory={_real_memory_mb()} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def _check_can_start() -> None:
    if os.geteuid() != 0:
        raise SlurmUnavailable("starting a SLURM of its own needs root")
    missing = [name for name in (*DAEMONS, "sinfo", "sbatch") if shutil.which(name) is None]
    if missing:
        raise SlurmUnavailable(f"{', '.join(missing)} not found (apt-get install slurm-wlm munge)")


def _wait_idle(slurm: LocalSlurm) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    state = ""
    while time.monotonic() < deadline:
        for process in slurm.processes:
            if process.poll() is not None:
                raise SlurmUnavailable(f"{process.args[0]} exited:\n{slurm.log()}")
        done = subprocess.run(
            ["sinfo", "-h", "-n", NODE, "-o", "%t"], env=slurm.env, capture_output=True, text=True
        )
        state = done.stdout.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    raise SlurmUnavailable(
        f"the node was not idle after {START_TIMEOUT:.0f} s (state {state!r}):\n{slurm.log()}"
    )


def start_slurm(root: Path) -> LocalSlurm:
    """Start munged, slurmctld and slurmd for one localhost node under ``root``.

    Raises
    ------
    SlurmUnavailable
        Not root, a binary missing, or the node not idle within 30 s.
    """
    _check_can_start()
    for folder in ("state", "spool", "munge"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, socket_path))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    slurm = LocalSlurm(root, env)
    commands = [
        ["munged", "-F", "--force", f"--key-file={key}", f"--socket={socket_path}",
         f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munged.log",
         f"--seed-file={root}/munge/munged.seed"],
        ["slurmctld", "-D", "-i", "-f", str(conf)],
        ["slurmd", "-D", "-N", NODE, "-f", str(conf)],
    ]  # fmt: skip
    try:
        for args in commands:
            slurm.processes.append(
                subprocess.Popen(
                    args,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=(root / f"{args[0]}.stderr.log").open("w"),
                )
            )
            if args[0] == "munged":
                _wait_for(socket_path, slurm)
        _wait_idle(slurm)
    except BaseException:
        slurm.stop()
        raise
    return slurm


def _wait_for(path: Path, slurm: LocalSlurm) -> None:
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline or slurm.processes[-1].poll() is not None:
            raise SlurmUnavailable(f"munged did not start:\n{slurm.log()}")
        time.sleep(0.1)


class HoldOneTask(WorkerPlugin):
    """A Dask worker plugin that holds the first task any worker starts, for a job to be killed.

    The first worker to start a task writes its ``SLURM_JOB_ID`` to
    ``marker`` (created exclusively: one task in the whole cluster) and
    then blocks until its job is killed; every other task runs as usual.
    """

    name = "connscale-hold-one-task"

    def __init__(self, marker: str, seconds: float = 120.0) -> None:
        self.marker = marker
        self.seconds = seconds

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != "executing":
            return
        try:
            with open(self.marker, "x") as file:
                file.write(os.environ.get("SLURM_JOB_ID", ""))
        except FileExistsError:
            return
        time.sleep(self.seconds)  # the worker's event loop too: it is killed here


@pytest.fixture(scope="module", name="slurm")
def slurm_fixture(tmp_path_factory):
    """A SLURM for a test module's tests (skip where it cannot start); ``SLURM_CONF`` set meanwhile.

    A test module imports it (``from tests.engines._slurm import slurm_fixture``)
    and takes the fixture ``slurm``.
    """
    pytest.importorskip("dask_jobqueue")
    try:
        running = start_slurm(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as exc:
        pytest.skip(f"no SLURM for the test: {exc}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = running.env["SLURM_CONF"]  # sbatch, squeue, scancel find it
    yield running
    if before is None:
        del os.environ["SLURM_CONF"]
    else:
        os.environ["SLURM_CONF"] = before
    running.stop()
