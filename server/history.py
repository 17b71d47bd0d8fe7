"""Every job this server ran, kept in SQLite (WAL mode) so that history survives restarts and every page of the
class shares it.

Each call opens its own short-lived connection, so the store is safe from many threads and processes.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from server import state
from server.records import JobView
from server.state import HistoryError
from trainer.results import RunResult

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class RunTiming:
    """The timing figures of one successful run, read without loading its whole result."""

    batch_size: int
    epochs: int
    train_images: int  # per epoch
    total_time_s: float
    steady_images_per_s: float | None
    wall_s: float | None  # the whole run as the job manager saw it: start-up, data, training, evaluation


class HistoryStore:
    """Jobs and their runs in one SQLite file; every method opens and closes its own connection."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise HistoryError(
                f"cannot create the state folder {self.path.parent} ({err.strerror}); "
                "set AMP_LAB_STATE_DIR to a writable folder"
            ) from None
        with self.connect() as db:
            self._refuse_unusable(db)  # before anything is written: a file this app must not use stays as it is
            mode = _set_wal(db)
            # One opener at a time creates or upgrades the schema; the others wait for it (busy timeout). A deferred
            # transaction would read the schema first and could then be refused the write without waiting.
            db.execute("BEGIN IMMEDIATE")
            self._refuse_unusable(db)  # again, now that no other opener can change it
            older = state.needs_upgrade(db)
            if older is not None:
                # Copied by a second connection, which reads the file as it is while this one holds the write lock.
                kept = state.keep_before_upgrade(self.path, older)
                log.warning("upgrading %s from schema %d to %d; a copy from before is %s", self.path, older,
                            state.SCHEMA_VERSION, kept)
            if db.execute("PRAGMA user_version").fetchone()[0] < state.SCHEMA_VERSION:
                state.upgrade(db)
        self.journal_mode = mode

    def _refuse_unusable(self, db: sqlite3.Connection) -> None:
        problem = state.refusal(db)
        if problem:
            raise HistoryError(f"the history file {self.path} {problem}; it is left as it is (AMP_LAB_STATE_DIR "
                               "set to another folder starts a new one)")

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call: committed on success, rolled back on error, always closed."""
        db = None
        try:
            # A write takes the write lock when its transaction begins (BEGIN IMMEDIATE), waiting for another writer
            # up to the busy timeout: a deferred transaction that read first could be refused at once instead
            # (SQLITE_BUSY_SNAPSHOT), which six threads writing at once hit here now and then.
            db = sqlite3.connect(self.path, timeout=state.BUSY_TIMEOUT_S, isolation_level="IMMEDIATE")
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a power cut loses at most the last writes
            with db:
                yield db
        except sqlite3.Error as err:
            raise HistoryError(
                f"the history file {self.path} cannot be used ({err}); fix its permissions, move it "
                "aside, or set AMP_LAB_STATE_DIR to another folder"
            ) from None
        finally:
            if db is not None:
                db.close()

    def save_job(self, job: JobView) -> None:
        """Insert or replace the job, and its successful runs, by the job's id."""
        data = job.to_dict()
        row = {
            "id": job.id,
            "learner_id": job.learner_id,
            "kind": job.kind,
            "purpose": job.spec.purpose,
            "label": job.label,
            "status": job.status,
            "error": job.error,
            "precisions": "," + ",".join(job.spec.precisions) + ",",
            "current_run": job.current_run,
            "spec": json.dumps(data["spec"]),
            "outcomes": json.dumps(data["outcomes"]),
            "extras": json.dumps(job.extras),
            "estimated_total_s": job.estimated_total_s,
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
        }
        runs = list(_run_rows(job, data["outcomes"]))
        with self.connect() as db:
            db.execute(
                f"INSERT OR REPLACE INTO jobs ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})", row
            )
            db.execute("DELETE FROM runs WHERE job_id = ?", (job.id,))
            if runs:
                db.executemany(
                    f"INSERT INTO runs ({', '.join(runs[0])}) VALUES ({', '.join(':' + k for k in runs[0])})", runs
                )

    def get_job(self, job_id: str) -> "JobView | None":
        with self.connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        view = self._parse(row)
        if view is None:
            raise HistoryError(f"job {job_id} in the history file {self.path} is damaged and cannot be shown")
        return view

    def list_jobs(
        self,
        kind: str | None = None,
        status: str | None = None,
        limit: int = 200,
        *,
        precision: str | None = None,
        text: str | None = None,
        learner_id: str | None = None,
    ) -> list[JobView]:
        """Jobs newest first; each filter given narrows the list (text: case-insensitive, in the label)."""
        where, params = [], []
        for column, value in (("kind", kind), ("status", status), ("learner_id", learner_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if precision:
            where.append("instr(precisions, ?) > 0")
            params.append(f",{precision},")
        if text:
            where.append("instr(lower(label), ?) > 0")
            params.append(text.lower())
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.connect() as db:
            rows = db.execute(
                f"SELECT * FROM jobs {clause} ORDER BY created_at DESC, rowid DESC LIMIT ?",
                (*params, _row_limit(limit)),
            ).fetchall()
        return [view for view in map(self._parse, rows) if view is not None]

    def list_runs(
        self,
        precision: str | None = None,
        device_type: str | None = None,
        loader: str | None = None,
        width: int | None = None,
        limit: int = 500,
    ) -> list[tuple[str, int, RunResult]]:
        """Successful runs across all jobs, newest first, as (job id, run index, result)."""
        clause, params = _run_filters(precision, device_type, loader, width)
        with self.connect() as db:
            rows = db.execute(
                f"SELECT job_id, run_index, result FROM runs {clause} "
                "ORDER BY created_at DESC, run_index DESC LIMIT ?",
                (*params, _row_limit(limit)),
            ).fetchall()
        runs = ((row["job_id"], row["run_index"], self._parse_run(row)) for row in rows)
        return [run for run in runs if run[2] is not None]

    def _parse_run(self, row: sqlite3.Row) -> RunResult | None:
        """A run row's result, or None (logged) when it cannot be read back: one bad row hides only itself, as a
        damaged job row does, instead of breaking History for the whole class."""
        try:
            return RunResult.from_dict(json.loads(row["result"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("skipping a damaged run row (job %r, run %r) in %s", row["job_id"], row["run_index"],
                        self.path, exc_info=True)
            return None

    def run_timings(
        self, device_type: str, precision: str, loader: str, width: int, data: str | None = None, limit: int = 50
    ) -> list[RunTiming]:
        """Timing figures of recent successful runs of one kind, newest first (for estimates)."""
        clause, params = _run_filters(precision, device_type, loader, width, data)
        with self.connect() as db:
            rows = db.execute(
                "SELECT batch_size, epochs, train_images, total_time_s, steady_images_per_s, wall_s "
                f"FROM runs {clause} ORDER BY created_at DESC LIMIT ?",
                (*params, _row_limit(limit)),
            ).fetchall()
        return [RunTiming(*tuple(row)) for row in rows]

    def _parse(self, row: sqlite3.Row) -> "JobView | None":
        """The row as a JobView, or None (logged) when it cannot be read back, so one bad row hides only itself."""
        try:
            return _to_view(dict(row))
        except (ValueError, KeyError, TypeError):
            log.warning("skipping a damaged job row %r in %s", row["id"], self.path, exc_info=True)
            return None

    def count_jobs(self, learner_id: str, purpose: str, since: float) -> int:
        """Jobs of `purpose` that `learner_id` submitted since `since` and that are waiting, running or done (a failed
        or cancelled one does not use up a per-learner cap)."""
        with self.connect() as db:
            row = db.execute("SELECT COUNT(*) FROM jobs WHERE learner_id = ? AND purpose = ? AND created_at >= ? AND "
                             "status IN ('queued', 'running', 'done')", (learner_id, purpose, since)).fetchone()
        return row[0]

    def job_counts(self) -> dict[str, dict[str, int]]:
        """Jobs each learner has had waiting, running or done, by purpose: {learner id: {purpose: count}}."""
        counts: dict[str, dict[str, int]] = {}
        with self.connect() as db:
            for row in db.execute("SELECT learner_id, purpose, COUNT(*) FROM jobs WHERE status IN "
                                  "('queued', 'running', 'done') GROUP BY learner_id, purpose"):
                counts.setdefault(row[0], {})[row[1]] = row[2]
        return counts

    def unfinished_jobs(self) -> list[JobView]:
        """Jobs left queued or running by a previous server process, in the order they were submitted (the job
        manager queues them again at start-up; this assumes one job manager per state folder, as the app runs)."""
        with self.connect() as db:
            rows = db.execute("SELECT * FROM jobs WHERE status IN ('queued', 'running') "
                              "ORDER BY created_at, rowid").fetchall()
        return [view for view in map(self._parse, rows) if view is not None]


def _set_wal(db: sqlite3.Connection) -> str:
    """Put the file in WAL mode and return the mode it is in. Switching a new file needs it alone for a moment, and
    SQLite answers 'locked' at once, without the busy timeout, while another opener is switching it: try again."""
    deadline = time.monotonic() + state.BUSY_TIMEOUT_S
    while True:
        try:
            return db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _row_limit(limit: int) -> int:
    return max(0, min(int(limit), 100_000))  # SQLite reads a negative LIMIT as "no limit"


def _run_filters(precision, device_type, loader, width, data=None) -> tuple[str, list]:
    where, params = [], []
    for column, value in (
        ("precision", precision),
        ("device_type", device_type),
        ("loader", loader),
        ("width", width),
        ("data", data),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


def _run_rows(job: JobView, outcomes: list[dict]) -> Iterator[dict]:
    wall_times = job.extras.get("run_wall_s", [])
    for index, outcome in enumerate(outcomes):
        result = outcome.get("result")
        if outcome.get("status") != "ok" or not result:
            continue
        config = result.get("config") or outcome.get("config") or {}
        device_type = (result.get("environment") or {}).get("device_type") or job.extras.get("device_type")
        yield {
            "job_id": job.id,
            "run_index": index,
            "device_type": device_type or config.get("device", "?"),
            "precision": config.get("precision", "?"),
            "data": config.get("data", "?"),
            "loader": config.get("loader", "?"),
            "width": int(config.get("width", 1)),
            "batch_size": int(config.get("batch_size", 0)),
            # Epochs trained: min_steady_s may have added some to the configured count.
            "epochs": len(result.get("epoch_times_s") or []) or int(config.get("epochs", 0)),
            "train_images": int(result.get("train_images", 0)),
            "total_time_s": float(result.get("total_time_s", 0.0)),
            "steady_images_per_s": result.get("steady_images_per_s"),
            "wall_s": wall_times[index] if index < len(wall_times) else None,
            "created_at": job.finished_at or job.started_at or job.created_at,
            "result": json.dumps(result),
        }


def _to_view(row: dict) -> JobView:
    outcomes = json.loads(row["outcomes"])
    return JobView.from_dict(
        {
            **row,
            "spec": json.loads(row["spec"]),
            "outcomes": outcomes,
            "extras": json.loads(row["extras"]),
            "queue_position": None,
            "estimated_wait_s": None,
            "progress": None,
            "live_losses": [(o.get("result") or {}).get("loss_history", []) for o in outcomes],
        }
    )
