"""This machine's seal on what staging and adoption write: an HMAC over a file's whole bytes, with a key kept in the
user's own state folder (outside every project, mode 0600).

A night folder sits in the project (`.skillopt/staging/`), where a cloned repository, a copied folder or another
local user can put any manifest, transaction record or receipt. `adopt` writes where those files say, so it trusts
only files whose seal this machine's key made: a planted `.skillopt/` gets a one-line refusal and changes nothing.
The seal covers the whole file, whatever fields a newer manifest adds.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Optional

from skillopt_ray.base import untrusted

KEY_FILE = "staging.key"
SUFFIX = ".seal"
MAX_SEALED_BYTES = 8 << 20  # a manifest of many skills is a few hundred KB


class Unsealed(ValueError):
    """A file this machine did not seal (or that was edited since); the message is one line."""


class StagedBeforeSeals(Unsealed):
    """An unsealed night that reads as one staged here before seals existed: refused like any unsealed one (nothing
    tells it from a forgery), with a message saying what it most likely is and what to do."""


def state_dir() -> Path:
    """Where the key lives: $SKILLOPT_STATE_DIR, else $XDG_STATE_HOME/skillopt, else ~/.local/state/skillopt."""
    if os.environ.get("SKILLOPT_STATE_DIR"):
        return Path(os.environ["SKILLOPT_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "skillopt"


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise Unsealed(f"{path} must be a file of yours with mode 0600; delete it (nights staged since are void)")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(data) < 32:
        raise Unsealed(f"{path} is too short to be a staging key; delete it (nights staged since are void)")
    return data


def key(create: bool = False) -> bytes:
    """The staging key; made (32 random bytes, 0600) when `create` and none exists yet."""
    path = state_dir() / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            raise Unsealed(
                f"no staging key at {path}: this machine staged no night (nothing here is trusted)"
            ) from None
    except OSError as e:
        raise Unsealed(f"the staging key {path} cannot be read ({e.strerror})") from None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return _read_key(path)  # another process made it meanwhile
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
        f.flush()
        os.fsync(f.fileno())
    return _read_key(path)


def key_made() -> Optional[float]:
    """When the staging key was made (its mtime: it is written once), None when there is none: a night staged before
    that had no key to be sealed with."""
    try:
        return os.stat(state_dir() / KEY_FILE, follow_symlinks=False).st_mtime
    except OSError:
        return None


def mac(data: bytes, create: bool = False) -> str:
    return hmac.new(key(create), data, hashlib.sha256).hexdigest()


def seal_path(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def seal_bytes(path: Path, data: bytes) -> bytes:
    """The seal file's bytes for `data` about to be written at `path` (the key made on first use)."""
    return (mac(data, create=True) + "\n").encode()


def check(folder: Path, name: str, data: bytes) -> None:
    """Unsealed unless `folder/name`'s seal file (read as an untrusted file) holds this machine's HMAC of `data`."""
    where = folder / name
    try:
        given = untrusted.read_bytes(folder, name + SUFFIX, 1024).decode("ascii", "replace").strip()
    except untrusted.Untrusted:
        raise Unsealed(
            f"{where} has no seal of this machine's (it was not staged here: a copied or cloned folder); "
            "refused, nothing changed"
        ) from None
    if not hmac.compare_digest(given, mac(data)):
        raise Unsealed(
            f"{where} does not match its seal (edited, or staged on another machine); refused, nothing changed"
        )


def read_sealed(folder: Path, name: str) -> bytes:
    """A sealed file's bytes, read as an untrusted file and checked against its seal (Unsealed otherwise)."""
    try:
        data = untrusted.read_bytes(folder, name, MAX_SEALED_BYTES)
    except untrusted.Untrusted as e:
        raise Unsealed(str(e)) from None
    check(folder, name, data)
    return data
