"""The project skills a jailed Claude Code is told about. With `--tools Read,Bash` (the reference's tool set, which
the jail keeps) Claude Code has no Skill tool and lists no skill at all, so an adopted skill in the workspace's
`.claude/skills/<name>/SKILL.md` would go unseen; the jail names each one in an appended system prompt instead,
with its description and the path to Read. The files are the workspace's (hostile input): links are never
followed, and only a bounded, single-line name and description reach the prompt."""

from __future__ import annotations

import re
import stat
from pathlib import Path

SKILLS_DIR = Path(".claude") / "skills"
MAX_SKILLS = 32
MAX_HEAD = 16_384  # bytes of SKILL.md read for its front matter
MAX_NAME, MAX_DESCRIPTION = 64, 300
HEADER = (
    "Skills installed in this project (each is a folder holding SKILL.md). When the task matches a skill's "
    "description, read that SKILL.md with the Read tool first and follow it:"
)
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]+")


def _plain(path: Path) -> bool:
    """A real folder or file, not a link (lstat: the link itself is looked at, never its target)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode)


def _one_line(text: str, limit: int) -> str:
    text = _UNSAFE.sub(" ", text).strip().strip("\"'").strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def front_matter(head: str) -> dict[str, str]:
    """`name` and `description` of a `---` front matter block (single-line values; anything else ignored)."""
    if not head.startswith("---\n"):
        return {}
    end = head.find("\n---", 4)
    out: dict[str, str] = {}
    for line in head[4 : end if end > 0 else 0].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("name", "description") and value.strip():
            out[key.strip()] = value
    return out


def project_skills(workspace: Path) -> list[tuple[str, str, str]]:
    """(name, description, path relative to the workspace) of each skill under .claude/skills, by folder name."""
    root = workspace / SKILLS_DIR
    if not all(_plain(p) for p in (workspace / ".claude", root)):
        return []
    out = []
    for folder in sorted(root.iterdir())[: 4 * MAX_SKILLS]:
        md = folder / "SKILL.md"
        if not (_plain(folder) and folder.is_dir() and _plain(md)):
            continue
        with md.open("rb") as f:
            head = f.read(MAX_HEAD).decode("utf-8", errors="replace").replace("\r\n", "\n")
        meta = front_matter(head)
        name = _one_line(meta.get("name") or folder.name, MAX_NAME)
        out.append(
            (name, _one_line(meta.get("description", ""), MAX_DESCRIPTION), str(SKILLS_DIR / folder.name / "SKILL.md"))
        )
        if len(out) == MAX_SKILLS:
            break
    return out


def listing(workspace: Path) -> str:
    """The appended system prompt naming the workspace's skills, or "" when it has none."""
    skills = project_skills(workspace)
    if not skills:
        return ""
    lines = [f"- {name}: {desc} (read {path})" if desc else f"- {name} (read {path})" for name, desc, path in skills]
    return "\n".join([HEADER, *lines])
