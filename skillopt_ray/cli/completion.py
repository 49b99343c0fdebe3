"""Bash completion for what users type: `python -m skillopt_ray ...` (any interpreter path, e.g.
`.venv/bin/python -m skillopt_ray`) and the installed `skillopt-ray` command.

Hydra's own bash script completes `python script.py` and installed commands only: for `python -m skillopt_ray` it
takes `-m` for a script name and completes nothing. This module prints a script that recognises the module form,
and when asked for completions it rewrites the command line to the installed command's form before Hydra's query
reads it (Hydra strips the program name, and does not know `-m MODULE`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

COMMANDS = "python python3 skillopt-ray"
FUNCTION = "_skillopt_ray_completion"

# `python -m skillopt_ray` (any path or version of python) at the start of the line
_MODULE_FORM = re.compile(r"^\s*\S*python[0-9.]*\s+-m\s+skillopt_ray(?=\s|$)")

INSTALL_BASH = rf"""{FUNCTION}()
{{
    local words=($COMP_LINE) helper
    if [ "${{words[1]}}" == "-m" ] && [ "${{words[2]}}" == "skillopt_ray" ]; then
        helper="${{words[0]}} -m skillopt_ray"
    elif [ "$(basename -- "${{words[0]}}")" == "skillopt-ray" ]; then
        helper="${{words[0]}}"
    else
        return  # another python command: bash's default completion (file names)
    fi
    local choices
    choices=$(COMP_POINT=$COMP_POINT COMP_LINE=$COMP_LINE $helper -sc query=bash 2>/dev/null)
    COMPREPLY=($(compgen -o nospace -o default -W "$choices" -- "${{words[$COMP_CWORD]}}"))
}}
COMP_WORDBREAKS=${{COMP_WORDBREAKS//=}}
complete -o nospace -o default -F {FUNCTION} {COMMANDS}"""

UNINSTALL_BASH = f"complete -r {COMMANDS} 2>/dev/null\nunset -f {FUNCTION}"


def app_line(line: str) -> str:
    """The completion line as Hydra's query understands it: `python -m skillopt_ray ARGS` -> `skillopt-ray ARGS`."""
    return _MODULE_FORM.sub("skillopt-ray", line, count=1)


def handle(words: list[str], run_hydra: Callable[[], None]) -> bool:
    """Answer `-sc REQUEST` for bash (True), or leave it to Hydra (False: fish, or anything else). Hydra's parser
    takes `-sc` as a flag and the request (`install=bash`, `query=bash`) as the first of the overrides."""
    request = words[0] if words else ""
    if request == "install=bash":
        print(INSTALL_BASH)
        return True
    if request == "uninstall=bash":
        print(UNINSTALL_BASH)
        return True
    if request != "query=bash":
        return False
    saved = os.environ.get("COMP_LINE", "")
    os.environ["COMP_LINE"] = app_line(saved)  # Hydra's query reads the line from the environment
    try:
        run_hydra()
    finally:
        os.environ["COMP_LINE"] = saved
    return True
