"""Reader processes end when the process that owns them is killed.

Readers are forked from the fork server, not from their owner: before, a
killed owner (a GPU worker, the participant call) left its readers blocked on
their queues for ever. Each now watches its owner and exits when it is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

OWNER = """
import time
import engine_funcs
from connscale.engines.readers import ReaderPool
pool = ReaderPool(2, processes=True)
pids = {pool.submit(engine_funcs.reader_pid, None).result() for _ in range(4)}
print(*sorted(pids), flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_readers_end_when_their_owner_is_killed():
    root = Path(__file__).parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root / "tests" / "engines")]),
    }
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env=env, cwd=root)  # fmt: skip
    try:
        readers = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(readers) == 2 and owner.pid not in readers
        assert all(_running(pid) for pid in readers)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 60
        while any(_running(pid) for pid in readers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in readers), "readers outlived their owner"
    finally:
        owner.kill()
