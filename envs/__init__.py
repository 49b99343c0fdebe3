"""Benchmarks by name. The engine asks the registry; it never imports a benchmark directly.

Besides the built-ins, a benchmark can live outside the package: `env.benchmark=my_pkg.my_module:MyBenchmark` (an
import path, imported in every process that plays it: the CLI, the driver and the env actors), or the name of an entry
point in the group `skillopt_ray.benchmarks` of an installed distribution.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Optional

from skillopt_envs.base import Benchmark, DataError, EnvSettings, EpisodeContext, EpisodeResult, Task

_REGISTRY = {
    "alfworld": "skillopt_envs.alfworld.benchmark:AlfWorldBenchmark",
    "spreadsheetbench": "skillopt_envs.spreadsheetbench.benchmark:SpreadsheetBenchmark",
    "searchqa": "skillopt_envs.searchqa.benchmark:SearchQABenchmark",
    "docvqa": "skillopt_envs.docvqa.benchmark:DocVQABenchmark",
    "officeqa": "skillopt_envs.officeqa.benchmark:OfficeQABenchmark",
    "livemathematicianbench": "skillopt_envs.livemathematicianbench.benchmark:LiveMathBenchmark",
    "custom": "skillopt_envs.custom.benchmark:CustomBenchmark",
}
ENTRY_POINT_GROUP = "skillopt_ray.benchmarks"
# The environment variable each benchmark reads its data folder from when env.data_dir is unset; the CLI reads
# this table (not the benchmark modules, which import heavy engines) to fingerprint a run's data.
_DATA_ENV = {
    "alfworld": "ALFWORLD_DATA",
    "spreadsheetbench": "SPREADSHEETBENCH_DATA",
    "searchqa": "SEARCHQA_DATA",
    "docvqa": "DOCVQA_DATA",
    "officeqa": "OFFICEQA_DATA",
    "livemathematicianbench": "LIVEMATH_DATA",
}
# Made by name like the others (env actors look them up in their own processes), but not listed by
# names(): no config presets, for tests and scripts/bench_scale.py only.
_TESTING = {
    "synthetic": "skillopt_envs.synthetic.benchmark:SyntheticBenchmark",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def data_env_var(name: str) -> str:
    """The environment variable naming the benchmark's data folder, or "" if it has none."""
    return _DATA_ENV.get(name, "")


def with_agent_harness() -> list[str]:
    """Benchmarks whose episodes can run in an agent harness (their class's `agent_harness`); imports each module."""
    out = []
    for name in names():
        try:
            if getattr(benchmark_class(name), "agent_harness", False):
                out.append(name)
        except DataError:  # registered but not implemented here
            continue
    return out


def make(name: str, env_cfg: EnvSettings) -> Benchmark:
    """The benchmark instance: the class env.benchmark names when set, else the registered `name`."""
    return benchmark_class(name, env_cfg.get("benchmark"))(env_cfg)


def benchmark_class(name: str, benchmark: Optional[str] = None) -> type[Benchmark]:
    """The benchmark's class (its module imported; no engine is loaded until an instance is made and used).
    `benchmark` (env.benchmark), when set, wins: an import path `module:Class` or an entry point's name."""
    if benchmark:
        return plugin_class(str(benchmark))
    if name == "plugin":
        raise DataError("env=plugin needs env.benchmark=module:Class (or the name of an installed entry point)")
    where = _REGISTRY.get(name) or _TESTING.get(name)
    if where is None:
        raise DataError(f"unknown environment {name!r}; registered: {', '.join(names())}")
    module, cls = where.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("skillopt_envs."):
            raise DataError(f"environment {name!r} is registered but not implemented in this version") from None
        raise
    return getattr(mod, cls)


def plugin_class(spec: str) -> type[Benchmark]:
    """A benchmark outside the package, checked against the contract; DataError (one line) when it cannot be used."""
    where = spec if ":" in spec else _entry_point(spec)
    module, _, attr = where.partition(":")
    if not module or not attr:
        raise DataError(f"env.benchmark={spec!r} is not module:Class; give e.g. env.benchmark=my_pkg.bench:MyBenchmark")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:
        raise DataError(
            f"env.benchmark={spec}: module {e.name!r} cannot be found; put its folder on PYTHONPATH (or pip install it)"
        ) from None
    except AttributeError:
        raise DataError(f"env.benchmark={spec}: module {module} has no {attr!r}; check the class name") from None
    except Exception as e:  # its own code failed on import: say what, in one line
        raise DataError(f"env.benchmark={spec}: importing {module} failed ({type(e).__name__}: {e})") from None
    missing = contract_gaps(cls)
    if missing:
        raise DataError(f"env.benchmark={spec} does not implement the benchmark contract: {missing}")
    return cls


def contract_gaps(cls: Any) -> str:
    """What a class lacks to be a benchmark (empty: nothing): a Benchmark subclass with no abstract method left,
    whose run_episode is a coroutine function."""
    if not (inspect.isclass(cls) and issubclass(cls, Benchmark)):
        return f"{cls!r} is not a subclass of skillopt_envs.base.Benchmark"
    if inspect.isabstract(cls):
        return "it does not define " + ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
    if not inspect.iscoroutinefunction(getattr(cls, "run_episode", None)):
        return "run_episode must be `async def`"
    return ""


def _entry_point(name: str) -> str:
    """`module:Class` of the installed entry point `name` in the group skillopt_ray.benchmarks."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise DataError(
            f"env.benchmark={name!r} is neither module:Class nor an entry point of {ENTRY_POINT_GROUP} ({known})"
        )
    return found[name]


__all__ = [
    "ENTRY_POINT_GROUP",
    "Benchmark",
    "DataError",
    "EpisodeContext",
    "EpisodeResult",
    "Task",
    "benchmark_class",
    "data_env_var",
    "make",
    "names",
    "plugin_class",
]
