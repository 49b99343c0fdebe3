"""The length guard (llm.optimizer.context_tokens): off by default, so analysts see whole trajectories as the
reference does; on (the embedded preset), optimizer prompts are cut, visibly, until they fit the context. Also the
one-line error an endpoint's "prompt too long" becomes."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from skillopt_envs.base import EpisodeResult
from skillopt_envs.chat import JsonResult

from skillopt_ray import cli, prompts
from skillopt_ray.config import ConfigError, LLMRoleConfig, validate
from skillopt_ray.llm.context import context_advice, context_overflow
from skillopt_ray.prompts.length_guard import FLOOR, LengthGuard, estimate_tokens
from skillopt_ray.prompts.render import comparison_text, minibatch_text
from skillopt_ray.stages.context import OptimizerContext
from skillopt_ray.stages.reflect import reflect

SKILL = "# Spreadsheet skill\n\nUse openpyxl; write the answer cells as values.\n"
CUT = "characters cut by the length guard …]"


def sheet_result(i: int, turns: int = 30, cells: int = 58) -> EpisodeResult:
    """A SpreadsheetBench-shaped failure at paper size: 30 turns of ~1.5k-character scripts and ~3k-character errors."""
    conv = []
    for t in range(turns):
        conv.append(
            {
                "role": "assistant",
                "content": f"```python\n# task {i} turn {t} START\n" + "ws['B2'] = 1\n" * 110 + f"# turn {t} END\n```",
            }
        )
        conv.append(
            {
                "role": "user",
                "content": f"Execution error (turn {t}) HEAD\n"
                + "  File '/sandbox/s.py', line 3\n" * 100
                + f"NameError: name 'x{t}' is not defined TAIL",
            }
        )
    verification = (
        f"[POST-EXECUTION VERIFICATION] task {i}\n## Eval Result (case 1): FAIL\n## Output Verification\n"
        + "".join(f"  Sheet1!B{r}: got=None, expected={r * 7.25} ✗\n" for r in range(2, 2 + cells))
    )
    conv.append({"role": "system", "content": verification})
    return EpisodeResult(
        task_id=f"sheet-{i}",
        task_type="cell_level",
        fail_reason=f"eval-mismatch: value@Sheet1!B2: gt=14.5 pred=None ({i})",
        n_turns=turns,
        trajectory=conv,
        task_description=f"Fill column B of Sheet1 (task {i})",
        info={
            "target_system_prompt": "You write Python for spreadsheets.\n" + SKILL * 20,
            "target_user_prompt": f"# Instruction\nFill column B (task {i})\n" + "context line\n" * 60,
            "analyst_blocks": [
                [
                    "Spreadsheet Preview",
                    "## Sheet: Sheet1\n" + "".join(f"| {r} | {r * 3.5} | x{r} |\n" for r in range(200)),
                ]
            ],
        },
    )


def alfworld_result(i: int, steps: int = 50) -> EpisodeResult:
    conv = [
        {
            "step": s,
            "action": f"go to cabinet {s}",
            "reasoning": f"I should look in cabinet {s} for the mug (task {i}).",
            "env_feedback": f"You arrive at cabinet {s}. On the cabinet {s}, you see a plate {s}, and a fork {s}.",
        }
        for s in range(steps)
    ]
    return EpisodeResult(
        task_id=f"alf-{i}",
        task_type="pick_and_place",
        fail_reason="Timeout after 50 steps",
        n_turns=steps,
        trajectory=conv,
        task_description=f"put a mug in the coffeemachine ({i})",
    )


def analyst_parts(kind: str = "failure", k: int = 8):
    system = prompts.analyst_system(kind, "patch", "spreadsheetbench", False, "both")

    def user_for(text: str) -> str:
        return prompts.analyst_user(
            skill=SKILL, mode="patch", max_budget=4, step_buffer="", meta_skill="", kind=kind, trajectories=text, k=k
        )

    return system, user_for


def embedded_optimizer() -> LLMRoleConfig:
    obj = cli.compose(["+experiment=spreadsheetbench", "+smoke=tiny"])  # llm=embedded is the default
    return obj.llm.optimizer


def guard_for(context_tokens: int) -> LengthGuard:
    """The guard of an embedded-like optimizer (512-token replies) with this window."""
    return LengthGuard.for_role(LLMRoleConfig(provider="embedded", max_tokens=512, context_tokens=context_tokens))


# ---------- (a) off by default: a paper-size trajectory stays whole ----------


@pytest.mark.parametrize("preset", ["paper", "openai", "azure", "compatible"])
def test_remote_presets_leave_the_guard_off(preset):
    obj = cli.compose(["+experiment=spreadsheetbench", f"llm={preset}"])
    assert obj.llm.optimizer.context_tokens is None and not LengthGuard.for_role(obj.llm.optimizer).enabled


def test_by_default_a_paper_size_minibatch_reaches_the_analyst_whole():
    results = [sheet_result(i) for i in range(8)]  # the paper's minibatch of 8
    system, user_for = analyst_parts()
    whole = user_for(minibatch_text(results))
    assert estimate_tokens(whole) > 200_000  # far beyond any context the guard would protect
    assert LengthGuard.for_role(LLMRoleConfig()).analyst_user(results, system, user_for) == whole
    assert CUT not in whole

    seen = []

    class FakeLLM:
        async def chat_json(self, req, schema, name):
            seen.append(req.messages[1]["content"])
            return JsonResult({"batch_size": 8, "patch": {"reasoning": "r", "edits": []}}, "")

    asyncio.run(
        reflect(
            OptimizerContext(
                FakeLLM(),
                skill=SKILL,
                mode="patch",
                env="spreadsheetbench",
                minibatch_size=8,
                batch_seed=1,
                max_budget=4,
                step_buffer="",
                meta_skill="",
                failure_only=False,
                skill_aware=False,
                appendix_source="both",
                key="t",
            ),
            results,
        )
    )  # no guard given: the stage's default
    assert len(seen) == 1 and CUT not in seen[0]
    for r in results:  # every turn of every trajectory, whole
        for e in r.trajectory:
            assert e["content"] in seen[0]


def test_by_default_the_comparison_is_whole():
    pairs = [_pair(i) for i in range(4)]
    user_for = lambda c: prompts.slow_update_user(prev_skill=SKILL, curr_skill=SKILL, prev_guidance="", comparison=c)  # noqa: E731
    assert LengthGuard().comparison_user(pairs, "sys", user_for) == user_for(comparison_text(pairs))


# ---------- (b) on: the prompt fits, cut where it is marked ----------


def test_the_embedded_preset_turns_the_guard_on_within_its_8192_token_slot():
    role = embedded_optimizer()
    assert role.context_tokens == 4096 and role.max_tokens == 512  # half the slot, for speed (conf/llm/embedded.yaml)
    assert LengthGuard.for_role(role).prompt_tokens == int((4096 - 512) * 0.9)


@pytest.mark.parametrize(
    "ctx,turns,cells", [(4096, 3, 8), (8192, 3, 58), (8192, 30, 58)]
)  # the smoke run's size; paper size
def test_the_guard_keeps_the_analyst_prompt_under_the_limit_and_marks_every_cut(ctx, turns, cells):
    guard, k = guard_for(ctx), 2  # the smoke run's minibatch
    results = [sheet_result(i, turns, cells) for i in range(k)]
    system, user_for = analyst_parts(k=k)
    user = guard.analyst_user(results, system, user_for)
    assert estimate_tokens(system) + estimate_tokens(user) <= guard.prompt_tokens
    assert CUT in user
    assert (
        user.startswith(f"## Current Skill\n{SKILL}")
        and "## Edits Budget\nL=4" in user
        and f"## Failed Trajectories ({k} total)" in user
    )
    for i, r in enumerate(results, start=1):
        assert f"### Trajectory {i} (id={r.task_id})" in user  # headers whole
        assert f"Failure reason: {r.fail_reason}" in user and f"Steps: {r.n_turns}" in user
        assert "[verification] " + r.trajectory[-1]["content"] in user  # the verification block whole
    if (ctx, turns) == (8192, 3):  # room for every turn: each one keeps its start and its end
        assert all(f"turn {t} START" in user and f"x{t}' is not defined TAIL" in user for t in range(turns))
        assert "entries cut" not in user
    else:  # not room enough for every entry even at the smallest cut: whole entries from the middle give way, counted
        assert "conversation entries cut by the length guard" in user and "turn 0 START" in user


def test_verification_blocks_are_cut_last_and_marked():
    """Eight paper-size failures: their verification blocks alone exceed the window, so they are cut too, marked."""
    guard = guard_for(8192)
    results = [sheet_result(i) for i in range(8)]
    system, user_for = analyst_parts(k=8)
    user = guard.analyst_user(results, system, user_for)
    assert estimate_tokens(system) + estimate_tokens(user) <= guard.prompt_tokens
    for i, r in enumerate(results, start=1):
        assert f"### Trajectory {i} (id={r.task_id})" in user and f"Failure reason: {r.fail_reason}" in user
        assert f"[verification] [POST-EXECUTION VERIFICATION] task {i - 1}\n## Eval Result (case 1): FAIL" in user
    assert user.count("[verification] ") == 8 and user.count(CUT) >= 8


def test_a_minibatch_too_big_for_any_cut_goes_as_small_as_it_gets():
    """Eight paper-size failures in 4096 tokens: even headers and cut verification blocks pass it. The prompt goes
    out as small as the guard can make it (the embedded slot itself holds 8192); an endpoint that refuses it names the fix."""
    guard = guard_for(4096)
    results = [sheet_result(i) for i in range(8)]
    system, user_for = analyst_parts(k=8)
    user = guard.analyst_user(results, system, user_for)
    assert (
        not guard.fits(system, user)
        and estimate_tokens(user) < estimate_tokens(user_for(minibatch_text(results))) // 20
    )
    assert all(f"### Trajectory {i} (id=sheet-{i - 1})" in user for i in range(1, 9))


def test_many_short_steps_give_way_from_the_middle_with_a_count():
    guard = guard_for(8192)
    results = [alfworld_result(i) for i in range(8)]
    system, user_for = analyst_parts(k=8)
    assert guard.analyst_user(results, system, user_for) != user_for(minibatch_text(results))
    user = guard.analyst_user(results, system, user_for)
    assert estimate_tokens(system) + estimate_tokens(user) <= guard.prompt_tokens
    assert "[length guard] [… " in user and "conversation entries cut by the length guard" in user
    assert (
        "[step 0 action] go to cabinet 0" in user and "[step 49 action] go to cabinet 49" in user
    )  # first and last kept


def test_a_prompt_that_fits_is_not_touched():
    guard = LengthGuard.for_role(embedded_optimizer())
    results = [sheet_result(i, turns=1) for i in range(2)]
    for r in results:
        r.info = {"target_user_prompt": "Fill column B"}
        r.trajectory = [
            {"role": "assistant", "content": "ws['B2'] = 1"},
            {"role": "system", "content": "[POST-EXECUTION VERIFICATION] FAIL"},
        ]
    system, user_for = analyst_parts(k=2)
    assert guard.analyst_user(results, system, user_for) == user_for(minibatch_text(results))


def _pair(i: int, cells: int = 58) -> dict:
    r = sheet_result(i, turns=8, cells=cells)
    from skillopt_ray.prompts.render import conversation_text

    side = {"hard": 0, "soft": 0.0, "predicted_answer": "N/A", "fail_reason": r.fail_reason}
    return {
        "id": r.task_id,
        "task": r.task_description,
        "category": "persistent_fail",
        "prev": side,
        "curr": side,
        "prev_trajectory": conversation_text(r.trajectory),
        "curr_trajectory": conversation_text(r.trajectory),
    }


@pytest.mark.parametrize("ctx,cells", [(4096, 8), (8192, 58)])
def test_the_guard_keeps_the_comparison_under_the_limit_and_the_verification_whole(ctx, cells):
    guard = guard_for(ctx)
    pairs = [_pair(i, cells) for i in range(2)]
    system = prompts.system_prompt("slow_update")
    user_for = lambda c: prompts.slow_update_user(prev_skill=SKILL, curr_skill=SKILL, prev_guidance="", comparison=c)  # noqa: E731
    user = guard.comparison_user(pairs, system, user_for)
    assert estimate_tokens(system) + estimate_tokens(user) <= guard.prompt_tokens
    assert CUT in user and "## Longitudinal Comparison Summary" in user
    for p in pairs:
        tail = p["curr_trajectory"][p["curr_trajectory"].index("[verification]") :]
        assert user.count(tail) == 2  # previous and current trajectory: both verification blocks whole
        assert "turn 0 START" in user


def test_comparison_verification_blocks_are_cut_last_and_marked():
    guard = guard_for(4096)
    pairs = [_pair(i) for i in range(2)]  # 58 verification cells each: the two blocks alone pass the window
    system = prompts.system_prompt("meta_skill")
    user_for = lambda c: prompts.meta_skill_user(prev_skill=SKILL, curr_skill=SKILL, prev_meta="", comparison=c)  # noqa: E731
    user = guard.comparison_user(pairs, system, user_for)
    assert estimate_tokens(system) + estimate_tokens(user) <= guard.prompt_tokens
    assert user.count("[verification] [POST-EXECUTION VERIFICATION] task") == 4 and user.count(CUT) >= 8


def test_estimate_counts_digits_one_by_one():
    assert estimate_tokens("1234567890") == 10 and estimate_tokens("abcd" * 10) == 10 and FLOOR > 100


# ---------- config and the endpoint's error ----------


def test_context_tokens_must_leave_room_for_the_reply():
    obj = cli.compose(["+experiment=searchqa", "llm=paper"])
    obj.llm.optimizer.context_tokens = 16384  # llm=paper asks 16384 completion tokens
    with pytest.raises(ConfigError, match="llm.optimizer.context_tokens=16384 leaves no room"):
        validate(obj)


@pytest.mark.parametrize(
    "status,err,message",
    [
        (400, {}, "request (9756 tokens) exceeds the available context size (8192 tokens), try increasing it"),
        (
            400,
            {"code": "context_length_exceeded"},
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens.",
        ),
        (400, {}, "The decoder prompt (length 5000) is longer than the maximum model length of 4096."),
        (
            422,
            {},
            "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 512 `max_new_tokens`",
        ),
    ],
)
def test_prompt_too_long_is_recognised(status, err, message):
    assert context_overflow(status, err, message)


def test_other_rejections_are_not_taken_for_a_long_prompt():
    assert not context_overflow(400, {}, "Unsupported parameter: 'temperature' is not supported with this model.")
    assert not context_overflow(401, {}, "maximum context length")


def test_advice_names_the_fix_per_role_and_guard():
    assert "set llm.optimizer.context_tokens" in context_advice("optimizer", LLMRoleConfig(provider="openai"))
    on = context_advice("optimizer", LLMRoleConfig(provider="embedded", context_tokens=8192))
    assert "lower llm.optimizer.context_tokens" in on and "llm.embedded.ctx_size / parallel" in on
    assert "env.max_turns" in context_advice("target", LLMRoleConfig(provider="embedded"))
    assert "\n" not in on


def test_an_endpoint_refusal_becomes_one_line_naming_the_fix():
    import httpx
    import openai

    from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint

    said = "request (9756 tokens) exceeds the available context size (8192 tokens), try increasing it"
    exc = openai.BadRequestError(
        said,
        response=httpx.Response(400, request=httpx.Request("POST", "http://127.0.0.1:9/v1")),
        body={"error": {"message": said, "type": "exceed_context_size_error"}},
    )

    async def message() -> str:
        ep = RoleEndpoint(
            "optimizer",
            LLMRoleConfig(provider="embedded", base_url="http://127.0.0.1:9/v1", context_tokens=8192),
            RetryPolicy(0, 1, 1, 10),
        )
        try:
            return ep._rejected(exc).message
        finally:
            await ep.close()

    text = asyncio.run(message())
    assert "\n" not in text and "9756 tokens" in text and "lower llm.optimizer.context_tokens" in text


# ---------- the real tokenizer ----------


@pytest.mark.slow
def test_a_guarded_prompt_fits_its_window_by_the_real_tokenizer(tmp_path):
    """The estimate is cautious enough: the embedded server's own count of a guarded prompt, plus the 512-token reply,
    stays within the window, for the preset's 4096 and for the whole 8192-token slot."""
    from skillopt_ray.llm.embedded import EmbeddedServer

    cases = [
        [sheet_result(i, 3, 8) for i in range(2)],
        [sheet_result(i) for i in range(2)],
        [sheet_result(i) for i in range(8)],
        [alfworld_result(i) for i in range(8)],
    ]
    srv = EmbeddedServer(ctx_size=2048, threads=1, parallel=1, log_path=tmp_path / "server.log")
    root = srv.start().rsplit("/v1", 1)[0]
    counts = {}
    try:
        for ctx in (embedded_optimizer().context_tokens, 8192):
            for n, results in enumerate(cases):
                system, user_for = analyst_parts(k=len(results))
                guard = guard_for(ctx)
                user = guard.analyst_user(results, system, user_for)
                if not guard.fits(
                    system, user
                ):  # 8 paper-size trajectories in 4096: headers and verification alone pass it
                    continue
                req = urllib.request.Request(
                    root + "/tokenize",
                    data=json.dumps({"content": system + "\n" + user}).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(req, timeout=60) as r:
                    counts[(ctx, n)] = len(json.load(r)["tokens"])
    finally:
        srv.stop()
    assert len(counts) == 7 and all(n + 512 <= ctx for (ctx, _), n in counts.items()), counts
