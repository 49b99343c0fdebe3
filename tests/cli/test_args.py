"""The command line's own parser reads flags exactly as Hydra's application parser does (it exists so that a
command whose config comes from the compose cache never imports Hydra)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skillopt_ray.base import private_apis
from skillopt_ray.cli.args import command_parser


def _shape(parser):
    """Each action's observable contract: flags, destination, arity, constant, default, choices, kind."""
    out = []
    for a in parser._actions:  # noqa: SLF001 - argparse keeps no public list of actions
        kind = "version" if "--version" in a.option_strings else type(a).__name__
        out.append((tuple(a.option_strings), a.dest, a.nargs, a.const, a.default, tuple(a.choices or ()), kind))
    return out


def test_every_flag_matches_hydras_parser():
    assert _shape(command_parser()) == _shape(private_apis.hydra_args_parser())


@pytest.mark.parametrize(
    "argv",
    [
        ["+experiment=custom", "seed=1,2", "-m", "--cfg", "job"],
        ["--info"],
        ["-i", "searchpath", "x=1"],
        ["-cn", "other", "-cd", "/tmp", "a=b", "--resolve", "-p", "llm"],
        ["-sc", "install=bash"],
        ["--hydra-help"],
        ["--experimental-rerun", "f.pickle", "-r"],
    ],
)
def test_command_lines_parse_to_the_same_namespace(argv):
    mine = command_parser().parse_intermixed_args(argv)
    theirs = private_apis.hydra_args_parser().parse_intermixed_args(argv)
    assert vars(mine) == vars(theirs)


def test_a_bad_choice_is_refused_as_hydra_refuses_it(capsys):
    with pytest.raises(SystemExit) as e:
        command_parser().parse_intermixed_args(["--cfg", "nope"])
    assert e.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_version_prints_hydras_version_line():
    from hydra import __version__

    p = subprocess.run([sys.executable, "-m", "skillopt_ray", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == f"Hydra {__version__}"


def test_a_cached_command_line_is_parsed_without_importing_hydra():
    code = (
        "import sys; from skillopt_ray.cli.args import command_parser; "
        "a = command_parser().parse_intermixed_args(['+experiment=custom', '-m', 'seed=1,2']); "
        "assert a.multirun and a.overrides == ['+experiment=custom', 'seed=1,2']; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hydra', 'omegaconf')))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
