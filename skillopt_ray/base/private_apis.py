"""The one place that touches other projects' private or internal APIs (Hydra's, MLflow's, Ray's, CPython's), each for a
job their public API does not offer. tests/house/test_private_apis.py calls every function here, so an upgrade
that moves one fails that test by name instead of a run. Nothing else in the project imports a private name.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

# ---- MLflow: build a sqlite store whole before MLflow opens it (kill safety, see tracking.ensure_store) ------------


def mlflow_schema_head() -> str:
    """The schema revision a store of this MLflow version is migrated to (MLflow has no public call for it)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def mlflow_create_sqlite_store(path: Path) -> None:
    """Create every table of MLflow's tracking schema in the sqlite file `path` (what MLflow does on first use,
    done here in a private file that is linked into place only when whole)."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine
    from sqlalchemy import event

    engine = create_sqlalchemy_engine(f"sqlite:///{path}")
    # the file is private until it is whole, and the caller syncs it to disk once before linking it into place: its
    # tables and migrations need not wait for the disk at every commit (2-3 s idle out of 3 on this machine's disk)
    event.listen(engine, "connect", _unsynced)
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()


def _unsynced(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA synchronous=OFF")


# ---- CPython: the first half of the interpreter's own exit -------------------------------------------------------


def python_exit_handlers() -> None:
    """What Python runs at exit before it frees its modules: wait for the threads that are not daemons (and stop the
    thread pools' idle workers), then the atexit handlers (logging's flush, temporary folders' removal, MLflow's)."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()


# ---- Hydra: the application's own argv parser, its search path and the basic sweeper's job split -----------------


def hydra_args_parser() -> Any:
    """The argparse parser `@hydra.main` uses (so flags are read exactly as Hydra reads them)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def hydra_version() -> str:
    """The installed Hydra's version, as its `--version` flag prints it (read only when that flag is given)."""
    from hydra import __version__

    return str(__version__)


def hydra_completion_help() -> str:
    """The help text of Hydra's `--shell-completion` flag (built only when --help is rendered)."""
    from hydra._internal.utils import _get_completion_help

    return str(_get_completion_help())


def hydra_create(config_dir: Path, search_dirs: Iterable[str] = ()) -> Any:
    """A Hydra instance with the application's search path: `config_dir`, then each `--config-dir` ahead of it
    (the public compose API cannot take the command line's search path and run mode)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.config_search_path import SearchPathQuery

    path = create_automatic_config_search_path(None, None, str(Path(config_dir).resolve()))
    for d in search_dirs:
        path.prepend(
            provider="command-line", path=f"file://{Path(d).resolve()}", anchor=SearchPathQuery(provider="schema")
        )
    return Hydra.create_main_hydra2(task_name="app", config_search_path=path)


def hydra_split_jobs(parsed_overrides: list[Any]) -> list[list[str]]:
    """The jobs Hydra's basic sweeper launches for these parsed overrides (one list of overrides per job)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper.split_arguments(parsed_overrides, None)[0]


def hydra_compose_job(hydra: Any, sweep_cfg: Any, overrides: list[str]) -> Any:
    """One job of a multirun composed as Hydra's basic launcher composes it (the sweep's `hydra.*` overrides, then
    the job's; the sweep's resolver cache copied, so `${now:...}` reads the same), Hydra's settings included."""
    return hydra.config_loader.load_sweep_config(sweep_cfg, list(overrides))


def hydra_context(hydra: Any, cfg: Any) -> Any:
    """The HydraContext `run_job` takes: the instance's config loader and the callbacks `cfg` configures."""
    from hydra._internal.callbacks import Callbacks
    from hydra.types import HydraContext

    return HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(cfg))


# ---- Ray: join a cluster whose authentication mode differs from the one this process started with -----------------


def ray_set_auth_mode(mode: str) -> None:
    """Make this process use Ray authentication `mode` ("token" or "disabled") from its next connection on. Ray reads
    RAY_AUTH_MODE into a cached config when it is imported; a command that imported Ray before it found the kept
    cluster (token auth) must refresh that cache, as Ray itself does when it turns token auth on."""
    import os

    from ray._raylet import Config  # type: ignore[attr-defined]  # a compiled module without stubs

    os.environ["RAY_AUTH_MODE"] = mode
    Config.initialize("")


# ---- Ray: a private local cluster without the head processes a single run never uses ------------------------------


def ray_init_lean(**options: Any) -> Any:
    """`ray.init(**options)` for a new local cluster, without three head processes: the autoscaler monitor (nothing
    to scale on one machine), the log monitor (our runs pass log_to_driver=False: no worker log reaches the driver)
    and the dashboard's API server (include_dashboard=False still starts it for `ray job submit` and the state
    API; a private cluster is neither submitted to nor inspected). On 2 cores that halves Ray's start (3.8 s to
    1.9 s) and saves about 180 MB resident (scripts/bench_small_eval.py). ray.init offers no switch for them; its
    parameters are built and its head node started in that one call, so both are swapped for that call only."""
    import ray
    from ray._private import node, parameter

    params, start_api_server = parameter.RayParams, node.Node.start_api_server

    class LeanParams(params):  # type: ignore[misc,valid-type]  # Ray's class, subclassed for one call
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("no_monitor", True)
            kwargs.setdefault("include_log_monitor", False)
            super().__init__(*args, **kwargs)

    def no_api_server(self: Any, **kwargs: Any) -> None:
        return None

    setattr(parameter, "RayParams", LeanParams)  # noqa: B010 - a module's class swapped for one call
    node.Node.start_api_server = no_api_server  # type: ignore[method-assign]
    try:
        return ray.init(**options)
    finally:
        setattr(parameter, "RayParams", params)  # noqa: B010
        node.Node.start_api_server = start_api_server  # type: ignore[method-assign]
