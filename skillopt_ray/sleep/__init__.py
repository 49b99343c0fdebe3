"""Skills from your own agent sessions: harvest Codex and Claude Code session logs into a reviewed task file."""
