"""Helpers shared by test files; fixtures live in conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path(__file__).parent / "data" / "golden"


def check(name: str, text: str) -> None:
    path = DATA / name
    if os.environ.get("SKILLOPT_GOLDEN_WRITE") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{name} changed: diff it against this test's output"
