"""The skill as the agent harness finds it: a SKILL.md with front matter, a title, an optional preamble and the
learned guidance."""

from __future__ import annotations

SKILL_NAME = "skillopt-target"
SKILL_PATH = f".agents/skills/{SKILL_NAME}/SKILL.md"
# what the guidance section says when the skill is blank (the reference writes a fixed sentence there)
EMPTY_GUIDANCE = "No additional dynamic guidance has been provided yet."


def render_skill_md(skill: str, description: str, preamble: str = "") -> str:
    """The reference's layout: front matter (name, description), `# ReflACT Target Skill`, the stripped preamble
    when there is one, `## Dynamic Guidance` and the stripped skill; lines joined by newlines, ending in one."""
    lines = ["---", f'name: "{SKILL_NAME}"', f'description: "{description}"', "---", "", "# ReflACT Target Skill", ""]
    if preamble.strip():
        lines += [preamble.strip(), ""]
    lines += ["## Dynamic Guidance", "", skill.strip() or EMPTY_GUIDANCE, ""]
    return "\n".join(lines)
