"""Who a learner is across reloads, tabs and days.

A learner has a public id, which owns their jobs and may appear in pages and links, and a display name. Their
browser keeps a private token (a cookie, or a bookmarked link) that maps to the id; only a hash of the token is
stored, so the history file does not hand out anyone's identity. With real sign-in, the id is derived from the
identity provider's subject instead, and there is no token.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from server.history import HistoryStore
from trainer.errors import ConfigError

TOKEN_BYTES = 32  # 256 random bits: unguessable
LEARNER_ID_BYTES = 12
MAX_NAME_CHARS = 40
_ADJECTIVES = ("brisk", "calm", "clever", "curious", "eager", "keen", "lucid", "nimble", "patient", "quick",
               "quiet", "steady", "swift", "tidy", "wise")
_NOUNS = ("badger", "falcon", "heron", "lynx", "otter", "owl", "panda", "raven", "robin", "seal", "swan",
          "tiger", "wolf", "wren", "yak")

@dataclass(frozen=True)
class Learner:
    id: str  # public: owns jobs, safe to show
    display_name: str
    named: bool = True  # False while the name is the generated one


@dataclass(frozen=True)
class RosterEntry:
    """One learner as the instructor's roster lists them."""

    id: str
    display_name: str
    sign_in: str | None  # the provider's identity (an email) for a signed-in learner
    created_at: float


def generated_name() -> str:
    """A friendly name a learner can keep or change, e.g. "curious otter 42"."""
    return f"{secrets.choice(_ADJECTIVES)} {secrets.choice(_NOUNS)} {secrets.randbelow(90) + 10}"


def checked_name(name: object) -> str:
    """The display name with surrounding spaces removed; ConfigError (one line) if it is empty or too long."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("a display name needs at least one visible character")
    name = " ".join(name.split())
    if len(name) > MAX_NAME_CHARS:
        raise ConfigError(f"a display name has at most {MAX_NAME_CHARS} characters, got {len(name)}")
    return name


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class LearnerStore:
    """Learners in the server's history file (the same SQLite database as the jobs)."""

    def __init__(self, history: HistoryStore):
        self._history = history  # its file has the learners table (server/state.py)

    def create(self, display_name: str | None = None) -> tuple[Learner, str]:
        """A new learner and the private token for their browser (returned here only, never stored)."""
        learner = Learner(secrets.token_hex(LEARNER_ID_BYTES), checked_name(display_name or generated_name()),
                          named=display_name is not None)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        with self._history.connect() as db:
            db.execute("INSERT INTO learners (id, display_name, token_hash, created_at, named) VALUES (?, ?, ?, ?, ?)",
                       (learner.id, learner.display_name, _hash(token), time.time(), int(learner.named)))
        return learner, token

    def by_token(self, token: object) -> Learner | None:
        """The learner whose browser holds `token`; None for anything else (a typo, a forged or old token)."""
        if not isinstance(token, str) or not token or len(token) > 200:
            return None
        with self._history.connect() as db:
            row = db.execute("SELECT id, display_name, named FROM learners WHERE token_hash = ?",
                             (_hash(token),)).fetchone()
        return Learner(row["id"], row["display_name"], bool(row["named"])) if row else None

    def signed_in(self, subject: str, display_name: object, sign_in: str | None = None) -> Learner:
        """The learner for a signed-in user (created on first sign-in); the provider's name and identity (`sign_in`,
        an email) are kept up to date."""
        learner_id = "u" + hashlib.sha256(subject.encode("utf-8")).hexdigest()[: 2 * LEARNER_ID_BYTES]
        # A provider's name may be blank, spaces only, or long: never refuse a sign-in over it.
        name = " ".join(str(display_name or "").split())[:MAX_NAME_CHARS].strip() or "signed-in learner"
        with self._history.connect() as db:
            db.execute(
                "INSERT INTO learners (id, display_name, subject, created_at, sign_in, named) VALUES (?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name, sign_in = excluded.sign_in",
                (learner_id, name, subject, time.time(), sign_in),
            )
        return Learner(learner_id, name)

    def rename(self, learner_id: str, display_name: str) -> Learner:
        name = checked_name(display_name)
        with self._history.connect() as db:
            db.execute("UPDATE learners SET display_name = ?, named = 1 WHERE id = ?", (name, learner_id))
        return Learner(learner_id, name)

    def roster(self) -> list[RosterEntry]:
        """Every learner, first seen first."""
        with self._history.connect() as db:
            rows = db.execute("SELECT id, display_name, sign_in, created_at FROM learners ORDER BY created_at")
            return [RosterEntry(*tuple(row)) for row in rows]

    def names(self) -> dict[str, str]:
        """Every learner's display name by id, for owner columns."""
        with self._history.connect() as db:
            return {row["id"]: row["display_name"] for row in db.execute("SELECT id, display_name FROM learners")}
