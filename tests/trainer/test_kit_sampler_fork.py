"""Issue 22, item 12: the memory sampler's thread and the DataLoader's forked workers.

A run starts its NVML sampler before the DataLoader forks its workers. A worker forked while the sampler is in the
middle of a reading would inherit whatever lock that reading holds (NVML's, the allocator's), locked for good. The
sampler therefore stops its thread before every fork and starts it again after; these tests fork for real, with a
reading that holds a lock as NVML's calls do.
"""

import os
import threading
import time

import pytest

from trainer.memory import _PeakSampler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
READING_S = 0.1  # one slow reading, as an NVML call on a busy driver


class SlowReader:
    """A reading that holds a lock while it lasts, and counts the readings made."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = threading.Event()
        self.readings = 0

    def __call__(self) -> int:
        with self.lock:
            self.inside.set()
            time.sleep(READING_S)
            self.readings += 1
        return self.readings


def fork_and_try_the_lock(lock: threading.Lock) -> int:
    """Fork; the child exits 0 if it can take `lock`, 1 if a thread of the parent held it when the process forked."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if lock.acquire(timeout=2) else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_fork_while_the_sampler_reads_leaves_the_child_no_lock_held():
    read = SlowReader()
    sampler = _PeakSampler(read, interval=0.001)  # its first reading, here
    read.inside.clear()
    sampler.start()
    assert read.inside.wait(5)  # the sampler's thread is in a reading now, holding the lock
    assert fork_and_try_the_lock(read.lock) == 0
    before = read.readings
    deadline = time.monotonic() + 5
    while read.readings == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler.is_alive() and read.readings > before  # the parent samples on after the fork
    assert sampler.stop() == read.readings


def test_a_stopped_sampler_is_not_started_again_by_a_later_fork():
    read = SlowReader()
    sampler = _PeakSampler(read, interval=0.001)
    sampler.start()
    sampler.stop()
    assert fork_and_try_the_lock(read.lock) == 0
    assert not sampler.is_alive()
