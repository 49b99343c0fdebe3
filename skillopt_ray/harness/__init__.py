"""Agent harness targets: each episode is a real run of an agent CLI (Codex, Claude Code) in a jailed workspace
with the skill installed as `.agents/skills/skillopt-target/SKILL.md`, its model calls served by the project's
LLM gateway."""
