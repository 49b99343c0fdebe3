"""Instants as parsed UTC datetimes, never strings: the session logs' stamps and the harvest window's edges."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

_LOOKBACK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_instant(value: Any) -> Optional[datetime]:
    """An aware UTC datetime from an ISO 8601 stamp (any offset; none means UTC, as both CLIs write UTC) or epoch
    seconds/milliseconds; None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        secs = value / 1000 if value > 1e11 else value
        try:
            return datetime.fromtimestamp(secs, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def parse_lookback(value: str) -> Optional[timedelta]:
    """`72h`, `3d`, `90m`, `1w` as a duration; `all` as None (no lower bound). ValueError names the fix."""
    if value.strip().lower() == "all":
        return None
    m = _LOOKBACK.match(value)
    if not m:
        raise ValueError(f"--lookback {value!r} is not a duration; give a number and a unit (72h, 3d, 90m, 1w) or all")
    return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def stamp(dt: datetime) -> str:
    """The ISO 8601 UTC form written to state and task files."""
    return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
