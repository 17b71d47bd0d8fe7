"""What the instructor's console needs from the server: who may open it, each learner's latest comparison, and how
long the queue will take."""

from __future__ import annotations

import hmac
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable

from server.estimate import job_estimate
from server.history import HistoryStore
from server.records import JobSpec, JobView

FREE_TRIES = 3  # wrong passwords before the console starts making people wait
MAX_WAIT_S = 300.0
CLASS_RESULTS_SCANNED = 2000  # finished comparisons read for the class table, newest first
RECENT_JOBS_FOR_CAPACITY = 30


class PasswordGate:
    """Checks the instructor's password. After FREE_TRIES wrong tries in a row, each further try must wait twice
    as long as the last (2, 4, 8 ... s, at most MAX_WAIT_S): guessing becomes hopeless, a typo costs seconds.
    Counted for the whole server, since a guesser can open as many learner sessions as they like."""

    def __init__(self, password: str, clock: Callable[[], float] = time.monotonic):
        self._password = password.encode("utf-8")
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._next_try_at = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self._password)

    def check(self, attempt: str) -> tuple[bool, str]:
        """(True, "") for the right password; else (False, one line saying why, and how long to wait)."""
        if not self.enabled:
            return False, "this server has no instructor password; the instructor signs in with an allowed email"
        with self._lock:
            wait = self._next_try_at - self._clock()
            if wait > 0:
                return False, f"too many wrong tries: wait {wait:.0f} s before the next one"
            if hmac.compare_digest(attempt.encode("utf-8"), self._password):
                self._failures = 0
                return True, ""
            self._failures += 1
            extra = self._failures - FREE_TRIES
            if extra <= 0:
                return False, "wrong password"
            delay = min(MAX_WAIT_S, 2.0**extra)
            self._next_try_at = self._clock() + delay
            return False, f"wrong password; the next try is possible in {delay:.0f} s"


def latest_comparisons(store: HistoryStore) -> list[JobView]:
    """Each learner's latest finished comparison with at least a pair of runs, newest first."""
    latest: dict[str, JobView] = {}
    for job in store.list_jobs(kind="compare", status="done", limit=CLASS_RESULTS_SCANNED):
        if len(job.results) >= 2:
            latest.setdefault(job.learner_id, job)  # newest first, so the first seen is the latest
    return list(latest.values())


def comparisons_per_hour(store: HistoryStore, workers: int) -> float | None:
    """Learners one server serves per hour, one comparison each: from this server's recent comparisons' wall
    times (queue waits left out), times its workers; None until it has run one."""
    seconds = [
        job.finished_at - job.started_at
        for job in store.list_jobs(kind="compare", status="done", limit=RECENT_JOBS_FOR_CAPACITY)
        if job.started_at and job.finished_at and job.finished_at > job.started_at
    ]
    if not seconds:
        return None
    return workers * 3600.0 / statistics.median(seconds)


@dataclass(frozen=True)
class Capacity:
    """Learners a server serves per hour at one set of settings, one comparison each (queue waits left out)."""

    comparison_s: float  # one comparison at those settings, start-up and accuracy checks included
    learners_per_hour: float  # over all the server's workers
    from_history: bool  # every run estimated from this server's own past runs (else partly the coarse table)


def capacity_at(spec: JobSpec, store: HistoryStore, device_type: str, workers: int) -> Capacity | None:
    """Capacity for comparisons like `spec` (the Run page's starting settings: the lab's, or the instructor's
    presets), from server/estimate: this server's own runs of those modes where it has some, else the coarse
    table; None where neither knows the device. Recent comparisons' own times (comparisons_per_hour) say what the
    class actually ran, which may be much smaller or larger than the settings the room starts from."""
    seconds, from_history = job_estimate(spec, store, device_type)
    if not seconds:
        return None
    return Capacity(seconds, max(1, workers) * 3600.0 / seconds, from_history)
