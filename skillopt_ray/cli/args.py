"""The command line's flags, read as `@hydra.main` reads them, without importing Hydra.

Importing Hydra (and OmegaConf under it) costs about 0.1 s before a run's first model call, and a command whose
config comes back from the compose cache needs nothing else of it. This parser has the same flags, short names,
choices and defaults as Hydra's own (`hydra._internal.utils.get_args_parser`); tests/cli/test_args.py compares the
two action by action, so a Hydra upgrade that changes its flags fails that test by name. Only `--version` reaches
into Hydra, when it is asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn, Optional

INFO_CHOICES = ["all", "config", "defaults", "defaults-tree", "plugins", "searchpath"]


class _HydraVersion(argparse.Action):
    """`--version`: Hydra's version line (Hydra is imported only here)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> NoReturn:
        from skillopt_ray.base.private_apis import hydra_version

        print(f"Hydra {hydra_version()}")  # on standard output, as argparse's version action prints it
        parser.exit()


class _CompletionHelp:
    """Hydra's completion help text, built only when --help is rendered."""

    def __repr__(self) -> str:
        from skillopt_ray.base.private_apis import hydra_completion_help

        return f"Install or Uninstall shell completion:\n{hydra_completion_help()}"


def command_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of Hydra's application flags and the overrides after them."""
    p = argparse.ArgumentParser(prog=prog, add_help=False, description="Hydra")
    p.add_argument("--help", "-h", action="store_true", help="Application's help")
    p.add_argument("--hydra-help", action="store_true", help="Hydra's help")
    p.add_argument("--version", action=_HydraVersion, help="Show Hydra's version and exit")
    p.add_argument("overrides", nargs="*", help="Any key=value arguments to override config values")
    p.add_argument("--cfg", "-c", choices=["job", "hydra", "all"], help="Show config instead of running")
    p.add_argument("--resolve", action="store_true", help="With --cfg: resolve interpolations before printing")
    p.add_argument("--package", "-p", help="Config package to show")
    p.add_argument("--run", "-r", action="store_true", help="Run a job")
    p.add_argument("--multirun", "-m", action="store_true", help="Run multiple jobs (the sweeper and launcher)")
    p.add_argument("--shell-completion", "-sc", action="store_true", help=_CompletionHelp())  # type: ignore[arg-type]
    p.add_argument("--config-path", "-cp", help="The primary config folder (instead of the package's conf/)")
    p.add_argument("--config-name", "-cn", help="The primary config's name")
    p.add_argument("--config-dir", "-cd", help="Adds a config folder to the search path")
    p.add_argument("--experimental-rerun", help="Rerun a job from a previous config pickle")
    p.add_argument(
        "--info", "-i", const="all", nargs="?", action="store", choices=INFO_CHOICES, help="Print Hydra information"
    )
    return p
