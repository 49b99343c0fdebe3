"""The review gate: transcript-derived tasks leave the machine only after a person has read them.

The task folder holds `review.json` beside the task folders (the custom-task loader reads only the folders, so the
file loads unchanged). It starts `"reviewed": false`; the reviewer sets it to true, or passes --i-reviewed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from skillopt_ray.base import untrusted
from skillopt_ray.base.io import atomic_write_text
from skillopt_ray.config.plain import PlainConfig

REVIEW_FILE = "review.json"
FORMAT = "skillopt_ray.sleep.tasks/1"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
MAX_REVIEW_BYTES = 4 << 20  # the header and the task ids of a few thousand tasks


class ReviewRefused(Exception):
    """A one-line refusal (exit 2)."""


@dataclass(frozen=True)
class Endpoint:
    provider: str
    base_url: str

    @property
    def local(self) -> bool:
        """The embedded model, or an endpoint on this machine's loopback."""
        if self.provider == "embedded":
            return True
        host = urlparse(self.base_url).hostname if self.base_url else None
        return host is not None and host in LOCAL_HOSTS


def read(folder: Path) -> dict[str, Any]:
    """review.json as a dict ({} when the folder has none: not a harvested folder); ReviewRefused when it is there
    but not a JSON object whose `reviewed` is true or false (a typo such as `flase` must not turn the gate off)."""
    path = folder / REVIEW_FILE
    try:
        data = untrusted.read_json(folder, REVIEW_FILE, MAX_REVIEW_BYTES)
    except untrusted.Missing:
        return {}
    except untrusted.Untrusted as e:
        raise ReviewRefused(f'{e}; fix {path} ("reviewed": true or false) or harvest again') from None
    if not isinstance(data, dict) or not isinstance(data.get("reviewed"), bool):
        got = data.get("reviewed") if isinstance(data, dict) else data
        raise ReviewRefused(
            f'{path}: "reviewed" must be true or false, not {json.dumps(got)[:40]}; fix it (true only once a person '
            "has read the tasks) or harvest again"
        )
    return data


def write(folder: Path, header: dict[str, Any]) -> None:
    atomic_write_text(folder / REVIEW_FILE, json.dumps({"format": FORMAT, **header}, indent=1) + "\n")


def run_endpoints(data: PlainConfig) -> list[Endpoint]:
    """The endpoints a run's config (as a plain dict) sends prompts to: the target's and the optimizer's."""
    llm = data.get("llm") or {}
    return [
        Endpoint(str(llm[r].get("provider") or ""), str(llm[r].get("base_url") or llm.get("base_url") or ""))
        for r in ("target", "optimizer")
        if isinstance(llm.get(r), dict)
    ]


def check_run(data: PlainConfig) -> None:
    """A training run on a harvested task folder (env.data_dir) obeys the same gate: ReviewRefused otherwise."""
    folder = (data.get("env") or {}).get("data_dir")
    if folder and Path(str(folder)).is_dir():
        require_reviewed(Path(str(folder)), run_endpoints(data), False)


def require_reviewed(folder: Path, endpoints: list[Endpoint], i_reviewed: bool) -> None:
    """Refuse a harvested, unreviewed task folder when any endpoint it would reach is not on this machine."""
    data = read(folder)
    if not data or data.get("reviewed") is True or i_reviewed:
        return
    remote = [e for e in endpoints if not e.local]
    if remote:
        where = urlparse(remote[0].base_url).hostname or remote[0].provider
        raise ReviewRefused(
            f"{folder / REVIEW_FILE} says the harvested tasks are not reviewed and they would go to {where}; read "
            'them, then set "reviewed": true there or pass --i-reviewed'
        )
