"""Calls in flight at a SIGKILL: journaled before they are sent, so the next session counts them as lost (with
their estimated tokens), shows them, and the budget caps count them. Before the journal, the endpoint answered
such calls to the dead process and no ledger ever showed them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from skillopt_ray.cli.report import lost_line
from skillopt_ray.config import BudgetConfig, LLMRoleConfig, PriceConfig
from skillopt_ray.llm.ledger import Ledger, journal_path, read_journal
from skillopt_ray.llm.types import BudgetExceeded

REPO = Path(__file__).resolve().parents[2]
N = 4  # concurrent calls in flight at the kill
MAX_TOKENS = 300

# N concurrent paid calls through the real gateway; the server holds every answer, so all N are in flight.
_CLIENT = """
import asyncio, sys
from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway
from skillopt_envs.chat import ChatRequest
url, d, n, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
role = dict(provider="openai", model="m", base_url=url, api_key_env="SKILLOPT_TEST_KEY", timeout_s=60.0,
            max_concurrency=n, max_tokens=max_tokens)
cfg = LLMConfig(backend="compatible", target=LLMRoleConfig(**role), optimizer=LLMRoleConfig(**role))
gw = Gateway(cfg, d + "/llm_cache.sqlite", d + "/ledger.json")
async def main():
    print("ready", flush=True)
    await asyncio.gather(*(gw.chat(ChatRequest("optimizer", "merge", [{"role": "user", "content": "x" * (400 + i)}],
                                               key=f"k{i}")) for i in range(n)))
asyncio.run(main())
"""


def _prompt_est(i: int) -> int:
    return (400 + i) // 4  # the gateway's estimate: prompt characters / 4


@pytest.mark.slow  # repeated SIGKILLs of whole processes: over 20 s
def test_calls_in_flight_at_a_sigkill_are_lost_counted_and_capped(tmp_path):
    srv = ScriptedServer(policy=lambda body, headers: "{}", latency_s=60.0)  # answers held past the kill
    srv.start()
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO), SKILLOPT_TEST_KEY="sk-test")
        p = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, srv.base_url, str(tmp_path), str(N), str(MAX_TOKENS)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while srv.state.in_flight < N and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.state.in_flight == N  # the endpoint has all N requests: they would be answered, and billed
        p.send_signal(signal.SIGKILL)
        p.wait()
    finally:
        srv.stop()
    j = journal_path(str(tmp_path / "ledger.json"))
    entry = read_journal(j)["optimizer/merge"]
    budget = LLMRoleConfig(max_tokens=MAX_TOKENS).reply_budget(None)
    assert (entry.calls, entry.lost) == (0, N)
    assert entry.lost_tokens_est == sum(_prompt_est(i) + budget for i in range(N))

    # the next session: the lost calls are reported once, kept through compaction, priced and counted by the caps
    prices = {"m": PriceConfig(input_per_mtok=1.0, output_per_mtok=2.0)}
    led = Ledger(prices, BudgetConfig(max_calls=N + 2), None, journal=j)
    assert led.lost_at_open == N
    led.record("optimizer", "merge", "m", 10, 5, led.begin("optimizer", "merge", "m", 10, 5))
    led.check_budget()  # 1 answered + 4 lost < 6
    led.record("optimizer", "merge", "m", 10, 5, led.begin("optimizer", "merge", "m", 10, 5))
    with pytest.raises(
        BudgetExceeded,
        match=rf"{N + 2} calls >= llm.budget.max_calls={N + 2} \({N} of them sent before a kill or a full disk",
    ):
        led.check_budget()
    t = led.totals()
    assert (t["calls"], t["lost"], t["lost_tokens_est"]) == (2, N, entry.lost_tokens_est)
    expected_cost = sum(_prompt_est(i) * 1.0 + budget * 2.0 for i in range(N)) / 1e6
    assert t["lost_cost_usd_est"] == pytest.approx(expected_cost)
    led.close()
    again = Ledger(prices, BudgetConfig(), None, journal=j)
    assert again.lost_at_open == 0 and again.totals()["lost"] == N  # counted once, not again at every open
    again.close()
    line = lost_line(t)
    assert (
        f"plus {N} calls sent before a kill or a full disk whose replies were lost (~{entry.lost_tokens_est} tokens"
        in line
    )


def test_token_and_cost_caps_count_the_estimates_of_lost_calls(tmp_path):
    j = str(tmp_path / "ledger.journal.jsonl")
    led = Ledger({}, BudgetConfig(), None, journal=j)
    led.begin("target", "rollout", "m", 700, 300)  # sent, then the process dies: never settled
    os.close(led._journal_fd)  # what a SIGKILL leaves: no outcome line
    led2 = Ledger({}, BudgetConfig(max_tokens=1000), None, journal=j)
    with pytest.raises(
        BudgetExceeded, match=r"1000 tokens >= llm.budget.max_tokens=1000 \(~1000 estimated for 1 calls"
    ):
        led2.check_budget()
    led2.close()


def test_settled_and_cancelled_calls_are_not_lost_and_lines_carry_times(tmp_path):
    j = str(tmp_path / "ledger.journal.jsonl")
    led = Ledger({}, BudgetConfig(), None, journal=j)
    a = led.begin("target", "rollout", "m", 10, 10)
    b = led.begin("target", "rollout", "m", 10, 10)
    c = led.begin("optimizer", "analyst", "m", 10, 10)
    led.record("target", "rollout", "m", 3, 2, a)
    led.record_error("target", "rollout", b)
    led.settle(c)  # cancelled by its caller
    led.settle(a)  # already settled: no second line
    led.close()
    lines = [json.loads(x) for x in Path(j).read_text().splitlines()]
    assert len(lines) == 6 and all("t" in x for x in lines)
    assert sum(1 for x in read_journal(j).values() for _ in range(x.lost)) == 0
    led2 = Ledger({}, BudgetConfig(), None, journal=j)
    assert led2.lost_at_open == 0 and led2.entries["target/rollout"].calls == 1
    led2.close()
