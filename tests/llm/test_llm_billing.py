"""Every reply the endpoint answered (and so billed) is in the ledger: replies cut at the completion limit
(finish_reason=length) and filtered ones with their usage, and replies whose HTTP 200 body was cut off in transit
(retried, never read) counted apart as `unread`, with estimated tokens the budget caps count."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import gateway, req
from scripted_server import Fault, ScriptedServer

from skillopt_ray.config import BudgetConfig, PriceConfig
from skillopt_ray.llm.types import BudgetExceeded, LLMUnavailable, ReplyFiltered, ReplyTruncated


def _long(body, headers):
    return json.dumps({"answer": "x" * 400})


@pytest.fixture()
def srv():
    with ScriptedServer(policy=_long) as s:
        yield s


@pytest.mark.parametrize("mode", ["retry", "error", "keep"])
def test_cut_and_filtered_replies_are_billed_with_their_usage(srv, run, mode):
    srv.inject(Fault(200, finish_reason="length"), Fault(200, finish_reason="length"))
    srv.inject(Fault(200, finish_reason="content_filter"))
    gw = gateway(srv.base_url, truncated_reply=mode)
    for i in range(3):
        try:
            run(gw.chat(req(i)))
        except (ReplyTruncated, ReplyFiltered):
            pass
    t = gw.ledger.totals()
    assert t["calls"] == sum(srv.state.requests.values()) >= 3
    assert (t["prompt_tokens"], t["completion_tokens"]) == (srv.state.prompt_tokens, srv.state.completion_tokens)
    assert t["completion_tokens"] >= 3 * 100  # each cut reply's 400 characters were billed
    assert t["filtered"] == 1 and t["truncated"] == (0 if mode == "keep" else 2)


def test_a_200_cut_off_in_transit_is_unread_not_forgotten(srv, run):
    srv.inject(Fault(200, truncated=True), Fault(200, truncated=True))
    price = {"m": PriceConfig(input_per_mtok=1.0, output_per_mtok=2.0)}
    gw = gateway(srv.base_url, prices=price)
    res = run(gw.chat(req(1)))
    assert json.loads(res.content)["answer"].startswith("x") and srv.state.attempts == 3
    e = gw.ledger.entries["target/rollout"]
    assert (e.calls, e.unread) == (1, 2)  # the read reply is the call; the two cut ones are billed apart
    # each cut reply: the prompt's estimate (characters / 4) plus the bytes that arrived (about half the body) / 4
    assert 2 * 30 < e.unread_tokens_est < 2 * 200
    assert e.unread_cost_usd_est > 0
    srv.inject(*[Fault(200, truncated=True)] * 3)
    gw = gateway(srv.base_url, retries=2)
    with pytest.raises(LLMUnavailable) as err:
        run(gw.chat(req(2)))
    assert err.value.unread == 3 and gw.ledger.totals()["unread"] == 3 and gw.ledger.totals()["calls"] == 0


def test_unread_replies_count_against_the_budget(srv, run):
    srv.inject(Fault(200, truncated=True), Fault(200, truncated=True))
    gw = gateway(srv.base_url, budget=BudgetConfig(max_calls=3))
    run(gw.chat(req(1)))  # 2 cut + 1 read: three replies billed
    with pytest.raises(BudgetExceeded) as e:
        run(gw.chat(req(2)))
    assert "cut off in transit" in e.value.message and srv.state.attempts == 3


def test_unread_survives_the_trip_across_actors():
    import pickle

    err = pickle.loads(pickle.dumps(LLMUnavailable("endpoint down", 2, 900)))
    assert (err.message, err.unread, err.unread_bytes) == ("endpoint down", 2, 900)


def test_the_run_summary_names_unread_replies():
    from skillopt_ray.cli.report import summary_table

    t = {"hard": 0.5, "soft": 0.5, "per_type": {"qa": {"hard": 0.5}}}
    tokens = {"calls": 9, "cache_hits": 0, "tokens": 900, "cost_usd": 0.0, "unread": 2, "unread_tokens_est": 130}
    s = {
        "selection": {"initial": 0.5, "best": 0.5, "final": 0.5},
        "test": {"initial": t, "best": t, "final": t},
        "steps": 1,
        "counts": {"accept": 0, "reject": 1, "skip": 0},
        "delta_test_hard_best_vs_initial": 0.0,
        "tokens": tokens,
    }
    assert "plus 2 replies billed but cut off in transit, never read (~130 tokens estimated)" in summary_table(s)
    assert "cut off in transit" not in summary_table({**s, "tokens": {**tokens, "unread": 0}})


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_200_whose_connection_closes_half_way_is_unread_not_forgotten(srv, run, http_client, api):
    """The headers announce the whole reply's length; the connection closes after half of it. The endpoint billed
    that reply: it is retried and counted as `unread`, like a body cut off with a consistent Content-Length."""
    srv.inject(Fault(200, hang_up_midway=True), Fault(200, hang_up_midway=True))
    gw = gateway(srv.base_url, role={"http_client": http_client, "api": api})
    res = run(gw.chat(req(1)))
    assert "x" * 40 in res.content and srv.state.attempts == 3
    e = gw.ledger.entries["target/rollout"]
    assert (e.calls, e.unread) == (1, 2)
    assert e.unread_tokens_est > 2 * 50  # the prompt's estimate plus half of each body that arrived
    srv.inject(*[Fault(200, hang_up_midway=True)] * 3)
    gw = gateway(srv.base_url, retries=2, role={"http_client": http_client, "api": api})
    with pytest.raises(LLMUnavailable) as err:
        run(gw.chat(req(2)))
    assert err.value.unread == 3 and gw.ledger.totals()["unread"] == 3 and "cut off after" in err.value.message


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_body_that_never_ends_is_bounded_by_the_timeout(srv, run, api):
    """Content-Length 1e9 and one byte at a time, each well inside the read timeout: the body's whole read is
    bounded by timeout_s too, so the call ends (a billed, unread reply) instead of holding its slot for ever."""
    srv.inject(Fault(200, trickle_s=0.2), Fault(200, trickle_s=0.2))
    gw = gateway(srv.base_url, retries=1, role={"api": api, "timeout_s": 1.0})
    with pytest.raises(LLMUnavailable) as err:
        run(asyncio.wait_for(gw.chat(req(3)), 60))
    assert err.value.unread == 2 and "did not end within 1s" in err.value.message
