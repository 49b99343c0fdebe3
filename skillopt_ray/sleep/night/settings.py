"""A project's night settings (`<project>/.skillopt/night-settings.json`): the flags and model overrides of its last
`run`, the folder it ran from and the non-secret environment its config read, so `schedule` installs that same
night. API keys are kept by the *name* of their variable only; no key value is ever written here or to the line."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.sleep.harvest.state import STATE_DIR

FILE = "night-settings.json"
PATH_FLAGS = ("project", "tasks", "skill", "output", "codex_home", "claude_home")
HOME_VARS = {"codex_home": "CODEX_HOME", "claude_home": "CLAUDE_CONFIG_DIR"}  # a harvest's store, as a flag
# environment a night's config reads besides keys (the presets' ${oc.env:...} and the runner's own), carried by the line
CARRIED = (
    "PATH", "COMPATIBLE_BASE_URL", "COMPATIBLE_MODEL", "AZURE_OPENAI_ENDPOINT", "MINIMAX_BASE_URL", "MINIMAX_MODEL",
    "QWEN_CHAT_BASE_URL", "QWEN_CHAT_MODEL", "MLFLOW_TRACKING_URI", "RAY_ADDRESS", "SKILLOPT_CONF_DIR",
    "SKILLOPT_CLUSTER_HOME", "XDG_CACHE_HOME",
)  # fmt: skip
_SECRET_NAME = re.compile(r"(?i)key|token|secret|passw")
_USERINFO = re.compile(r"://[^/@\s]*@")  # a URL with credentials in it


@dataclass
class NightSettings:
    argv: list[str]  # `run`'s arguments after the verb, paths absolute
    cwd: str
    env: dict[str, str] = field(default_factory=dict)  # CARRIED variables that were set (never a secret)
    key_names: list[str] = field(default_factory=list)  # the variables the models' keys are read from
    saved: str = ""


def path(project: Path) -> Path:
    return project / STATE_DIR / FILE


def run_argv(a: argparse.Namespace, defaults: argparse.Namespace) -> list[str]:
    """`a` as `run` arguments: each flag that differs from its default, paths made absolute, and a harvest store
    named by CODEX_HOME / CLAUDE_CONFIG_DIR (which cron does not set) given as its flag."""
    out: list[str] = []
    for dest, value in vars(a).items():
        if dest in ("verb", "overrides"):
            continue
        if value is None and dest in HOME_VARS and os.environ.get(HOME_VARS[dest]):
            value = Path(os.environ[HOME_VARS[dest]])
        if value == getattr(defaults, dest, None) or value is None or value is False:
            continue
        flag = "--" + dest.replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            out += [flag, str(Path(value).expanduser().resolve()) if dest in PATH_FLAGS else str(value)]
    return out + [str(o) for o in a.overrides]


def key_names(data: Any) -> list[str]:
    """The names of the variables the composed config reads keys from (`api_key_env`, `azure_ad_token_env`)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("api_key_env", "azure_ad_token_env") and isinstance(v, str) and v:
                    found.add(v)
                walk(v)

    walk(data)
    return sorted(found)


def carried_env(keys: list[str]) -> dict[str, str]:
    """The CARRIED variables set now, less anything that names or holds a secret."""
    out = {}
    for name in CARRIED:
        value = os.environ.get(name)
        if value is None or name in keys or (name != "PATH" and _SECRET_NAME.search(name)) or _USERINFO.search(value):
            continue
        out[name] = value
    return out


def save(project: Path, argv: list[str], cwd: Path, data: Any) -> NightSettings:
    """Written whole (a temporary file renamed over the old one)."""
    keys = key_names(data)
    st = NightSettings(argv, str(cwd), carried_env(keys), keys, dt.datetime.now(dt.timezone.utc).isoformat())
    p = path(project)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(st), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return st


def load(project: Path) -> Optional[NightSettings]:
    """The last run's settings; None when no night ran here; ValueError naming the file when it is damaged."""
    p = path(project)
    if not p.is_file():
        return None
    info = p.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ValueError(f"{p} is not yours alone (owner or group/other write); delete it and run a night again")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        st = NightSettings(
            [str(x) for x in raw["argv"]], str(raw["cwd"]), {str(k): str(v) for k, v in (raw.get("env") or {}).items()},
            [str(k) for k in raw.get("key_names") or []], str(raw.get("saved") or ""),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{p} is not a night's settings ({e}); run a night again to rewrite it") from None
    bad = [n for n in st.env if n not in CARRIED]
    if bad:  # a hand-edited file must not put arbitrary variables (LD_PRELOAD...) into the scheduled line
        raise ValueError(f"{p} sets {', '.join(bad)}, which a night never carries; run a night again to rewrite it")
    return st
