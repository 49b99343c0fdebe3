"""Shared fixtures: one Ray cluster per session, a scripted OpenAI-compatible server, the shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SKILLOPT_SHARED_DATA", REPO.parent / "shared" / "data"))
ALFWORLD_SHARED = SHARED / "alfworld"


@pytest.fixture(scope="session")
def alfworld_root() -> Path:
    if not (ALFWORLD_SHARED / "json_2.1.1").is_dir():
        pytest.skip(f"shared ALFWorld sample data not found at {ALFWORLD_SHARED}")
    return ALFWORLD_SHARED


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024, log_to_driver=False,
             logging_level="ERROR", ignore_reinit_error=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def walkthroughs(alfworld_root):
    from envs.alfworld.data import walk_split
    from skillopt_ray.testing.scripted_server import alfworld_walkthroughs

    return alfworld_walkthroughs(walk_split(alfworld_root, "all"))


@pytest.fixture()
def scripted(walkthroughs):
    from skillopt_ray.testing.scripted_server import Policies, ScriptedServer

    srv = ScriptedServer(Policies(walkthroughs, "rule_gated"))
    srv.start()
    yield srv
    srv.stop()


def qa_fixture(root: Path) -> dict:
    """SearchQA items in train/val/test folders under `root`; returns the scripted server's rule-gated answers."""
    import json

    from envs.searchqa.samples import make_items

    items = make_items(seed=3)
    for split, part in (("train", items[:8]), ("val", items[8:12]), ("test", items[12:16])):
        (root / split).mkdir(parents=True)
        (root / split / "items.json").write_text(json.dumps(part))
    return {it["id"]: ("qa", f"<answer>{it['answers'][0]}</answer>", "<answer>I do not know</answer>") for it in items}
