"""A composed config remembered on disk, so a command a researcher repeats skips Hydra's composition.

Composing with Hydra costs about 0.3-0.5 s of CPU before a run's first model call: more than a small eval's whole
head start over a plain thread pool. What a composition depends on is known: the command's overrides (and the price
overrides set aside before Hydra), every file of the config folders, the environment variables the configs (or the
overrides) read through `oc.env`, and the code that composes and types it (this package, Hydra, OmegaConf). The key
hashes all of them (files by path, size and modification time); anything else changed means another key.

The value is the typed config as plain data, validated again when it is read (validation is cheap; a damaged or
planted entry is a miss, never a config). Errors are never remembered: a bad command composes (and fails) each time.
Entries live in `$SKILLOPT_COMPOSE_CACHE` (default `$XDG_CACHE_HOME/skillopt-ray/compose`, else
`~/.cache/skillopt-ray/compose`); `SKILLOPT_COMPOSE_CACHE=off` turns it off. A cache that cannot be written is
skipped silently: it is only a shortcut."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

from skillopt_ray.base import untrusted
from skillopt_ray.base.io import atomic_write_text

CACHE_ENV = "SKILLOPT_COMPOSE_CACHE"
MAX_ENTRY_BYTES = 1 << 20  # a composed config is a few KB
MAX_ENTRIES = 64  # the oldest go first past this
_ENV_READ = re.compile(r"oc\.env\s*:\s*([A-Za-z_][A-Za-z0-9_]*)")
_PACKAGE = Path(__file__).resolve().parents[1]


def cache_dir() -> Optional[Path]:
    """The folder of the entries, or None when the cache is off."""
    where = os.environ.get(CACHE_ENV, "")
    if where.lower() in ("off", "0", "false", "no"):
        return None
    if where:
        return Path(where).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "skillopt-ray" / "compose"


def _stamps(folder: Path) -> list[list[object]]:
    out: list[list[object]] = []
    for p in sorted(folder.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def _library_stamps() -> list[list[object]]:
    """Hydra's and OmegaConf's installed files (their versions), found without importing them."""
    out: list[list[object]] = []
    for name in ("hydra", "omegaconf"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            out.append([name, None])
            continue
        st = Path(spec.origin).stat()
        out.append([spec.origin, st.st_size, st.st_mtime_ns])
    return out


def fingerprint(folders: Iterable[Path], words: list[str], code: bool = True) -> str:
    """The key of a composition: `words` (config name and overrides, prices included), every file of the config
    `folders`, the values of the environment variables they read through `oc.env`, and (with `code`) this package's
    files and the installed Hydra and OmegaConf."""
    files: list[list[object]] = []
    env_names: set[str] = set(_ENV_READ.findall(" ".join(words)))
    for folder in folders:
        for entry in _stamps(folder):
            files.append(entry)
            path = Path(str(entry[0]))
            if path.suffix in (".yaml", ".yml") and int(str(entry[1])) < MAX_ENTRY_BYTES:
                try:
                    env_names.update(_ENV_READ.findall(path.read_text("utf-8", "replace")))
                except OSError:
                    continue
    env = {name: os.environ.get(name) for name in sorted(env_names)}
    extra = [_stamps(_PACKAGE), _library_stamps()] if code else []
    return hashlib.sha256(json.dumps([words, files, env, extra], default=str).encode()).hexdigest()


def load(key: str) -> Optional[object]:
    """The plain data remembered under `key`, or None (no entry, the cache off, or an entry refused)."""
    root = cache_dir()
    if root is None:
        return None
    try:
        return untrusted.read_json(root, f"{key}.json", MAX_ENTRY_BYTES)
    except untrusted.Untrusted:
        return None


def save(key: str, data: object) -> None:
    """Remember `data` under `key` (atomically; the oldest entries past MAX_ENTRIES go). Never raises."""
    root = cache_dir()
    if root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_text(root / f"{key}.json", json.dumps(data, sort_keys=True))
        entries = sorted(root.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        return
