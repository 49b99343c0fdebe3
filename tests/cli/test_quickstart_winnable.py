"""The flagship quickstart (`+experiment=alfworld +smoke=tiny`) can learn: every game it picks can be won within
its turns (a scripted target playing each game's walkthrough wins it through the real episode loop and engine),
and a setting that makes winning impossible is said in one start-up line.

`+smoke=tiny` used to give ALFWorld 3 turns, fewer than the shortest walkthrough of any sample game (4 steps),
so no run could ever improve its skill, whatever the model."""

from __future__ import annotations

import asyncio
import re

import pytest
import skillopt_envs
from helpers import checked
from skillopt_envs.alfworld.game import read_walkthrough
from skillopt_envs.base import EpisodeContext
from skillopt_envs.chat import ChatResult

from skillopt_ray import cli
from skillopt_ray.config import from_container
from skillopt_ray.engine.driver import load_splits


@pytest.fixture(autouse=True)
def _samples(monkeypatch):
    # the built-in sample games: importing the ALFWorld engine (as an episode does) sets ALFWORLD_DATA to its
    # default download folder in this process, which a later benchmark here would then read
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


def _compose(*extra: str):
    d = cli.plain(cli.compose(["+experiment=alfworld", "+smoke=tiny", *extra]))
    cfg = from_container(d)
    bench = skillopt_envs.make("alfworld", d["env"])
    return cfg, bench, load_splits(bench, cfg)


class WalkthroughTarget:
    """A perfect target (test double): each turn plays the next step of the game's walkthrough."""

    def __init__(self, walks: dict[str, list[str]]):
        self.walks = walks

    async def chat(self, req):
        m = re.search(r"/(.+)/t(\d+)$", req.key)  # <context key>/<task id>/t<turn, from 0>
        walk = next(w for tid, w in self.walks.items() if m.group(1).endswith(tid))
        turn = int(m.group(2))
        action = walk[turn] if turn < len(walk) else "look"
        return ChatResult(f"<think>next step</think><action>{action}</action>")

    async def chat_json(self, req, schema, name="reply"):  # pragma: no cover - free text only (no constraint)
        raise AssertionError("the scripted target is asked for free text")

    async def response_format_for(self, role, schema, name):
        return None


def test_every_game_the_tiny_alfworld_picks_is_won_within_its_turns_by_a_perfect_target():
    cfg, bench, splits = _compose("llm=compatible", "llm.base_url=http://127.0.0.1:9/v1")
    tasks = {t.task_id: t for t in [*splits.train, *splits.selection, *splits.test]}
    walks = {tid: read_walkthrough(t.payload["gamefile"]) for tid, t in tasks.items()}
    assert all(0 < len(w) <= cfg.env.max_turns for w in walks.values()), (cfg.env.max_turns, walks)
    target = WalkthroughTarget(walks)
    ctx = EpisodeContext("test/e0", False, cfg.env.max_turns, cfg.env.history_window)

    async def play_all():
        return [await bench.run_episode(t, bench.seed_skill(), target, ctx) for t in tasks.values()]

    results = asyncio.run(play_all())
    assert [(r.task_id, r.hard) for r in results] == [(tid, 1.0) for tid in tasks]
    assert (
        bench.turns_note({"train": splits.train, "selection": splits.selection, "test": splits.test}, cfg.env.max_turns)
        == ""
    )


def test_turns_below_a_walkthrough_are_said_in_one_line():
    cfg, bench, splits = _compose("env.max_turns=3")
    parts = {"train": splits.train, "selection": splits.selection, "test": splits.test}
    shortest = {k: min(len(read_walkthrough(t.payload["gamefile"])) for t in v) for k, v in parts.items()}
    longest = max(len(read_walkthrough(t.payload["gamefile"])) for v in parts.values() for t in v)
    assert min(shortest.values()) > 3  # the old tiny setting: no sample game can be won in 3 turns
    note = bench.turns_note(parts, 3)
    assert "\n" not in note and note.startswith("ALFWorld: env.max_turns=3 is below the walkthrough")
    for name, n in shortest.items():
        assert f"{name}: none winnable (shortest walkthrough {n} steps)" in note
    assert note.endswith(f"set env.max_turns={longest} or more")
    # four turns: the 4-step games can be won, the 5-step ones cannot
    partial = bench.turns_note(parts, 4)
    assert "train" not in partial and "selection: none winnable (shortest walkthrough 5 steps)" in partial


@pytest.mark.slow
def test_the_impossible_setting_line_appears_at_start_up(ray_cluster, tmp_path, capsys):
    """Through the CLI against the scripted server, which plays each game's walkthrough."""
    from scripted_server import Policies, ScriptedServer, alfworld_walkthroughs

    cfg, bench, splits = _compose()
    walks = alfworld_walkthroughs([*splits.train, *splits.selection, *splits.test])
    # the sample games named as data (Ray's workers may have inherited an ALFWORLD_DATA set by an engine import)
    samples = [f"env.data_dir={bench._root}", "env.options.split_source=folders"]
    with ScriptedServer(Policies(walkthroughs=walks)) as srv:
        overrides = [
            "+experiment=alfworld",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path}",
            "debug.progress=off",
            "tracking=none",
            *samples,
        ]
        for turns, expect_note in ((cfg.env.max_turns, False), (3, True)):
            c = cli.plain(cli.compose([*overrides, f"env.max_turns={turns}"]))
            code = cli.run_one(checked(c))
            captured = capsys.readouterr()
            lines = [ln for ln in captured.err.splitlines() if "is below the walkthrough" in ln]
            assert code == 0, captured.err
            assert len(lines) == (1 if expect_note else 0), captured.err
            if not expect_note:  # a perfect target wins the test game with the tiny settings
                assert re.search(r"^final\s+\S+\s+1\.000", captured.out, re.M), captured.out
