"""The lab model read on this server's data (a short fp32 capture, lessons/capture.py), for the pages that show its
values or gradients: the reading, or one error line where it cannot be made."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from lessons.capture import default_source
from trainer.errors import TrainerError
from ui import server_bundle

T = TypeVar("T")


def read_lab_model(read: Callable[[str, str], T], what: str) -> tuple[T | None, str]:
    """`read(source, data_root)` with this server's data (CIFAR-10 where it is there, else synthetic), and that
    source's name; None in its place, after one error line naming `what`, when it fails."""
    data_root = server_bundle.settings().data_root
    source = default_source(data_root)
    try:
        return read(source, data_root), source
    except TrainerError as err:
        st.error(f"Could not read the lab model's {what}: {err}")
        return None, source
