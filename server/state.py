"""The state folder's history file (history.sqlite3) as one versioned thing: every store's tables, the schema version
that names their shape, the way up from each older version, and consistent copies of the file.

    python -m server.state backup [DEST]    a consistent copy while the app runs (SQLite's online backup)
    python -m server.state restore FILE     a copy put back, after keeping the state it replaces

Schema versions: 1, the first release (jobs and their runs; a job's owner was a session); 2, a job's owner is its
learner_id; 3, jobs have a purpose; 4, the stores' tables belong to the version too (learners, guesses, the console's
settings, the server's secret) and the file names itself AMP Lab's (PRAGMA application_id). HistoryStore upgrades an
older file when it opens it, once and in place, after keeping a copy in the state folder's backups/; it refuses a
newer or a foreign file without changing it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from server.records import PURPOSE_OF_KIND
from trainer.errors import TrainerError, one_line

SCHEMA_VERSION = 4
APPLICATION_ID = 0x414D504C  # "AMPL" in the file's header: this file is AMP Lab's
BACKUPS = "backups"  # the state folder's copies: before each upgrade, before each restore, and `backup`'s default
BUSY_TIMEOUT_S = 30.0

_TABLES = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    learner_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    purpose TEXT NOT NULL DEFAULT '',  -- what the job is for (server/records.JOB_PURPOSES)
    label TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    error TEXT,
    precisions TEXT NOT NULL DEFAULT '',  -- ",fp32,amp-bf16," so a filter can match one name exactly
    current_run INTEGER NOT NULL DEFAULT 0,
    spec TEXT NOT NULL,
    outcomes TEXT NOT NULL DEFAULT '[]',
    extras TEXT NOT NULL DEFAULT '{}',
    estimated_total_s REAL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at);
CREATE INDEX IF NOT EXISTS jobs_by_learner ON jobs (learner_id, purpose);
CREATE TABLE IF NOT EXISTS runs (  -- successful runs only, one row each, for comparisons and estimates
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    run_index INTEGER NOT NULL,
    device_type TEXT NOT NULL,
    precision TEXT NOT NULL,
    data TEXT NOT NULL,
    loader TEXT NOT NULL,
    width INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    epochs INTEGER NOT NULL,
    train_images INTEGER NOT NULL,
    total_time_s REAL NOT NULL,
    steady_images_per_s REAL,
    wall_s REAL,
    created_at REAL NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (job_id, run_index)
);
CREATE INDEX IF NOT EXISTS runs_by_kind ON runs (device_type, precision, loader, width);
CREATE TABLE IF NOT EXISTS learners (  -- server/identity.py
    id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    token_hash TEXT UNIQUE,      -- sha256 of the browser's token; NULL for signed-in learners
    subject TEXT UNIQUE,         -- the identity provider's subject for signed-in learners
    created_at REAL NOT NULL,
    sign_in TEXT,                -- signed-in learners: who the provider says they are (an email), for the roster
    named INTEGER NOT NULL DEFAULT 0  -- 1 once the learner chose a name (or the provider gave one)
);
CREATE TABLE IF NOT EXISTS guesses (  -- server/guesses.py
    learner_id TEXT NOT NULL,
    question_key TEXT NOT NULL,   -- which question ("run-speedup"), as the page names it
    question TEXT NOT NULL,       -- its wording when the guess was locked
    value REAL,                   -- NULL: the learner chose to see the answer without guessing
    locked_at REAL NOT NULL,
    fmt TEXT NOT NULL DEFAULT '%g',  -- the page's printf format for the guess and its answer ("%.2fx")
    answer REAL,                  -- the answer the page revealed for it; NULL: not revealed yet
    answered_at REAL,
    answered_by TEXT,             -- where the answer was measured ("your own quick demo", "a reference run ...")
    PRIMARY KEY (learner_id, question_key)
);
CREATE TABLE IF NOT EXISTS console (  -- server/console.py
    name TEXT PRIMARY KEY,  -- message, presets, kinds or class_start
    value TEXT NOT NULL     -- as JSON
);
CREATE TABLE IF NOT EXISTS server_secret (  -- server/instructor.py
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret TEXT NOT NULL  -- signs the instructor's sign-in cookie; never leaves the server
);
"""
# Columns that tables of schema 3 may lack (added then without a version): each with its declaration.
_ADDED_COLUMNS = {
    # Learners from before the roster keep the names they had.
    "learners": {"sign_in": "TEXT", "named": "INTEGER NOT NULL DEFAULT 1"},
    "guesses": {"fmt": "TEXT NOT NULL DEFAULT '%g'", "answer": "REAL", "answered_at": "REAL", "answered_by": "TEXT"},
}
# Before the console table, each of its settings had a one-row table of its own: what each row becomes there.
_OLD_CONSOLE_TABLES = {
    "class_message": lambda row: {"message": {"text": row["text"], "set_at": row["set_at"]}},
    "presets": lambda row: {"presets": row["query"]},
    "kind_policy": lambda row: {"kinds": json.loads(row["rules"]), "class_start": row["since"]},
}


class HistoryError(TrainerError):
    """The history file cannot be opened, read, written, copied or restored."""


@dataclass(frozen=True)
class Contents:
    """What a history file holds, in counts."""

    version: int
    jobs: int
    results: int  # successful runs, one result each
    learners: int
    guesses: int

    def __str__(self) -> str:
        return (f"schema {self.version}: {self.jobs} jobs, {self.results} results, {self.learners} learners, "
                f"{self.guesses} guesses")


def refusal(db: sqlite3.Connection) -> str | None:
    """Why this app must not use the open file (another application's, or a newer AMP Lab's), or None. Reads only."""
    application_id = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if application_id not in (0, APPLICATION_ID):
        return f"belongs to another application (its application_id is {application_id:#x})"
    if version > SCHEMA_VERSION:
        return (f"was written by a newer AMP Lab (schema {version}; this one reads up to {SCHEMA_VERSION}): upgrade "
                "this app to use it")
    tables = _tables(db)
    if tables and "jobs" not in tables:
        return f"is not an AMP Lab history (it has tables, but no jobs table: {', '.join(sorted(tables)[:5])})"
    return None


def needs_upgrade(db: sqlite3.Connection) -> int | None:
    """The schema of an older file with tables in it (one to copy before upgrading); None for a current or new one."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    return version if version < SCHEMA_VERSION and _tables(db) else None


def upgrade(db: sqlite3.Connection) -> None:
    """Bring the file (new, or of any older schema) up to SCHEMA_VERSION in place, keeping every row. Run inside the
    opener's write transaction; each step looks at the tables as they are, so a file that a crash left between two
    shapes gets the rest."""
    tables = _tables(db)
    jobs = _columns(db, "jobs") if "jobs" in tables else set()
    if "session_id" in jobs:  # 2: schema 1 named a job's owner a session
        db.execute("ALTER TABLE jobs RENAME COLUMN session_id TO learner_id")
        db.execute("DROP INDEX IF EXISTS jobs_by_session")
    if jobs and "purpose" not in jobs:  # 3: what each job is for; an older job's is its kind's
        db.execute("ALTER TABLE jobs ADD COLUMN purpose TEXT NOT NULL DEFAULT ''")
        for kind, purpose in PURPOSE_OF_KIND.items():
            db.execute("UPDATE jobs SET purpose = ? WHERE kind = ?", (purpose, kind))
        db.execute("DROP INDEX IF EXISTS jobs_by_learner")
    for table, added in _ADDED_COLUMNS.items():  # 4: the stores' tables as schema 4 has them
        if table in tables:
            present = _columns(db, table)
            for column, declaration in added.items():
                if column not in present:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    for statement in _statements(_TABLES):
        db.execute(statement)
    for table in tables & set(_OLD_CONSOLE_TABLES):
        for row in db.execute(f"SELECT * FROM {table}").fetchall():
            db.executemany("INSERT OR IGNORE INTO console (name, value) VALUES (?, ?)",
                           [(name, json.dumps(value)) for name, value in _OLD_CONSOLE_TABLES[table](row).items()])
        db.execute(f"DROP TABLE {table}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def copy(source: Path, dest: Path) -> None:
    """Write a consistent copy of the SQLite file `source` to `dest` with SQLite's online backup: safe while others
    write (each transaction is in the copy whole or not at all). The copy is one file (rollback journal, no -wal),
    and it appears under its name only once complete."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        with closing(sqlite3.connect(source, timeout=BUSY_TIMEOUT_S)) as db, closing(sqlite3.connect(partial)) as out:
            db.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)


def contents(path: Path) -> Contents:
    """What the history file at `path` holds, read without changing it; HistoryError (one line) for a missing,
    damaged, foreign or newer file."""
    if not path.is_file():
        raise HistoryError(f"{path} is not a file")
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            problems = [row[0] for row in db.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise HistoryError(f"{path} is damaged: SQLite's integrity check says {one_line(problems[0], 120)}")
            problem = refusal(db)
            if problem or "jobs" not in _tables(db):
                raise HistoryError(f"{path} {problem or 'is not an AMP Lab history (it has no jobs table)'}")
            tables = _tables(db)
            counts = [db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] if table in tables else 0
                      for table in ("jobs", "runs", "learners", "guesses")]
            return Contents(db.execute("PRAGMA user_version").fetchone()[0], *counts)
    except sqlite3.DatabaseError as err:
        raise HistoryError(f"{path} is damaged or not an SQLite database ({one_line(err, 120)})") from None


def backup(live: Path, dest: Path) -> tuple[Path, Contents]:
    """A consistent copy of the history file `live` at `dest` (a folder: a dated file in it), checked once written;
    the copy's path and contents. A copy that fails its check is removed, and HistoryError says why."""
    if not live.is_file():
        raise HistoryError(f"there is no history file at {live}: set AMP_LAB_STATE_DIR to the app's state folder")
    if dest.is_dir():
        dest = _dated(dest, "history")
    try:
        copy(live, dest)
        return dest, contents(dest)
    except HistoryError:
        dest.unlink(missing_ok=True)
        raise
    except (sqlite3.Error, OSError) as err:
        raise HistoryError(f"cannot copy {live} to {dest} ({one_line(err, 120)})") from None


def keep_before_upgrade(live: Path, version: int) -> Path:
    """A copy of `live`, a file of schema `version`, in the state folder's backups/, before it is upgraded."""
    kept = _dated(live.parent / BACKUPS, f"history-schema{version}-before-upgrade")
    try:
        copy(live, kept)
    except (sqlite3.Error, OSError) as err:
        raise HistoryError(f"cannot keep a copy of {live} before upgrading it from schema {version} "
                           f"({one_line(err, 120)}); nothing was changed") from None
    return kept


def restore(saved: Path, live: Path) -> tuple[Contents, Path | None]:
    """Put the copy `saved` in place of the history file `live`, after keeping the state it replaces in backups/ (for
    a damaged one, its files moved there as they are). Returns what was restored and where the replaced state went.
    A missing, damaged, foreign or newer copy is refused (HistoryError, one line) and nothing changes."""
    restored = contents(saved)
    kept = None
    live.parent.mkdir(parents=True, exist_ok=True)
    if live.exists():
        kept = _dated(live.parent / BACKUPS, "history-before-restore")
        try:
            copy(live, kept)
        except sqlite3.DatabaseError:  # the state it replaces is damaged: keep its files as they are
            for suffix in ("", "-wal"):
                if Path(f"{live}{suffix}").exists():
                    shutil.move(f"{live}{suffix}", f"{kept}{suffix}")
            Path(f"{live}-shm").unlink(missing_ok=True)
    try:
        with closing(sqlite3.connect(f"{saved.resolve().as_uri()}?mode=ro", uri=True)) as db, \
                closing(sqlite3.connect(live, timeout=BUSY_TIMEOUT_S)) as out:
            db.backup(out)  # into the live file under SQLite's locks, so a reader never sees half of it
    except (sqlite3.Error, OSError) as err:
        kept_line = f"; the state it was to replace is in {kept}" if kept else ""
        raise HistoryError(f"cannot restore {saved} into {live} ({one_line(err, 120)}){kept_line}") from None
    return restored, kept


def _statements(script: str) -> list[str]:
    """The script's statements one by one (executescript would commit the opener's transaction first)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending)
            pending = ""
    return statements


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                         "'sqlite_%'")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _dated(folder: Path, stem: str) -> Path:
    """A new file name in `folder`: `stem`, the UTC time, and a number where that name is taken."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path, number = folder / f"{stem}-{stamp}.sqlite3", 1
    while path.exists():
        number += 1
        path = folder / f"{stem}-{stamp}-{number}.sqlite3"
    return path


def main(argv: list[str] | None = None) -> int:
    from server.settings import Settings  # here: the module itself is imported by every store

    parser = argparse.ArgumentParser(
        prog="python -m server.state",
        description="Back up the class's history while the app runs, or restore a backup. The history file is "
                    "the one the app uses: AMP_LAB_STATE_DIR (or AMP_LAB_CONFIG's state_dir), else ./state.")
    commands = parser.add_subparsers(dest="command", required=True)
    save = commands.add_parser("backup", help="write a consistent copy of the history (SQLite's online backup)")
    save.add_argument("dest", nargs="?",
                      help=f"a file, or a folder (an existing one, or a path ending in /) for a dated file in it "
                           f"(default: the state folder's {BACKUPS}/)")
    put_back = commands.add_parser("restore", help="put a backup in place of the history, keeping the state it "
                                                   f"replaces in the state folder's {BACKUPS}/ (stop the app first)")
    put_back.add_argument("file", type=Path, help="a file written by `backup`")
    args = parser.parse_args(argv)
    try:
        live = Settings.from_env().history_path
        if args.command == "backup":
            dest = Path(args.dest) if args.dest else live.parent / BACKUPS
            if not args.dest or args.dest.endswith("/"):
                dest.mkdir(parents=True, exist_ok=True)
            path, saved = backup(live, dest)
            print(f"backed up {live} to {path} ({saved})")
        else:
            restored, kept = restore(args.file, live)
            replaced = f"; the state it replaced is in {kept}" if kept else ""
            upgrade_note = (f"; the app upgrades it to schema {SCHEMA_VERSION} when it starts"
                            if restored.version < SCHEMA_VERSION else "")
            print(f"restored {args.file} into {live} ({restored}){replaced}{upgrade_note}")
    except TrainerError as err:
        print(f"amp-lab state: {one_line(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
