"""What the instructor's console needs from the server: who may open it, each learner's latest comparison, and how
long the queue will take."""

from __future__ import annotations

import hashlib
import hmac
import secrets
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
MAX_TRACKED = 10_000  # browsers or addresses whose wrong tries are remembered
PASS_HOURS = 12.0  # a class day: the console survives reloads until then
CLASS_RESULTS_SCANNED = 2000  # finished comparisons read for the class table, newest first
RECENT_JOBS_FOR_CAPACITY = 30


class PasswordGate:
    """Checks the instructor's password. After FREE_TRIES wrong tries in a row from one browser or address, each
    further try from there must wait twice as long as the last (2, 4, 8 ... s, at most MAX_WAIT_S): guessing becomes
    hopeless, a typo costs seconds, and a learner's wrong guesses never slow the instructor's own sign-in."""

    def __init__(self, password: str, clock: Callable[[], float] = time.monotonic):
        self._password = password.encode("utf-8")
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}  # who -> wrong tries in a row
        self._next_try_at: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._password)

    def check(self, attempt: str, who: str = "") -> tuple[bool, str]:
        """(True, "") for the right password; else (False, one line saying why, and how long to wait). `who` is the
        browser or address the try comes from."""
        if not self.enabled:
            return False, "this server has no instructor password; the instructor signs in with an allowed email"
        with self._lock:
            wait = self._next_try_at.get(who, 0.0) - self._clock()
            if wait > 0:
                return False, f"too many wrong tries: wait {wait:.0f} s before the next one"
            if hmac.compare_digest(attempt.encode("utf-8"), self._password):
                self._failures.pop(who, None)
                self._next_try_at.pop(who, None)
                return True, ""
            if who not in self._failures and len(self._failures) >= MAX_TRACKED:
                self._failures.pop(next(iter(self._failures)))  # the oldest: memory stays bounded
            self._failures[who] = failures = self._failures.get(who, 0) + 1
            extra = failures - FREE_TRIES
            if extra <= 0:
                return False, "wrong password"
            delay = min(MAX_WAIT_S, 2.0**extra)
            self._next_try_at[who] = self._clock() + delay
            return False, f"wrong password; the next try is possible in {delay:.0f} s"


class InstructorPass:
    """The instructor's signed, expiring sign-in, kept in their browser's cookie so that a reload of the projector's
    tab keeps the console: "<expiry>.<HMAC-SHA256 of it>" under a random secret kept in the history file. The
    password itself is never stored in the browser."""

    def __init__(self, history: HistoryStore, clock: Callable[[], float] = time.time):
        self._clock = clock
        with history.connect() as db:
            db.execute("INSERT OR IGNORE INTO server_secret (id, secret) VALUES (1, ?)", (secrets.token_hex(32),))
            self._secret = bytes.fromhex(db.execute("SELECT secret FROM server_secret WHERE id = 1").fetchone()[0])

    def issue(self, hours: float = PASS_HOURS) -> str:
        expiry = str(int(self._clock() + hours * 3600))
        return f"{expiry}.{self._sign(expiry)}"

    def holds(self, token: object) -> bool:
        """True for a pass this server issued that has not expired."""
        if not isinstance(token, str) or token.count(".") != 1 or len(token) > 200:
            return False
        expiry, signature = token.split(".")
        return (expiry.isdigit() and hmac.compare_digest(signature, self._sign(expiry))
                and int(expiry) > self._clock())

    def _sign(self, expiry: str) -> str:
        return hmac.new(self._secret, expiry.encode("ascii"), hashlib.sha256).hexdigest()


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
