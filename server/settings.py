"""The instructor's limits for a shared server, read from AMP_LAB_* environment variables or a TOML file."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from server.presets import parse_presets
from trainer.config import DEVICES, MAX_BATCH_SIZE, MAX_EPOCHS
from trainer.errors import ConfigError

CONFIG_FILE_VAR = "AMP_LAB_CONFIG"
MIN_PASSWORD_CHARS = 12  # there is no default password: an instructor who wants one picks a long one

# Field -> (environment variable, what it means); docs/deploy.md and the app list these rows.
SETTINGS_HELP = {
    "max_epochs": ("AMP_LAB_MAX_EPOCHS", "most epochs one run may train"),
    "max_batch_size": ("AMP_LAB_MAX_BATCH_SIZE", "largest batch size a learner may pick"),
    "max_queued_per_learner": (
        "AMP_LAB_MAX_QUEUED_PER_LEARNER",
        "jobs one learner may have waiting or running at once (all their tabs together)",
    ),
    "max_queued_total": (
        "AMP_LAB_MAX_QUEUED_TOTAL",
        "jobs the whole class may have waiting at once; empty or 'none' = no limit",
    ),
    "max_subset": ("AMP_LAB_MAX_SUBSET", "most training images per run; empty or 'none' = the whole split"),
    "data_root": ("AMP_LAB_DATA_ROOT", "folder holding (or receiving) the CIFAR-10 download"),
    "state_dir": ("AMP_LAB_STATE_DIR", "folder for the job history (history.sqlite3)"),
    "peaks_cache": (
        "AMP_LAB_PEAKS_CACHE",
        "file of this server's measured device peaks; empty = device-peaks.json in the state folder",
    ),
    "device": ("AMP_LAB_DEVICE", "device the jobs run on: auto (CUDA if present), cuda or cpu"),
    "gpus": (
        "AMP_LAB_GPUS",
        "GPUs the jobs may use, one job per GPU at a time (nvidia-smi's numbers: 0,1); empty or 'all' = every GPU",
    ),
    "ray_address": (
        "AMP_LAB_RAY_ADDRESS",
        "run the jobs on this Ray cluster (its head's host:port); empty = on this server (requirements-cluster.txt)",
    ),
    "silent_run_limit_s": (
        "AMP_LAB_SILENT_RUN_LIMIT_S",
        "a run that reports no progress for this many seconds is stopped as hung, and its job fails saying so",
    ),
    "class_mode": (
        "AMP_LAB_CLASS_MODE",
        "on: the quick demo once, two comparisons, the tiny fp16 run and the ablation once per learner, sweeps and "
        "time breakdowns off (safe for 30 on one worker); off: every kind, as often as the queue limits allow; the "
        "console can change each kind",
    ),
    "ask_names": (
        "AMP_LAB_ASK_NAMES",
        "on: a learner's first visit asks for their name (for the roster) instead of keeping a generated one",
    ),
    "presets": ("AMP_LAB_PRESETS", "where every Run page starts, as a link's query: epochs=1&batch_size=128&subset=2048"),
    "instructor_password": (
        "AMP_LAB_INSTRUCTOR_PASSWORD",
        f"opens the instructor console; at least {MIN_PASSWORD_CHARS} characters; empty = no password sign-in",
    ),
    "instructor_emails": (
        "AMP_LAB_INSTRUCTOR_EMAILS",
        "signed-in users (comma-separated emails) who get the instructor console",
    ),
}
TEXT_SETTINGS = (
    "data_root", "state_dir", "peaks_cache", "device", "presets", "instructor_password", "instructor_emails",
    "ray_address",
)
OPTIONAL_SETTINGS = ("max_queued_total", "max_subset")  # None = no limit
BOOL_SETTINGS = ("class_mode", "ask_names")
SECRET_SETTINGS = ("instructor_password",)  # never shown, only whether they are set
# Names an earlier version used, still read from a settings file or the environment: old name -> new name.
RENAMED_SETTINGS = {"max_queued_per_session": "max_queued_per_learner"}
RENAMED_VARIABLES = {"AMP_LAB_MAX_QUEUED_PER_SESSION": "AMP_LAB_MAX_QUEUED_PER_LEARNER"}


@dataclass
class Settings:
    """Limits and paths chosen by the instructor; a learner never sets any of these."""

    max_epochs: int = 20
    max_batch_size: int = 4096
    max_queued_per_learner: int = 2
    max_subset: int | None = None  # None = no limit
    data_root: str = "./data"
    state_dir: str = "./state"
    device: str = "auto"  # auto | cpu | cuda
    max_queued_total: int | None = None  # None = no limit
    presets: str = ""  # the Run page's starting settings, e.g. "epochs=1&batch_size=128"
    instructor_password: str = ""  # empty: no password sign-in to the console
    instructor_emails: str = ""  # comma-separated; signed-in users with these emails get the console
    gpus: list[int] | None = None  # nvidia-smi's GPU numbers; None = every GPU this server sees
    ray_address: str = ""  # empty: jobs run on this server's own workers, and Ray is never imported
    # A run reports progress at least every few seconds while it trains or evaluates; loading data (a CIFAR-10
    # download) and one step of amp-fp16 on a CPU are the longest silences, well under this.
    silent_run_limit_s: int = 900
    class_mode: bool = True  # server/kinds.py: which kinds of job learners may queue, and how many each
    ask_names: bool = False  # ask each new learner for a name, for the roster
    peaks_cache: str = ""  # empty: device-peaks.json in the state folder

    def __post_init__(self) -> None:
        _whole("max_epochs", self.max_epochs, 1, MAX_EPOCHS)
        _whole("max_batch_size", self.max_batch_size, 1, MAX_BATCH_SIZE)
        _whole("max_queued_per_learner", self.max_queued_per_learner, 1, 1000)
        _whole("silent_run_limit_s", self.silent_run_limit_s, 60, 86_400)
        for name in BOOL_SETTINGS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{_source(name)} must be on or off, got {getattr(self, name)!r}")
        if self.max_queued_total is not None:
            _whole("max_queued_total", self.max_queued_total, 1, 100_000)
        if self.max_subset is not None:
            _whole("max_subset", self.max_subset, 1, 10_000_000)
        for name in ("data_root", "state_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{_source(name)} must be a folder path, got {value!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"{_source('device')} must be one of {', '.join(DEVICES)}, got {self.device!r}")
        try:
            parse_presets(self.presets)
        except ConfigError as err:
            raise ConfigError(f"{_source('presets')}: {err}") from None
        if self.instructor_password and len(self.instructor_password) < MIN_PASSWORD_CHARS:
            raise ConfigError(f"{_source('instructor_password')} must have at least {MIN_PASSWORD_CHARS} characters")
        if self.gpus == "all":  # the settings file's spelling of every GPU
            self.gpus = None
        if self.gpus is not None:
            if not isinstance(self.gpus, (list, tuple)) or not self.gpus:
                raise ConfigError(f"{_source('gpus')} must be a list of GPU numbers such as [0, 1], got {self.gpus!r}")
            for index in self.gpus:
                _whole("gpus", index, 0, 1023)
            self.gpus = sorted(set(self.gpus))
        if isinstance(self.instructor_emails, (list, tuple)):  # a TOML list
            self.instructor_emails = ",".join(self.instructor_emails)

    @property
    def instructor_email_set(self) -> frozenset[str]:
        return frozenset(e.strip().lower() for e in self.instructor_emails.split(",") if e.strip())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Defaults, overridden by the TOML file named in AMP_LAB_CONFIG, overridden by AMP_LAB_* variables."""
        environ = os.environ if environ is None else environ
        values: dict = {}
        config_file = environ.get(CONFIG_FILE_VAR, "").strip()
        if config_file:
            values.update(_read_toml(config_file))
        renamed = {new: old for old, new in RENAMED_VARIABLES.items()}
        for name, (var, _) in SETTINGS_HELP.items():
            given = var if var in environ else renamed.get(var, var)
            if given in environ:
                values[name] = _parse_env(name, given, environ[given])
        return cls(**values)

    @property
    def history_path(self) -> Path:
        return Path(self.state_dir).expanduser() / "history.sqlite3"

    @property
    def peaks_cache_path(self) -> Path:
        """This server's measured device peaks (trainer/peaks.py), one entry per device and torch build."""
        return Path(self.peaks_cache or Path(self.state_dir) / "device-peaks.json").expanduser()

    def describe(self) -> list[tuple[str, str, object, str]]:
        """Rows of (setting, environment variable, current value, meaning) for docs/deploy.md and the app."""
        return [(name, var, self._shown(name), meaning) for name, (var, meaning) in SETTINGS_HELP.items()]

    def _shown(self, name: str) -> object:
        value = getattr(self, name)
        if name in SECRET_SETTINGS:
            return "set (hidden)" if value else "not set"
        if name in BOOL_SETTINGS:
            return "on" if value else "off"
        return value


def _source(name: str) -> str:
    return f"{SETTINGS_HELP[name][0]} ({name})"


def _whole(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{_source(name)} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{_source(name)} must be between {low} and {high}, got {value}")


def _parse_env(name: str, var: str, raw: str):
    text = raw.strip()
    if name in TEXT_SETTINGS:
        return text
    if name in OPTIONAL_SETTINGS and text.lower() in ("", "none"):
        return None
    if name in BOOL_SETTINGS:
        if text.lower() in ("on", "true", "yes", "1"):
            return True
        if text.lower() in ("off", "false", "no", "0"):
            return False
        raise ConfigError(f"{var} must be on or off, got {raw!r}")
    if name == "gpus":
        if text.lower() in ("", "all"):
            return None
        try:
            return [int(part) for part in text.split(",")]
        except ValueError:
            raise ConfigError(f"{var} must list GPU numbers like 0,1 (or be 'all'), got {raw!r}") from None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{var} must be a whole number, got {raw!r}") from None


def _read_toml(path_text: str) -> dict:
    path = Path(path_text).expanduser()
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{CONFIG_FILE_VAR} names {path}, which does not exist; fix the path or unset it") from None
    except OSError as err:
        raise ConfigError(f"{CONFIG_FILE_VAR}: cannot read {path} ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{CONFIG_FILE_VAR}: {path} is not valid TOML ({err})") from None
    for old_name, name in RENAMED_SETTINGS.items():
        if old_name in data:
            if name in data:
                raise ConfigError(f"{CONFIG_FILE_VAR}: {path} sets both {name} and its old name {old_name}; keep {name}")
            data[name] = data.pop(old_name)
    unknown = sorted(set(data) - set(SETTINGS_HELP))
    if unknown:
        raise ConfigError(
            f"{CONFIG_FILE_VAR}: unknown setting {unknown[0]!r} in {path}; "
            f"known settings are {', '.join(SETTINGS_HELP)}"
        )
    for name in OPTIONAL_SETTINGS:
        if data.get(name) == "none":
            data[name] = None
    return data
