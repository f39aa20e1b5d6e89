"""The evaluator's default ATen allow-list, read from the guard crate's source, for the
scripts that run the executor in-process (`runtime_cost.py`, `profile_timing.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent


def default_allow() -> List[str]:
    text = (REPO / "crates/guard/src/lib.rs").read_text()
    body = text[text.index("pub fn default_allowed_aten()"):]
    body = body[:body.index("]")]
    return [part.split('"')[1] for part in body.splitlines() if part.strip().startswith('"')]
