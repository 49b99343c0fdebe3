"""The skill documents a run reads (`skill_init`, `eval.skill_path`) and the one rule for reading them: a regular
file of UTF-8 text without NUL bytes. The command reads them once (cli.preflight) and hands their text on; the
driver reads a file itself only when it was started without them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from skillopt_ray.config.schema import ConfigError

# what a run reads, by config key: {"skill_init": text, "eval.skill_path": text}
SkillTexts = dict[str, str]


def skill_paths(skill_init: Optional[str], mode: str, eval_skill_path: Optional[str]) -> list[tuple[str, str]]:
    """(key, path) of the skill documents a run reads, in the order they are checked."""
    keys = [("skill_init", skill_init)]
    if mode == "eval":
        keys.append(("eval.skill_path", eval_skill_path))
    return [(k, v) for k, v in keys if v]


def read_skill_file(value: str, key: str) -> str:
    """A skill document as text; anything else (missing, unreadable, not UTF-8, NUL bytes) is a ConfigError that
    names the key and the fix."""
    fix = "give the path to a skill .md file"
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"{key}={value!r} is not a file; {fix}")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{key}={value!r} cannot be read ({e.strerror}); {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{key}={value!r} is not UTF-8 text (byte {e.start} cannot be decoded: a binary file?); {fix}"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{key}={value!r} contains NUL bytes (a binary file?); {fix}")
    return text
