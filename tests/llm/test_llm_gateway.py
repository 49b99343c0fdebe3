"""The LLM layer through the real openai client against a scripted server on localhost."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpers import _echo  # noqa: F401 - shared with other test files
from scripted_server import Fault, ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.types import BudgetExceeded, CacheMiss, LLMRequestRejected, LLMUnavailable, MalformedOutput


def make_cfg(url: str, **kw) -> LLMConfig:
    role = dict(
        provider="openai",
        model="m",
        base_url=url,
        api_key_env="SKILLOPT_TEST_KEY",
        timeout_s=2.0,
        max_concurrency=kw.pop("conc", 8),
    )
    cfg = LLMConfig(
        backend="compatible",
        target=LLMRoleConfig(**role),
        optimizer=LLMRoleConfig(**role),
        retry_base_s=0.05,
        retry_max_s=0.2,
        retry_window_s=kw.pop("window", 10.0),
        max_retries=kw.pop("retries", 4),
        **kw,
    )
    return cfg


def req(i=0, stage="analyst"):
    return ChatRequest("optimizer", stage, [{"role": "user", "content": f"q{i}"}], key=f"k{i}")


def test_retries_on_5xx_and_429_honouring_retry_after(server, tmp_path, monkeypatch, run):
    monkeypatch.setenv("SKILLOPT_TEST_KEY", "sk-secret-value")
    server.inject(Fault(500), Fault(429, retry_after=1.0), Fault(503))
    gw = Gateway(make_cfg(server.base_url), str(tmp_path / "c.sqlite"))
    t0 = time.monotonic()
    res = run(gw.chat(req()))
    assert json.loads(res.content)["answer"] == "q0"
    assert server.state.attempts == 4
    assert time.monotonic() - t0 >= 1.0  # Retry-After honoured
    assert gw.stats()["retries"]["optimizer"] == 3


def test_timeouts_are_retried(server, tmp_path, run):
    server.inject(Fault(hang_s=3.0, status=200, malformed=True))  # hangs past the 2 s client timeout
    gw = Gateway(make_cfg(server.base_url), None)
    res = run(gw.chat(req()))
    assert json.loads(res.content)["answer"] == "q0"


@pytest.mark.parametrize("status", [401, 404])
def test_non_retryable_errors_fail_fast_naming_endpoint_and_model(server, tmp_path, status, monkeypatch, run):
    monkeypatch.setenv("SKILLOPT_TEST_KEY", "sk-secret-value")
    server.inject(Fault(status))
    gw = Gateway(make_cfg(server.base_url), None)
    with pytest.raises(LLMRequestRejected) as e:
        run(gw.chat(req()))
    assert server.state.attempts == 1  # failed at the first answer: not retried
    msg = str(e.value)
    assert f"HTTP {status}" in msg and server.base_url in msg and "'m'" in msg
    assert "sk-secret-value" not in msg


def test_dead_endpoint_stops_within_the_retry_window(tmp_path, run):
    from skillopt_ray.llm.embedded import free_port

    gw = Gateway(make_cfg(f"http://127.0.0.1:{free_port()}/v1", window=2.0, retries=50), None)
    t0 = time.monotonic()
    with pytest.raises(LLMUnavailable) as e:
        run(gw.chat(req()))
    assert time.monotonic() - t0 < 2.0 + 20  # the 2 s window, not 50 retries with backoff (a busy machine is slower)
    assert "unavailable" in str(e.value) and "127.0.0.1" in str(e.value)


def test_json_reask_then_malformed(server, tmp_path, run):
    gw = Gateway(make_cfg(server.base_url), None)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    server.inject(Fault(200, malformed=True))
    out = run(gw.chat_json(req(1), schema))
    assert out.reasked and out.errors and set(out.data) == {"answer"}
    assert "could not be used" in out.data["answer"]  # the re-ask carried the error back
    server.inject(Fault(200, malformed=True), Fault(200, malformed=True))
    with pytest.raises(MalformedOutput):
        run(gw.chat_json(req(2), schema))


def test_json_extraction_handles_fences_and_think_blocks():
    from skillopt_envs.chat import extract_json

    assert extract_json('<think>{"no": 1}</think>Sure:\n```json\n{"a": [1, 2]}\n```') == {"a": [1, 2]}
    assert extract_json('noise {"b": 2} tail') == {"b": 2}


def test_record_then_replay_offline_and_miss_fails(server, tmp_path, run):
    cache = str(tmp_path / "cache.sqlite")
    gw = Gateway(make_cfg(server.base_url), cache)
    first = [run(gw.chat(req(i))).content for i in range(3)]
    run(gw.close())
    n = server.state.attempts
    server.stop()  # nothing is listening now
    cfg = make_cfg(server.base_url)
    cfg.cache_mode = "replay"
    gw2 = Gateway(cfg, cache)
    again = [run(gw2.chat(req(i))).content for i in range(3)]
    assert again == first and server.state.attempts == n
    assert gw2.ledger.totals()["cache_hits"] == 3 and gw2.ledger.totals()["calls"] == 0
    with pytest.raises(CacheMiss):
        run(gw2.chat(req(99)))


def test_sample_key_keeps_repeated_samples_distinct(server, tmp_path, run):
    gw = Gateway(make_cfg(server.base_url), str(tmp_path / "c.sqlite"))
    base = [{"role": "user", "content": "same"}]
    run(gw.chat(ChatRequest("target", "rollout", base, key="a")))
    run(gw.chat(ChatRequest("target", "rollout", base, key="b")))
    run(gw.chat(ChatRequest("target", "rollout", base, key="a")))
    assert server.state.attempts == 2


def test_ledger_matches_server_token_counts_and_budget_caps(server, tmp_path, run):
    cfg = make_cfg(server.base_url)
    cfg.budget.max_calls = 5
    gw = Gateway(cfg, None)

    async def many():
        return await asyncio.gather(*(gw.chat(req(i, stage="merge" if i % 2 else "analyst")) for i in range(5)))

    run(many())
    t = gw.ledger.totals()
    assert t["prompt_tokens"] == server.state.prompt_tokens and t["completion_tokens"] == server.state.completion_tokens
    assert gw.ledger.entries["optimizer/merge"].calls == 2 and gw.ledger.entries["optimizer/analyst"].calls == 3
    with pytest.raises(BudgetExceeded) as e:
        run(gw.chat(req(42)))
    assert "max_calls" in str(e.value) and "resume" in str(e.value)


def test_concurrent_calls_never_overshoot_max_calls(tmp_path, run):
    """20 calls at once against a cap of 5: calls still in flight count, so exactly 5 reach the endpoint."""
    srv = ScriptedServer(policy=_echo, latency_s=0.2)
    srv.start()
    try:
        cfg = make_cfg(srv.base_url, conc=32)
        cfg.budget.max_calls = 5
        gw = Gateway(cfg, None)

        async def many():
            return await asyncio.gather(*(gw.chat(req(i)) for i in range(20)), return_exceptions=True)

        out = run(many())
        refused = [r for r in out if isinstance(r, BudgetExceeded)]
        assert len(refused) == 15 and all("still in flight" in str(r) or "5 calls" in str(r) for r in refused)
        assert srv.state.attempts == 5 and gw.ledger.totals()["calls"] == 5 and gw.ledger.in_flight == 0
    finally:
        srv.stop()


def test_concurrent_calls_never_cross_a_token_cap_by_the_servers_count(tmp_path, run):
    """40 calls at once against a token cap: each is admitted only while what is spent plus the worst case of the
    calls in flight and its own stays under the cap, the last ones with their completion limit clamped to what
    remains; below a minimal reply the run stops naming the cap. The server's own count never passes the cap (it
    ended 50 tokens past a 5,000-token cap when a call alone was always admitted)."""
    srv = ScriptedServer(policy=_echo, latency_s=0.05)
    srv.start()
    try:
        cfg = make_cfg(srv.base_url, conc=64)
        cfg.target.max_tokens = cfg.optimizer.max_tokens = 40
        cfg.budget.max_tokens = 100
        gw = Gateway(cfg, None)

        async def many():
            return await asyncio.gather(*(gw.chat(req(i)) for i in range(40)), return_exceptions=True)

        out = run(many())
        refused = [r for r in out if isinstance(r, BudgetExceeded)]
        assert refused and all("llm.budget.max_tokens=100" in str(r) for r in refused)
        t = gw.ledger.totals()
        served = srv.state.prompt_tokens + srv.state.completion_tokens
        assert 50 < served == t["tokens"] <= 100, t
        assert t["calls"] > 3 and gw.ledger.in_flight == 0 and gw.ledger.held() == (0, 0.0)
    finally:
        srv.stop()


def test_the_last_call_under_a_cap_asks_only_for_what_remains(tmp_path, run):
    """One call at a time: each later call's prompt bound is calibrated on the server's counts; the completion
    limit of the call that would cross the cap is cut to what remains (the request says so), and the run stops
    naming the cap before the server's count passes it."""
    bodies: list[dict] = []

    def record(body, headers):
        bodies.append(body)
        return "word " * 20  # 25 tokens by the scripted count

    srv = ScriptedServer(policy=record)
    srv.start()
    try:
        cfg = make_cfg(srv.base_url)
        cfg.target.max_tokens = cfg.optimizer.max_tokens = 200
        cfg.budget.max_tokens = 700
        gw = Gateway(cfg, None)
        stopped = ""
        for i in range(40):
            try:
                run(gw.chat(req(i)))
            except BudgetExceeded as e:
                stopped = str(e)
                break
        asked = [b.get("max_tokens") for b in bodies]
        assert asked[0] == 200 and min(asked) < 200, asked  # the last calls asked for what remained
        assert "llm.budget.max_tokens=700" in stopped
        assert srv.state.prompt_tokens + srv.state.completion_tokens <= 700
    finally:
        srv.stop()


def test_ledger_holds_clamp_to_what_remains_wait_for_calls_in_flight_and_release():
    from skillopt_ray.config import BudgetConfig
    from skillopt_ray.llm.ledger import MIN_COMPLETION, Ledger

    led = Ledger({}, BudgetConfig(max_tokens=100))
    first = led.hold("m", 50, 80)  # 50 + 80 would cross 100: admitted alone with its reply limit cut to 50
    assert first is not None and first[1] == 50 and led.in_flight == 1
    assert led.hold("m", 10, 10) is None  # would cross the cap with the call in flight: waits
    led.release(first[0])
    led.release(first[0])  # twice is once
    assert led.in_flight == 0 and led.held() == (0, 0.0)
    a, b = led.hold("m", 20, 20), led.hold("m", 20, 20)
    assert a is not None and b is not None and led.hold("m", 20, 20) is None  # 80 held + 40 > 100
    led.release(a[0])
    led.release(b[0])
    with pytest.raises(BudgetExceeded, match="llm.budget.max_tokens=100"):
        led.hold("m", 100 - MIN_COMPLETION + 1, 40)  # not even a minimal reply fits
    led.record("optimizer", "analyst", "m", 90, 10)  # spent: 100 = the cap
    with pytest.raises(BudgetExceeded, match="llm.budget.max_tokens=100"):
        led.hold("m", 1, 1)


def test_concurrency_limit_holds(tmp_path, run):
    srv = ScriptedServer(policy=_echo, latency_s=0.2)
    srv.start()
    try:
        gw = Gateway(make_cfg(srv.base_url, conc=3), None)

        async def many():
            return await asyncio.gather(*(gw.chat(req(i)) for i in range(12)))

        run(many())
        assert srv.state.peak_in_flight == 3
    finally:
        srv.stop()


def test_requests_per_minute_window():
    from skillopt_ray.llm.ratelimit import EndpointLimiter

    async def go():
        lim = EndpointLimiter(10, requests_per_minute=3)
        for _ in range(3):
            async with lim:
                await lim.acquire_window(10)
        async with lim:
            await asyncio.wait_for(lim.acquire_window(10), timeout=0.3)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(go())


def test_response_format_follows_the_role_mode_and_asks_a_remote_gateway_once(tmp_path, run):
    from skillopt_ray.llm.gateway import LLMHandle

    cfg = make_cfg("http://127.0.0.1:9/v1")
    cfg.target.structured_output = "json_schema"
    cfg.optimizer.structured_output = "none"
    gw = Gateway(cfg, None)
    schema = {"type": "object"}
    local = LLMHandle(gw)
    assert run(local.response_format_for("target", schema, "action")) == {
        "type": "json_schema",
        "json_schema": {"name": "action", "schema": schema},
    }
    assert run(local.response_format_for("optimizer", schema, "x")) is None

    class Method:  # what a Ray actor method looks like to LLMHandle: `.remote(...)` returns an awaitable
        def __init__(self, fn):
            self.fn, self.calls = fn, []

        def remote(self, *args):
            self.calls.append(args)
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(self.fn(*args))
            return fut

    class Remote:
        chat = Method(None)
        structured_output_mode = Method(gw.structured_output_mode)

    remote = Remote()
    handle = LLMHandle(remote)

    async def turns():
        return [await handle.response_format_for("target", schema, "action") for _ in range(5)]

    assert all(f["type"] == "json_schema" for f in run(turns()))
    assert remote.structured_output_mode.calls == [("target",)]  # one round trip per role, not one per turn
    from skillopt_ray.llm.types import LLMConfigError

    with pytest.raises(LLMConfigError, match="unknown role"):
        gw.structured_output_mode("critic")
