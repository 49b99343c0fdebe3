"""A real full disk for tests: a small tmpfs mounted for one test, filled to its last byte on cue (the scripted server's
n-th request, so the point where a run's disk fills does not depend on timing). Mounting needs root: without it the
test is skipped, as the other root-only tests are (tests/llm/test_full_disk_gateway.py covers the gateway without
root)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

FILLER = "filler"


@contextlib.contextmanager
def small_disk(where: Path, mb: int = 64) -> Iterator[Path]:
    """A fresh `mb`-megabyte tmpfs mounted at `where` for the duration; unmounted (lazily) after."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", str(where)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)])


def fill(disk: Path) -> None:
    """Take every free byte of `disk` (1 MB writes, then smaller and smaller ones down to one byte)."""
    with open(disk / FILLER, "ab", buffering=0) as f:
        size = 1 << 20
        while size:
            try:
                f.write(b"\0" * size)
            except OSError:
                size //= 2


def free(disk: Path) -> None:
    (disk / FILLER).unlink(missing_ok=True)


class FillAt:
    """A scripted-server policy that fills `disk` while it answers its `n`-th request (before the reply leaves), then
    answers every request as `policy` does. It counts the requests it saw before (the same body and sample key): the
    calls paid twice."""

    def __init__(self, n: int, disk: Path, policy: Callable[[dict[str, Any], dict[str, str]], Any]):
        self.n, self.disk, self.policy = n, disk, policy
        self.seen = 0
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        digest = hashlib.sha256(json.dumps([body, headers.get("x-skillopt-key")], sort_keys=True).encode()).hexdigest()
        with self._lock:
            self.seen += 1
            self.asked[digest] += 1
            if self.seen == self.n:
                fill(self.disk)
        return self.policy(body, headers)

    @property
    def paid_again(self) -> int:
        return sum(n - 1 for n in self.asked.values())
