"""DocVQA eval-only throughput: a 374-question test split (the paper's test size) through the env-actor pool.

The pages are the built-in rendered samples (generated before the clock starts); a scripted OpenAI-compatible
server on localhost answers every call after a fixed latency. Each episode is one call carrying its page image
as a base64 `data:` URL, read from disk by the env actor that runs it. Reports, per latency:

- wall time and episodes per second;
- the model-latency bound: calls x latency / concurrency (no scheme does better with C calls in flight);
- bound / wall (1.0 = the run only waits on the model);
- bytes of image sent per call, CPU seconds per process.

`--scan-noise SIGMA` adds Gaussian noise to every page before the clock starts, so the PNGs weigh what scanned
pages do (hundreds of KB instead of ~15 KB): the cost of moving real page images through the actors shows.

    python scripts/bench_docvqa_eval.py --latency 0.1 1.0
    python scripts/bench_docvqa_eval.py --latency 0.1 1.0 --scan-noise 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from skillopt_envs.base import EnvSettings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted OpenAI-compatible server, a test double, lives with the tests

import ray  # noqa: E402
from bench_rollout import cpu_seconds_by_role  # noqa: E402
from scripted_server import Policies, ScriptedServer  # noqa: E402
from skillopt_envs.base import EpisodeContext  # noqa: E402
from skillopt_envs.docvqa.benchmark import SEED_SKILL, DocVQABenchmark  # noqa: E402
from skillopt_envs.docvqa.samples import ensure_samples  # noqa: E402

from skillopt_ray.engine.envpool import EnvPool, PoolSettings  # noqa: E402
from skillopt_ray.llm.gateway import GatewayActor  # noqa: E402


def run_once(env_cfg: EnvSettings, tasks: list, latency: float, actors: int, per_actor: int) -> dict:
    answers = {t.task_id: (t.task_type, f"<answer>{t.payload['answers'][0]}</answer>", "") for t in tasks}
    srv = ScriptedServer(Policies(target="walkthrough", answers=answers), latency_s=latency)
    srv.start()
    concurrency = actors * per_actor
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": srv.base_url,
        "structured_output": "none",
        "max_concurrency": max(24, concurrency),
        "max_completion_tokens": 16384,
    }
    gw = GatewayActor.remote({"backend": "compatible", "target": role, "optimizer": role}, None, None)  # type: ignore[attr-defined]  # .remote comes from @ray.remote
    try:
        pool = EnvPool("docvqa", env_cfg, gw, PoolSettings(actors, per_actor, 0.0, 600.0, 1))
        ray.get([act.pid.remote() for act in pool.actors])  # actors up before the clock starts
        cpu0 = cpu_seconds_by_role()
        t0 = time.monotonic()
        results = asyncio.run(pool.run(tasks, SEED_SKILL, EpisodeContext(f"bench{latency}", False, 1, 0)))
        wall = time.monotonic() - t0
        cpu1 = cpu_seconds_by_role()
        pool.shutdown()
        bodies = list(srv.state.bodies)
    finally:
        ray.kill(gw)
        srv.stop()
    calls = sum(r.n_turns for r in results)
    bound = calls * latency / concurrency
    urls = [b["messages"][1]["content"][1]["image_url"]["url"] for b in bodies]
    return {
        "latency_s": latency,
        "episodes": len(results),
        "right": int(sum(r.hard for r in results)),
        "infra_errors": sum(r.infra_error for r in results),
        "model_calls": calls,
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "episodes_per_s": round(len(results) / wall, 2),
        "latency_bound_s": round(bound, 2),
        "bound_over_wall": round(bound / wall, 3),
        "image_url_bytes_per_call": int(sum(map(len, urls)) / max(1, len(urls))),
        "cpu_s_by_process": {k: round(v - cpu0.get(k, 0.0), 1) for k, v in cpu1.items() if v - cpu0.get(k, 0.0) > 0.05},
    }


def add_scan_noise(paths: list[str], sigma: float) -> None:
    """Each page with Gaussian grey-level noise, as a scanner leaves it (PNG no longer compresses it away)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for path in paths:
        with Image.open(path) as im:
            pixels = np.asarray(im, dtype=np.float32)
        noisy = np.clip(pixels + rng.normal(0.0, sigma, pixels.shape), 0, 255).astype(np.uint8)
        Image.fromarray(noisy).save(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--questions", type=int, default=374)
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--per-actor", type=int, default=4, help="episodes in flight per env actor")
    ap.add_argument(
        "--scan-noise", type=float, default=0.0, help="grey-level noise sigma added to every page (0: none)"
    )
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-docvqa-")
    t0 = time.monotonic()
    root = ensure_samples(str(Path(tmp.name) / "pages"), {"train": 1, "val": 1, "test": a.questions})
    made = time.monotonic() - t0
    env_cfg: EnvSettings = {"data_dir": str(root), "options": {"target_provider": "openai"}}
    tasks = DocVQABenchmark(env_cfg).load_split("test")  # paths only: the driver reads no image
    if a.scan_noise > 0:
        add_scan_noise([t.payload["image_path"] for t in tasks], a.scan_noise)
    png_kb = sum(Path(t.payload["image_path"]).stat().st_size for t in tasks) / len(tasks) / 1024
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=200 * 1024 * 1024,
    )
    try:
        runs = [run_once(env_cfg, tasks, lat, a.actors, a.per_actor) for lat in a.latency]
    finally:
        ray.shutdown()
        tmp.cleanup()
    out = {
        "questions": len(tasks),
        "pages_generated_s": round(made, 1),
        "page_png_kb_avg": round(png_kb, 1),
        "scan_noise": a.scan_noise,
        "cpus": os.cpu_count(),
        "runs": runs,
    }
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
