"""Content-addressed response store (sqlite, WAL) — what makes resume free and replay offline.

A reply it cannot write (a full disk) is kept in memory for this process's later asks, and `failed` remembers the
first such write: the gateway then sends no new paid call (skillopt_ray/llm/gateway.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Optional, Union

from skillopt_ray.llm.types import StoreUnwritable, unwritable
from skillopt_ray.llm.wire import CachedAgentReply, CachedReply, CachePayload


def request_key(payload: CachePayload) -> str:
    """Hash of everything that determines a response: endpoint model, messages, sampling, sample key."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, stage TEXT, response TEXT NOT NULL)"
        )
        self._db.commit()
        self.failed: Optional[StoreUnwritable] = None  # the first write that failed
        self._unkept: dict[str, str] = {}  # replies whose write failed, as JSON text, by key

    def _read(self, key: str) -> Any:
        with self._lock:
            text = self._unkept.get(key)
            if text is None:
                row = self._db.execute("SELECT response FROM responses WHERE key=?", (key,)).fetchone()
                text = row[0] if row else None
        return json.loads(text) if text is not None else None

    def get(self, key: str) -> Optional[CachedReply]:
        """A chat call's recorded reply, or None."""
        return self._read(key)

    def get_agent(self, key: str) -> Optional[CachedAgentReply]:
        """An agent call's recorded reply (its tool calls flat), or None."""
        return self._read(key)

    def put(self, key: str, stage: str, response: Union[CachedReply, CachedAgentReply]) -> None:
        """Write a reply; one that cannot be written (OSError, an SQLite error: a full disk) stays in memory, and
        StoreUnwritable (naming the first failed write) is raised."""
        text = json.dumps(response, ensure_ascii=False)
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (key, stage, response) VALUES (?, ?, ?)", (key, stage, text)
                )
                self._db.commit()
                return
            except (OSError, sqlite3.Error) as e:
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()
                self._unkept[key] = text
                if self.failed is None:
                    self.failed = unwritable("the response cache", str(self.path), e)
        raise StoreUnwritable(self.failed.message)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
