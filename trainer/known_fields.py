"""Records read back from JSON keep working across versions: keys a dataclass does not know are left out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def from_known_fields(cls: type[T], data: Mapping) -> T:
    """`cls(**data)` with only the keys that are fields of the dataclass `cls` (older or newer records)."""
    known = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in data.items() if key in known})
