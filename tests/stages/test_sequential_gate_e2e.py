"""The sequential gate end to end (issue 42): `+experiment=custom` through the CLI, Ray and the scripted server.
The scripted target answers a selection task right with a probability set by the rules in its skill (drawn from
each episode's own sample key), and the scripted analysts propose a harmful rule in epoch 1 and a helpful one in
epoch 2 (one step an epoch): the gate (the custom preset's `auto`: sequential on 12 selection tasks) refuses the
first and accepts the second, and each decision says what it paid."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from custom_helpers import write_jsonl
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli

pytestmark = pytest.mark.slow

P_RIGHT = {"base": 0.5, "HELPFUL": 0.8, "HARMFUL": 0.2}
RULES = {1: "- HARMFUL: answer before reading the question.", 2: "- HELPFUL: add the two numbers with care."}


class PlantedRules(Policies):
    """A noisy target whose chance of a right answer depends on the rules in its skill, and analysts that plant
    RULES[step]."""

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        system = "\n".join(str(m.get("content") or "") for m in body["messages"])
        m = re.search(r"/(sum\d+)/t\d+$", key)
        assert m, key
        i = int(m.group(1)[3:])
        p = P_RIGHT["HARMFUL" if "HARMFUL" in system else "HELPFUL" if "HELPFUL" in system else "base"]
        draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        return f"<answer>{2 * i if draw < p else 2 * i + 1}</answer>"

    def _opt_analyst(self, system: str, prompt: str) -> dict[str, Any]:
        out = super()._opt_analyst(system, prompt)
        key = self.optimizer_log[-1][1]  # train/e1s1/analyst/...: one analyst call per step (+smoke=tiny)
        epoch = int(re.search(r"/e(\d+)s\d+/", key).group(1))  # type: ignore[union-attr]
        out["patch"]["edits"] = [{"op": "append", "content": RULES[epoch]}]
        return out


def test_the_sequential_gate_refuses_a_harmful_rule_and_accepts_a_helpful_one(ray_cluster, tmp_path):
    rows = [
        {"id": f"sum{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
         "split": "train" if i < 2 else "val" if i < 14 else "test", "metadata": {"task_type": "arith"}}
        for i in range(16)
    ]  # fmt: skip
    data = write_jsonl(tmp_path / "tasks.jsonl", rows)
    policies = PlantedRules()
    with ScriptedServer(policies) as srv:
        overrides = [
            "+experiment=custom", "+smoke=tiny", "llm=compatible", f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}", "debug.progress=off", "tracking=none", f"env.data_dir={data}",
            "env.options.scorer=numeric", "env.limit_selection=12", "optimizer.slow_update=false",
            "optimizer.meta_skill=false",
        ]  # fmt: skip
        d = cli.plain(cli.compose(overrides))
        d = cli.resolve_paths(d)
        code, rd = cli.run_one(checked(d)), cli.run_dir_for(d)
    assert code == 0
    gates = [json.loads(p.read_text()) for p in sorted(Path(rd, "steps").glob("*/gate.json"))]
    for g in gates:
        t = g["gate_test"]
        assert t["test"] == "sequential" and t["episodes"] >= 12, t
        print(f"{g['action']}: {t['episodes']} episodes in {t['looks']} looks, net {t['net']:+g}, "
              f"difference {t['mean_diff']:+.3f} [{t['lo']:+.3f}, {t['hi']:+.3f}]")  # fmt: skip
    assert len(gates) == 2
    assert gates[0]["action"] == "reject" and gates[1]["action"].startswith("accept"), [g["reason"] for g in gates]
    assert "HELPFUL" in (Path(rd) / "best_skill.md").read_text()
    assert "HARMFUL" not in (Path(rd) / "best_skill.md").read_text()
