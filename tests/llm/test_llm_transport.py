"""Transport faults, cut-off replies and reasoning-model request parameters, through the real openai client
against the scripted server on 127.0.0.1 (and a raw socket that accepts and never answers)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from helpers import _echo, gateway, req, role
from scripted_server import Fault, ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray import cli
from skillopt_ray.config import LLMConfig
from skillopt_ray.llm.client import TransportFault, parse_completion, silent_endpoint_named_after
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.types import (
    LLMError,
    LLMRequestRejected,
    LLMUnavailable,
    MalformedOutput,
    ReplyFiltered,
    ReplyTruncated,
)

# --- reasoning-model endpoints ------------------------------------------------------------------------------------


def test_paper_preset_sends_what_a_reasoning_model_accepts(run, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    obj = cli.compose(["+experiment=searchqa", "llm=paper", "llm.target.model=gpt-5.4-mini"])
    assert (obj.llm.target.model, obj.llm.optimizer.model) == ("gpt-5.4-mini", "gpt-5.5")
    with ScriptedServer(policy=_echo, reasoning_model=True) as srv:
        for r in (obj.llm.target, obj.llm.optimizer):
            r.base_url = srv.base_url
        gw = Gateway(obj.llm, None)
        run(gw.chat(req(1, "target")))
        run(gw.chat(req(2, "optimizer", "analyst")))
        target_body, optimizer_body = list(srv.state.bodies)
        run(gw.close())
    for body, model in ((target_body, "gpt-5.4-mini"), (optimizer_body, "gpt-5.5")):
        assert body["model"] == model
        assert body["max_completion_tokens"] == 16384 and body["reasoning_effort"] == "medium"
        assert "max_tokens" not in body and "temperature" not in body and "response_format" not in body


def test_the_scripted_server_refuses_old_style_parameters_like_the_real_api(run):
    with ScriptedServer(policy=_echo, reasoning_model=True) as srv:
        gw = gateway(srv.base_url)  # temperature 0.0 and max_tokens: what every request sent before
        with pytest.raises(LLMRequestRejected) as e:
            run(gw.chat(req()))
        assert "HTTP 400" in e.value.message and "max_tokens" in e.value.message and srv.base_url in e.value.message
        gw = gateway(srv.base_url, role=dict(max_completion_tokens=100))  # max_tokens gone, temperature 0.0 still sent
        with pytest.raises(LLMRequestRejected, match="temperature"):
            run(gw.chat(req()))
        gw = gateway(srv.base_url, role=dict(max_completion_tokens=100, temperature=None, reasoning_effort="low"))
        assert json.loads(run(gw.chat(req(5))).content)["answer"] == "q5"
        assert (
            srv.state.bodies[-1]["max_completion_tokens"] == 100 and srv.state.bodies[-1]["reasoning_effort"] == "low"
        )
        assert srv.state.attempts == 3  # a 400 is not retried


def test_temperature_is_left_out_unless_set_and_remote_presets_set_none(server, run):
    run(gateway(server.base_url, role=dict(temperature=None)).chat(req(1)))
    assert "temperature" not in server.state.bodies[-1] and server.state.bodies[-1]["max_tokens"] == 64
    run(gateway(server.base_url, role=dict(temperature=0.3)).chat(req(2)))
    assert server.state.bodies[-1]["temperature"] == 0.3
    for preset in ("openai", "azure", "compatible", "paper"):
        obj = cli.compose(["+experiment=searchqa", f"llm={preset}"])
        assert obj.llm.target.temperature is None and obj.llm.optimizer.temperature is None, preset
    obj = cli.compose(["+experiment=searchqa", "llm=embedded"])
    assert obj.llm.target.temperature == 0.0  # the embedded model keeps its own


def test_reasoning_effort_is_checked(capsys):
    code = cli.main(["+experiment=searchqa", "llm=paper", "llm.target.reasoning_effort=extreme"])
    err = capsys.readouterr().err
    assert code == 2 and "llm.target.reasoning_effort='extreme' is invalid" in err


def test_compatible_without_url_says_the_url_is_missing(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("COMPATIBLE_BASE_URL", raising=False)
    monkeypatch.delenv("COMPATIBLE_API_KEY", raising=False)
    code = cli.main(["+experiment=searchqa", "llm=compatible", f"output_dir={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "needs a server URL" in err and "API key" not in err and "\n" not in err


# --- transport faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault,kind",
    [
        (Fault(200, truncated=True), "truncated"),
        (Fault(200, html=True), "html"),
        (Fault(200, reset=True), "reset"),
        (Fault(502), "http"),
    ],
)
@pytest.mark.parametrize("http_client", ["httpx", "aiohttp"])
def test_each_transport_fault_is_retried(server, run, fault, kind, http_client):
    server.inject(fault)
    gw = gateway(server.base_url, role={"http_client": http_client})
    try:
        assert json.loads(run(gw.chat(req(7))).content)["answer"] == "q7"
        assert server.state.attempts == 2 and gw.stats()["faults"]["target"] == {kind: 1}
        assert gw.ledger.totals()["calls"] == 1
    finally:
        run(gw.close())


@pytest.mark.parametrize(
    "fault,needle",
    [
        (Fault(200, truncated=True), "JSON body cut off"),
        (Fault(200, html=True), "HTML page instead of JSON"),
        (Fault(200, reset=True), "connection closed mid-response"),
        (
            Fault(200, malformed=True, finish_reason="stop"),
            None,
        ),  # well-formed JSON, unusable text: not a transport fault
    ],
)
@pytest.mark.parametrize("http_client", ["httpx", "aiohttp"])
def test_a_fault_that_persists_ends_in_one_line_naming_endpoint_and_fault(server, run, fault, needle, http_client):
    server.inject(*[fault] * 20)
    gw = gateway(server.base_url, window=1.0, retries=3, role={"http_client": http_client})
    try:
        if needle is None:
            assert run(gw.chat(req())).content == "this is not JSON at all"
            return
        with pytest.raises(LLMUnavailable) as e:
            run(gw.chat(req()))
    finally:
        run(gw.close())
    msg = e.value.message
    assert 2 <= server.state.attempts <= 3 + 1  # retried, within its 3 retries
    assert needle in msg and server.base_url in msg and "'m'" in msg and "\n" not in msg
    # one call's bad luck is not the run's end: an episode makes it an infra error, an optimizer stage falls back
    assert not e.value.fatal and isinstance(e.value, MalformedOutput)


def test_non_json_bodies_are_named():
    with pytest.raises(TransportFault) as e:
        parse_completion("Bad Gateway", "text/plain")
    assert e.value.kind == "not_json" and "not JSON" in str(e.value)
    with pytest.raises(TransportFault) as e:
        parse_completion('{"error": {"message": "quota"}}', "application/json")
    assert e.value.kind == "not_completion" and "quota" in str(e.value)
    assert (
        parse_completion(
            '{"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]}', "application/json"
        ).finish_reason
        == "length"
    )


def test_a_silent_endpoint_is_named_quickly_and_within_60s_by_default(silent_port, run):
    gw = gateway(f"http://127.0.0.1:{silent_port}/v1", role=dict(timeout_s=60.0, silence_probe_s=0.5))
    t0 = time.monotonic()
    with pytest.raises(LLMUnavailable) as e:
        run(gw.chat(req()))
    assert time.monotonic() - t0 < 60 / 2  # not the 60 s read timeout
    assert "nothing answered" in e.value.message and str(silent_port) in e.value.message
    for preset in ("openai", "azure", "compatible", "paper"):  # what the defaults guarantee, per preset
        obj = cli.compose(["+experiment=searchqa", f"llm={preset}"])
        for r in (obj.llm.target, obj.llm.optimizer):
            assert silent_endpoint_named_after(r) <= 60 and r.connect_timeout_s * 2 < obj.llm.retry_window_s <= 60, (
                preset
            )


def test_a_slow_endpoint_that_is_alive_is_waited_for(run):
    with ScriptedServer(policy=_echo) as srv:
        srv.inject(Fault(200, hang_s=1.5, finish_reason="stop"))  # this call is slow; the route answers others
        gw = gateway(srv.base_url, role=dict(silence_probe_s=0.3))
        assert json.loads(run(gw.chat(req(3))).content)["answer"] == "q3"
        assert srv.state.attempts == 1 and srv.state.refused >= 1  # probed, refused at once, nothing billed


def test_a_hung_chat_route_is_named_quickly_though_models_still_answers(run):
    """The run needs its chat route: an endpoint whose GET /models answers while every chat request hangs is
    silent for the run (it took timeout_s, 121 s at the defaults, to stop a run)."""
    with ScriptedServer(policy=_echo) as srv:
        srv.route_hang_s = 30.0
        with urllib.request.urlopen(srv.base_url + "/models", timeout=5) as r:
            assert r.status == 200
        gw = gateway(srv.base_url, role=dict(timeout_s=20.0, silence_probe_s=0.5), window=1.0)
        t0 = time.monotonic()
        with pytest.raises(LLMUnavailable) as e:
            run(gw.chat(req(5)))
        assert time.monotonic() - t0 < 20 / 2  # not the 20 s read timeout
        assert "nothing answered for 0.5s" in e.value.message and "POST /chat/completions" in e.value.message


# --- replies the endpoint ended itself ----------------------------------------------------------------------------


def test_length_finish_is_retried_once_with_twice_the_budget(server, run, tmp_path):
    server.inject(Fault(200, finish_reason="length"))
    gw = gateway(server.base_url, cache=str(tmp_path / "c.sqlite"))
    res = run(gw.chat(req(4)))
    assert json.loads(res.content)["answer"] == "q4" and res.finish_reason == "stop"
    first, second = list(server.state.bodies)
    assert (first["max_tokens"], second["max_tokens"]) == (64, 128)
    e = gw.ledger.entries["target/rollout"]
    assert (e.calls, e.truncated) == (2, 1)
    assert run(gw.chat(req(4))).cached  # the retried reply is cached under the original request


def test_length_twice_is_a_named_counted_error_not_a_model_failure(server, run):
    server.inject(Fault(200, finish_reason="length"), Fault(200, finish_reason="length"))
    gw = gateway(server.base_url, role=dict(max_completion_tokens=1000, temperature=None))
    with pytest.raises(ReplyTruncated) as e:
        run(gw.chat(req()))
    assert isinstance(e.value, MalformedOutput) and isinstance(e.value, LLMError) and not e.value.fatal
    assert "finish_reason=length" in e.value.message and "max_completion_tokens" in e.value.message
    assert [b["max_completion_tokens"] for b in server.state.bodies] == [1000, 2000]
    assert gw.ledger.totals()["truncated"] == 2
    server.inject(Fault(200, finish_reason="length"))
    gw = gateway(server.base_url, truncated_reply="error")
    with pytest.raises(ReplyTruncated):
        run(gw.chat(req(9)))
    server.inject(Fault(200, finish_reason="length"))
    gw = gateway(server.base_url, truncated_reply="keep")
    assert run(gw.chat(req(10))).finish_reason == "length"


def test_content_filter_is_a_named_counted_error(server, run):
    server.inject(Fault(200, finish_reason="content_filter"))
    gw = gateway(server.base_url)
    with pytest.raises(ReplyFiltered) as e:
        run(gw.chat(req()))
    assert not e.value.fatal and "content_filter" in e.value.message and server.state.attempts == 1
    assert gw.ledger.totals()["filtered"] == 1


# --- across the gateway actor -------------------------------------------------------------------------------------


def test_faults_cross_the_gateway_actor_as_one_line(ray_cluster, server):
    import ray

    from skillopt_ray.llm.gateway import GatewayActor, LLMHandle
    from skillopt_ray.llm.types import LLMInternalError

    cfg = LLMConfig(
        backend="compatible",
        target=role(server.base_url),
        optimizer=role(server.base_url),
        retry_base_s=0.05,
        retry_max_s=0.1,
        retry_window_s=0.5,
        max_retries=2,
    )
    actor = GatewayActor.remote(cfg, None, None)
    handle = LLMHandle(actor)
    server.inject(*[Fault(200, truncated=True)] * 10)

    async def call(r):
        return await handle.chat(r)

    try:
        with pytest.raises(LLMError) as e:
            asyncio.run(call(req()))
        assert isinstance(e.value, LLMUnavailable)
        for text in (e.value.message, str(e.value).splitlines()[0]):
            assert "JSON body cut off" in text and "ray::" not in text and "pid=" not in text
        assert "\n" not in e.value.message
        bad = ChatRequest("target", "rollout", None, key="x")  # type: ignore[arg-type] - breaks inside the gateway
        with pytest.raises(LLMError) as e:
            asyncio.run(call(bad))
        assert isinstance(e.value, LLMInternalError) and "\n" not in e.value.message and "ray::" not in e.value.message
    finally:
        ray.kill(actor)


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_a_refused_connection_is_named_refused_not_a_timeout(http_client, run):
    """A dead endpoint (nothing listens on the port) refuses at once: under the default aiohttp transport the SDK
    raises its ConnectTimeout for it, and the run's last line said "connect timeout after 10s" for a port that
    never waited."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gw = gateway(f"http://127.0.0.1:{port}/v1", role=dict(http_client=http_client), window=0.5, retries=1)
    with pytest.raises(LLMUnavailable) as e:
        run(gw.chat(req()))
    assert "cannot connect" in e.value.message and "timeout" not in e.value.message, e.value.message
