"""Benchmarks by name. The engine asks the registry; it never imports a benchmark directly."""

from __future__ import annotations

import importlib
from typing import Any

from envs.base import Benchmark, DataError, EpisodeContext, EpisodeResult, Task

_REGISTRY = {
    "alfworld": "envs.alfworld.benchmark:AlfWorldBenchmark",
    "spreadsheetbench": "envs.spreadsheetbench.benchmark:SpreadsheetBenchmark",
    "searchqa": "envs.searchqa.benchmark:SearchQABenchmark",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def make(name: str, env_cfg: dict[str, Any]) -> Benchmark:
    if name not in _REGISTRY:
        raise DataError(f"unknown environment {name!r}; registered: {', '.join(names())}")
    module, cls = _REGISTRY[name].split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("envs."):
            raise DataError(f"environment {name!r} is registered but not implemented in this version") from None
        raise
    return getattr(mod, cls)(env_cfg)


__all__ = ["Benchmark", "DataError", "EpisodeContext", "EpisodeResult", "Task", "make", "names"]
