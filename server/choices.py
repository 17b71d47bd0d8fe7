"""Settings a learner picks, with the values this server allows: checked the same way whether they come from
a widget, from session state or from the address bar. No Streamlit here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

_MARKDOWN_SPECIALS = set("\\`*_{}[]()#+-.!|<>~$:")


@dataclass(frozen=True)
class Choice:
    """One setting: its widget key, its query parameter, what a learner calls it, the allowed values, the
    default, how to read it from address-bar text and how to show a value."""

    key: str
    label: str
    allowed: tuple
    default: object
    param: str = ""  # query parameter name; the key when empty
    parse: Callable[[str], object] = str
    format: Callable[[object], str] = field(default=str)
    old_param: str = ""  # the name an earlier version's links used, still read
    from_preset: bool = False  # the default is the class's preset (server/offer.py), not the page's own

    def __post_init__(self) -> None:
        if not self.param:
            object.__setattr__(self, "param", self.key)


def accepts(choice: Choice, value) -> bool:
    """True when `value` is one of the allowed values, of the same type (so True is not 1, nor 5.0 5)."""
    return any(type(value) is type(allowed) and value == allowed for allowed in choice.allowed)


def preset(choice: Choice, text: str | None) -> tuple[Choice, str | None]:
    """`choice` starting from the instructor's preset `text`, or unchanged with the reason it cannot (None = fine)."""
    if text is None:
        return choice, None
    try:
        value = choice.parse(text)
    except (TypeError, ValueError):
        value = text
    if not accepts(choice, value):
        return choice, f"the preset {choice.param}={shown(text)} is not offered here ({describe_allowed(choice)})"
    return replace(choice, default=value, from_preset=True), None


def fallback(choice: Choice) -> object:
    """What a refused link value falls back to: the class's preset, else the smallest offered value (a mistyped
    link must not start the most expensive run: all 50,000 images), else the default."""
    if choice.from_preset:
        return choice.default
    numbers = [value for value in choice.allowed if isinstance(value, int) and not isinstance(value, bool)]
    return min(numbers) if numbers else choice.default


def describe_allowed(choice: Choice) -> str:
    """'1 to 20' for a run of whole numbers, else the values listed."""
    values = list(choice.allowed)
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    if whole and len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]} to {values[-1]}"
    return ", ".join(choice.format(v) for v in values)


def shown(value, limit: int = 40) -> str:
    """A value from outside (address bar, session state) made safe to put in a Markdown message."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in text)


def refusal(choice: Choice, value, where: str, instead: object = None) -> str:
    """The one-line message for a refused value, and what is used `instead` (the default unless said)."""
    used = choice.default if instead is None else instead
    return (
        f"{choice.label} {shown(value)} {where} is not allowed here: choose {describe_allowed(choice)}. "
        f"Using {choice.format(used)} instead."
    )


def parse_int(text: str) -> int:
    return int(text.strip())


def parse_optional_int(text: str) -> int | None:
    """'all' (or 'none') -> None, else a whole number."""
    return None if text.strip().lower() in ("all", "none") else int(text)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)
