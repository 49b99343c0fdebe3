"""The ALFWorld target protocol as the reference runs it: prompt layout, reply parsing, history of 2, what an
episode records, step limits, constrained decoding only for the embedded model, and API errors that stay infra
errors. Expected values are computed from the reference's rules, not read back from the code."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from skillopt_envs.alfworld import protocol
from skillopt_envs.alfworld.benchmark import SEED_SKILL, AlfWorldBenchmark, AlfWorldOptions
from skillopt_envs.alfworld.data import TASK_TYPES, task_type_of, walk_split
from skillopt_envs.alfworld.protocol import Record, build_messages, goal_text, parse_constrained_reply, parse_reply
from skillopt_envs.base import EpisodeContext

FIRST_OBS = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a desk 1, and a drawer 1.\n\nYour task is to: put a pencil in desk."
)
ADMISSIBLE = ["go to desk 1", "go to drawer 1", "help", "inventory", "look"]
LIST_NO_HELP = (
    "['go to desk 1'\n 'go to drawer 1'\n 'inventory'\n 'look']"  # quoted, joined by newline+space, help gone
)


# ---------------------------------------------------------------- prompt layout


def test_first_step_prompt_layout():
    msgs = build_messages("# My skill\n- rule one", "put a pencil in desk.", [], FIRST_OBS, ADMISSIBLE, 2)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert system.strip() and "\n" not in system.strip()  # a one-line system prompt
    assert "My skill" not in system  # the skill is in the user message, not the system prompt
    # skill section first: blank line, heading, intro sentence, blank line, the skill, newline; then "\n" + template
    m = re.match(r"\n\n## Skill Knowledge\n([^\n]+)\n\n# My skill\n- rule one\n\n\n", user)
    assert m, user[:200]
    template = user[m.end() :]
    lines = template.split("\n")
    assert lines[0].strip() and "Your task is to" not in lines[0]  # the role line comes first on the first step
    assert template.index(FIRST_OBS) < template.index(LIST_NO_HELP)  # full first observation, then the actions
    assert "'help'" not in user
    tail = template[template.index(LIST_NO_HELP) + len(LIST_NO_HELP) :]
    assert "<think>" in tail and "</think>" in tail and "<action>" in tail and "</action>" in tail  # instruction last
    assert tail.index("<think>") < tail.index("<action>")
    assert "Observation 1" not in user and "[Observation" not in user  # no history on the first step


def test_blank_skill_has_no_skill_section():
    user = build_messages("  \n", "t", [], FIRST_OBS, ADMISSIBLE)[1]["content"]
    assert "Skill Knowledge" not in user
    assert user.startswith("\n\n") and user[2:].split("\n")[0].strip()  # "\n" + the template's leading blank line


def test_later_step_shows_two_most_recent_records_numbered_over_the_episode():
    memory = [
        Record(FIRST_OBS, "go to drawer 1"),
        Record("The drawer 1 is closed.", "open drawer 1"),
        Record("You open the drawer 1. In it, you see a pencil 2.", "take pencil 2 from drawer 1"),
    ]
    current = "You pick up the pencil 2 from the drawer 1."
    user = build_messages("S", "put a pencil in desk.", memory, current, ADMISSIBLE, 2)[1]["content"]
    template = user.split("\nS\n", 1)[1]
    first_line = template.lstrip("\n").split("\n")[0]
    assert first_line.endswith("Your task is to: put a pencil in desk.")  # role line plus the task
    records = re.findall(r"^\[Observation \d+: .*?, Action \d+: '.*?'\]$", template, re.M | re.S)
    assert records == [
        "[Observation 2: 'The drawer 1 is closed.', Action 2: 'open drawer 1']",
        "[Observation 3: 'You open the drawer 1. In it, you see a pencil 2.', Action 3: 'take pencil 2 from drawer 1']",
    ]  # only the last 2, one per line, k 1-based over the whole episode
    assert "Observation 1" not in template and "Welcome to TextWorld" not in template
    assert re.search(r"\b3\b", template.split("[Observation 2")[0])  # steps taken so far = len(memory)
    after = template.split("take pencil 2 from drawer 1']", 1)[1]
    assert re.search(r"\b4\b", after.split(current)[0])  # current step = len(memory) + 1, before the observation
    assert after.index(current) < after.index(LIST_NO_HELP) < after.index("<action>")


def test_history_window_is_configurable():
    memory = [Record(f"obs {i}", f"act {i}") for i in range(1, 6)]
    user = build_messages("S", "t", memory, "now", ADMISSIBLE, 3)[1]["content"]
    assert re.findall(r"\[Observation (\d+):", user) == ["3", "4", "5"]


def test_goal_text_and_seed_skill():
    assert goal_text(FIRST_OBS) == "put a pencil in desk."
    assert goal_text("no task here") == ""
    # seed skill: the substance of the reference's initial procedure (its sections), in this project's words
    for heading in ("## Overview", "## Task Types", "## General Principles", "## Common Mistakes"):
        assert heading in SEED_SKILL
    principles = SEED_SKILL.split("## General Principles", 1)[1].split("##", 1)[0]
    assert re.findall(r"^(\d+)\. ", principles, re.M) == [str(i) for i in range(1, 9)]  # eight numbered rules
    table = SEED_SKILL.split("## Task Types", 1)[1].split("##", 1)[0]
    assert (
        len([ln for ln in table.splitlines() if ln.startswith("|") and "->" in ln]) == 6
    )  # six families with step chains
    assert "<think>" in SEED_SKILL and "<action>" in SEED_SKILL


# ---------------------------------------------------------------- reply parsing


@pytest.mark.parametrize(
    "reply, command, action",
    [
        ("<think>find it</think><action>go to desk 1</action>", "go to desk 1", "go to desk 1"),
        (
            "<think>x</think><action>  Take Pencil 2 From Drawer 1 </action>",
            "take pencil 2 from drawer 1",
            "Take Pencil 2 From Drawer 1",
        ),
        (
            "<action>open drawer 1</action> then <action>go to desk 1</action>",
            "open drawer 1",
            "open drawer 1",
        ),  # the first tag
        ("I will go to the desk.", "look", "look"),  # no tag
        ("go to desk 1", "look", "look"),  # a bare command is not an action
        ("<ACTION>go to desk 1</ACTION>", "look", "look"),  # the tags are case-sensitive
        ("", "look", "look"),  # empty reply
        ("   \n", "look", "look"),
        (None, "look", "look"),
    ],
)
def test_reply_parsing(reply, command, action):
    p = parse_reply(reply)
    assert (p.command, p.action) == (command, action)
    assert p.fallback == (command == "look" and action == "look")


def test_reasoning_and_format_flag():
    p = parse_reply("<think>The pencil is in the drawer.</think>\n<action>open drawer 1</action>")
    assert p.reasoning == "The pencil is in the drawer." and p.format_ok
    p = parse_reply("<action>open drawer 1</action>")
    assert p.reasoning is None and not p.format_ok and p.command == "open drawer 1"  # flagged, still played
    p = parse_reply("<think>先打开抽屉</think><action>open drawer 1</action>")
    assert not p.format_ok and p.command == "open drawer 1"  # CJK flagged, still played
    assert parse_reply("").reasoning and parse_reply("no tag").reasoning  # the fallbacks say why `look` was played


def test_constrained_reply_parsing():
    assert parse_constrained_reply('{"action": "go to desk 1"}').command == "go to desk 1"
    assert parse_constrained_reply("<action>look</action>").command == "look"
    assert parse_constrained_reply("garbage").command == "look"


def test_action_schema_excludes_help():
    schema = protocol.action_schema(ADMISSIBLE)
    assert schema["properties"]["action"]["enum"] == ["go to desk 1", "go to drawer 1", "inventory", "look"]


def test_constrained_decoding_only_for_the_embedded_model():
    assert AlfWorldOptions.parse({"target_provider": "embedded"}).constrained
    for provider in ("openai", "azure", None):
        assert not AlfWorldOptions.parse({"target_provider": provider}).constrained
    assert AlfWorldOptions.parse({"constrained_actions": "on", "target_provider": "openai"}).constrained
    assert not AlfWorldOptions.parse({"constrained_actions": "off", "target_provider": "embedded"}).constrained


def test_composed_config_follows_the_reference():
    from skillopt_ray import cli

    for llm, provider in (("embedded", "embedded"), ("openai", "openai"), ("compatible", "openai")):
        cfg = cli.compose(["+experiment=alfworld", f"llm={llm}"])
        assert cfg.env.history_window == 2 and cfg.env.max_turns == 50
        assert cfg.env.options["target_provider"] == provider
        assert AlfWorldOptions.parse(dict(cfg.env.options)).constrained == (provider == "embedded")


# ---------------------------------------------------------------- task types


@pytest.mark.parametrize(
    "path, expected",
    [
        ("json_2.1.1/train/pick_and_place_simple-Pencil-None-Desk-302/trial_T1/game.tw-pddl", "pick_and_place"),
        (
            "json_2.1.1/valid_seen/pick_two_obj_and_place-Book-None-Desk-313/trial_T2/game.tw-pddl",
            "pick_two_obj_and_place",
        ),
        ("json_2.1.1/train/look_at_obj_in_light-CD-None-DeskLamp-320/t/game.tw-pddl", "look_at_obj_in_light"),
        (
            "json_2.1.1/train/pick_heat_then_place_in_recep-Egg-None-CounterTop-12/t/game.tw-pddl",
            "pick_heat_then_place_in_recep",
        ),
        (
            "json_2.1.1/train/pick_cool_then_place_in_recep-Bread-None-CounterTop-1/t/game.tw-pddl",
            "pick_cool_then_place_in_recep",
        ),
        (
            "json_2.1.1/train/pick_clean_then_place_in_recep-Apple-None-DiningTable-4/t/game.tw-pddl",
            "pick_clean_then_place_in_recep",
        ),
        ("json_2.1.1/train/something_else-X/t/game.tw-pddl", "other"),
    ],
)
def test_task_type_names_are_the_references(path, expected):
    assert task_type_of(path) == expected


def test_declared_task_types():
    assert TASK_TYPES == (
        "pick_and_place",
        "pick_two_obj_and_place",
        "look_at_obj_in_light",
        "pick_heat_then_place_in_recep",
        "pick_cool_then_place_in_recep",
        "pick_clean_then_place_in_recep",
    )


# ---------------------------------------------------------------- episodes on the real engine over HTTP


def _gateway(url: str, structured: str = "none", retries: int = 6):
    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway

    role = LLMRoleConfig(
        provider="openai", model="scripted", base_url=url, structured_output=structured, max_concurrency=4
    )
    return Gateway(
        LLMConfig(
            backend="compatible",
            target=role,
            optimizer=role,
            max_retries=retries,
            retry_base_s=0.01,
            retry_max_s=0.02,
            retry_window_s=2.0,
        ),
        None,
    )


def _episode(root: Path, task, policy, *, options=None, max_turns=50, structured="none", skill="# skill", retries=6):
    from scripted_server import ScriptedServer

    from skillopt_ray.llm.gateway import LLMHandle

    bodies: list[dict] = []

    def recording(body, headers):
        bodies.append(body)
        return policy(len(bodies) - 1, body)

    srv = ScriptedServer(policy=recording)
    srv.start()
    try:
        bench = AlfWorldBenchmark({"data_dir": str(root), "options": options or {}})
        gw = _gateway(srv.base_url, structured, retries)

        async def go():
            try:
                return await bench.run_episode(task, skill, LLMHandle(gw), EpisodeContext("t", False, max_turns, 2))
            finally:
                await gw.close()

        return asyncio.run(go()), bodies, srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def game(alfworld_root):
    task = walk_split(alfworld_root, "train")[0]
    from skillopt_envs.alfworld.game import read_walkthrough

    return task, read_walkthrough(task.payload["gamefile"])


def test_episode_record_and_prompts_over_http(alfworld_root, game):
    task, walk = game

    def policy(i, body):  # uppercase replies with reasoning; the walkthrough in order
        return f"<think>step {i} of the plan</think>\n<action>{walk[i].upper()}</action>" if i < len(walk) else ""

    r, bodies, _ = _episode(alfworld_root, task, policy)
    assert (
        r.hard == 1.0 and r.soft == 1.0 and r.fail_reason == ""
    )  # lowercased commands win (uppercase ones do nothing)
    assert r.n_turns == len(walk) == len(bodies) == len(r.trajectory)
    first_obs = bodies[0]["messages"][1]["content"]
    goal = first_obs.split("Your task is to: ", 1)[1].split("\n")[0].strip()
    assert r.task_description == goal and r.task_type == task_type_of(task.payload["gamefile"]) == task.task_type
    assert r.task_type in TASK_TYPES
    for i, step in enumerate(r.trajectory):
        assert set(step) >= {"step", "action", "reasoning", "model_response", "env_feedback", "reward", "done"}
        assert step["step"] == i and step["action"] == walk[i].upper()  # as written, not lowercased
        assert step["reasoning"] == f"step {i} of the plan" and step["model_response"].endswith(
            f"<action>{walk[i].upper()}</action>"
        )
        assert step["done"] == (i == len(walk) - 1)
    assert r.trajectory[-1]["reward"] == 1.0
    assert "target_system_prompt" not in r.info and "target_user_prompt" not in r.info  # no target prompts for ALFWorld
    # the second request carries record 1 = (the whole first observation, the lowercased first command)
    second = bodies[1]["messages"][1]["content"]
    assert "[Observation 1: '" in second and f"Action 1: '{walk[0]}']" in second
    assert r.trajectory[0]["env_feedback"] in second  # the current observation is the raw feedback
    # a remote endpoint gets no response_format, and no request mentions `help` as an admissible action
    assert all("response_format" not in b for b in bodies)
    assert all("'help'" not in b["messages"][1]["content"] for b in bodies)


def test_empty_and_untagged_replies_play_look(alfworld_root, game):
    task, _ = game
    replies = ["", "I am not sure what to do.", "<think>hmm</think><action>Look</action>"]
    r, bodies, _ = _episode(alfworld_root, task, lambda i, b: replies[i], max_turns=3)
    assert [s["action"] for s in r.trajectory] == ["look", "look", "Look"]
    assert [s["model_response"] for s in r.trajectory] == replies
    assert r.fail_reason == "Timeout after 3 steps" and r.n_turns == 3 and r.hard == 0.0
    look = r.trajectory[0]["env_feedback"]
    assert all(s["env_feedback"] == look for s in r.trajectory)  # all three played `look`
    assert "Action 2: 'look'" in bodies[2]["messages"][1]["content"]


def test_engine_move_limit_ends_the_episode_as_the_reference_reports_it(alfworld_root, game):
    """quirk: textworld-move-limit - TextWorld's own 50-move limit sets `done` on the 50th action, before the
    loop's timeout check."""
    task, _ = game
    r, _, _ = _episode(alfworld_root, task, lambda i, b: "<action>look</action>", max_turns=50)
    assert r.n_turns == 50 and r.fail_reason == "Episode ended without completing the task"
    assert r.trajectory[-1]["done"] is True and not any(s["done"] for s in r.trajectory[:-1])
    r, _, _ = _episode(
        alfworld_root, task, lambda i, b: "<action>look</action>", max_turns=50, options={"engine_step_limit": 0}
    )
    assert r.n_turns == 50 and r.fail_reason == "Timeout after 50 steps"


def test_constrained_decoding_sends_the_admissible_enum(alfworld_root, game):
    task, walk = game
    r, bodies, _ = _episode(
        alfworld_root,
        task,
        lambda i, b: json.dumps({"action": walk[i]}),
        structured="json_schema",
        options={"constrained_actions": "on"},
    )
    assert r.hard == 1.0
    fmt = bodies[0]["response_format"]
    enum = fmt["json_schema"]["schema"]["properties"]["action"]["enum"]
    assert "help" not in enum and walk[0] in enum


def test_api_error_is_an_infra_error_never_an_action(alfworld_root, game):
    from scripted_server import Fault, ScriptedServer

    from skillopt_ray.llm.types import LLMError

    task, _ = game
    srv = ScriptedServer(policy=lambda body, headers: "<action>look</action>")
    srv.start()
    srv.inject(*[Fault(status=500) for _ in range(50)])
    try:
        from skillopt_ray.llm.gateway import LLMHandle

        bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {}})
        gw = _gateway(srv.base_url, retries=1)

        async def go():
            try:
                return await bench.run_episode(task, "# skill", LLMHandle(gw), EpisodeContext("t", False, 5, 2))
            finally:
                await gw.close()

        with pytest.raises(
            LLMError
        ):  # the env pool turns this into an infra-error result (tests/engine/test_envpool.py)
            asyncio.run(go())
    finally:
        srv.stop()
