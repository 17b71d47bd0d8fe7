"""Which kinds of job a class may queue, and how many of each one learner may: the settings' mode, or the
instructor's policy from the console (kept by server/console.py).

Class mode (the default) is safe for 30 learners on one worker: the quick demo once, two comparisons, the tiny fp16
run and the scaler ablation once each per learner, and two pairs without one of AMP's safeguards (one of each);
sweeps and time breakdowns, which take many times a comparison's time, off until the instructor turns them on.
Open mode lets everyone queue anything, as often as the queue limits allow (a workshop of a few, or one learner on
their own machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from server.records import JOB_PURPOSES
from trainer.errors import ConfigError

MAX_PER_LEARNER = 100
# The kinds a page offers, as the console lists them ("run" is a script's single run, not a page's).
PAGE_KINDS = {purpose: name for purpose, name in JOB_PURPOSES.items() if purpose != "run"}


@dataclass(frozen=True)
class KindRule:
    """One kind of job: whether learners may queue it, and how many one learner may (None: as many as the queue
    limits allow)."""

    enabled: bool = True
    per_learner: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"a kind of job is on or off, got {self.enabled!r}")
        if self.per_learner is not None and (isinstance(self.per_learner, bool) or not isinstance(
                self.per_learner, int) or not 1 <= self.per_learner <= MAX_PER_LEARNER):
            raise ConfigError(f"a per-learner cap is a whole number from 1 to {MAX_PER_LEARNER}, got "
                              f"{self.per_learner!r}")


CLASS_MODE = {
    "quick-demo": KindRule(True, 1),
    "comparison": KindRule(True, 2),
    "sweep": KindRule(False, 1),
    "breakdown": KindRule(False, 1),
    "tiny-fp16": KindRule(True, 1),
    "ablation": KindRule(True, 1),
    "safeguards": KindRule(True, 2),
    "run": KindRule(True, None),
}
OPEN_MODE = {purpose: KindRule() for purpose in JOB_PURPOSES}


@dataclass(frozen=True)
class KindPolicy:
    """A rule for every kind of job; per-learner caps count the jobs a learner submitted since `since` (epoch s)."""

    rules: Mapping[str, KindRule] = field(default_factory=lambda: dict(CLASS_MODE))
    since: float = 0.0
    name: str = "class mode"  # "class mode", "open" or "set in the console"

    @classmethod
    def for_mode(cls, class_mode: bool, since: float = 0.0) -> "KindPolicy":
        """The settings' mode; its caps count from `since` (the server's start, where no console policy is set)."""
        return cls(dict(CLASS_MODE if class_mode else OPEN_MODE), since, "class mode" if class_mode else "open")

    def rule(self, purpose: str) -> KindRule:
        return self.rules.get(purpose, KindRule())

    def refusal(self, purpose: str, used: int) -> str | None:
        """Why a learner who has `used` jobs of this kind since the policy began may not queue another (None: may)."""
        rule, name = self.rule(purpose), JOB_PURPOSES.get(purpose, purpose)
        if not rule.enabled:
            return f"the instructor has turned {name} off for this class"
        if rule.per_learner is not None and used >= rule.per_learner:
            allowed = "one" if rule.per_learner == 1 else str(rule.per_learner)
            return f"this class allows {allowed} of its {name} per learner, and you have had {used}"
        return None

    def to_dict(self) -> dict:
        return {purpose: {"enabled": rule.enabled, "per_learner": rule.per_learner}
                for purpose, rule in self.rules.items()}


def parse_rules(data: object) -> dict[str, KindRule]:
    """{"sweep": {"enabled": false, "per_learner": 1}, ...} -> rules; ConfigError (one line) for anything else."""
    if not isinstance(data, Mapping):
        raise ConfigError("the kinds of job are a table of purpose -> {enabled, per_learner}")
    rules = {}
    for purpose, rule in data.items():
        if purpose not in JOB_PURPOSES:
            raise ConfigError(f"unknown kind of job {purpose!r}: choose from {', '.join(JOB_PURPOSES)}")
        if not isinstance(rule, Mapping) or set(rule) - {"enabled", "per_learner"}:
            raise ConfigError(f"the rule for {purpose} has the keys enabled and per_learner")
        rules[purpose] = KindRule(rule.get("enabled", True), rule.get("per_learner"))
    return rules
