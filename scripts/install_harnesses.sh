#!/usr/bin/env bash
# Install the two agent command-line harnesses (Codex CLI, Claude Code) into a project-local npm prefix.
# About 660 MB together, so they are not part of the quickstart install; the harness targets
# (llm.target.harness=codex|claude_code) and .ci/run need them. Idempotent: a matching install is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${SKILLOPT_HARNESS_PREFIX:-.harnesses}
CODEX_VERSION=0.171.0
CLAUDE_VERSION=2.1.197
if ! command -v npm >/dev/null 2>&1; then
  echo "npm is required to install the agent harnesses (install Node.js 18+ and npm, e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
have() {  # have <package> <version>: the prefix already holds that exact version
  local pj="$PREFIX/lib/node_modules/$1/package.json"
  [ -f "$pj" ] && grep -q "\"version\": \"$2\"" "$pj"
}
want=()
have "@openai/codex" "$CODEX_VERSION" || want+=("@openai/codex@$CODEX_VERSION")
have "@anthropic-ai/claude-code" "$CLAUDE_VERSION" || want+=("@anthropic-ai/claude-code@$CLAUDE_VERSION")
if [ "${#want[@]}" -gt 0 ]; then
  npm install -g --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "${want[@]}"
fi
"$PREFIX/bin/codex" --version
"$PREFIX/bin/claude" --version
