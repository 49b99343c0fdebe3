"""Benchmarks by name. The engine asks the registry; it never imports a benchmark directly."""

from __future__ import annotations

import importlib
from typing import Any

from skillopt_envs.base import Benchmark, DataError, EpisodeContext, EpisodeResult, Task

_REGISTRY = {
    "alfworld": "skillopt_envs.alfworld.benchmark:AlfWorldBenchmark",
    "spreadsheetbench": "skillopt_envs.spreadsheetbench.benchmark:SpreadsheetBenchmark",
    "searchqa": "skillopt_envs.searchqa.benchmark:SearchQABenchmark",
    "docvqa": "skillopt_envs.docvqa.benchmark:DocVQABenchmark",
    "officeqa": "skillopt_envs.officeqa.benchmark:OfficeQABenchmark",
    "livemathematicianbench": "skillopt_envs.livemathematicianbench.benchmark:LiveMathBenchmark",
}
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


def make(name: str, env_cfg: dict[str, Any]) -> Benchmark:
    return benchmark_class(name)(env_cfg)


def benchmark_class(name: str) -> type[Benchmark]:
    """The benchmark's class (its module imported; no engine is loaded until an instance is made and used)."""
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


__all__ = [
    "Benchmark",
    "DataError",
    "EpisodeContext",
    "EpisodeResult",
    "Task",
    "benchmark_class",
    "data_env_var",
    "make",
    "names",
]
