"""The lab's presets: the settings every learner's Run page starts from, written as a link's query string
(`epochs=1&batch_size=128&subset=2048`), set in the instructor's settings or from the console (server/console.py)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from trainer.errors import ConfigError

# The Run page's settings a preset may fix (the same names a link's ?epochs=... uses).
PRESET_PARAMS = ("epochs", "batch_size", "subset", "data", "loader", "precision", "width", "channels_last")
RENAMED_PARAMS = {"amp": "precision"}  # an earlier version's name -> today's; still read
MAX_PRESET_CHARS = 500


def parse_presets(text: object) -> dict[str, str]:
    """`epochs=1&batch_size=128` -> {"epochs": "1", "batch_size": "128"}; ConfigError (one line) for anything else.

    Values are checked against the Run page's choices where they are used, as a link's would be.
    """
    if text is None:
        return {}
    if not isinstance(text, str) or len(text) > MAX_PRESET_CHARS:
        raise ConfigError(f"presets must be text like epochs=1&batch_size=128, at most {MAX_PRESET_CHARS} characters")
    try:
        pairs = parse_qsl(text.strip().lstrip("?"), strict_parsing=bool(text.strip()))
    except ValueError:
        raise ConfigError(f"presets {text!r} are not name=value pairs joined by '&' (e.g. epochs=1&batch_size=128)")
    presets: dict[str, str] = {}
    for name, value in pairs:
        name = RENAMED_PARAMS.get(name, name)
        if name not in PRESET_PARAMS:
            raise ConfigError(f"unknown preset {name!r}: choose from {', '.join(PRESET_PARAMS)}")
        if name in presets:
            raise ConfigError(f"the preset {name!r} is given twice")
        presets[name] = value
    return presets


def presets_text(presets: dict[str, str]) -> str:
    return urlencode(presets)
