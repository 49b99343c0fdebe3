"""The gateway on a full disk, without root: the response cache's SQLite capped at the pages it has
(`PRAGMA max_page_count`: its writes fail with SQLite's own "database or disk is full"), the ledger's journal moved to
/dev/full (every write: ENOSPC). The first write that fails stops new paid calls; calls already sent still bring their
replies, kept in memory, and count as lost; the next session (the rerun) pays again only for those."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.ledger import read_journal
from skillopt_ray.llm.types import StoreUnwritable, unwritable

FIX = "free space, then rerun the same command to resume"


def _gateway(url: str, d: Path) -> Gateway:
    role = LLMRoleConfig(provider="openai", model="m", base_url=url, api_key_env="SKILLOPT_TEST_KEY", timeout_s=5.0)
    cfg = LLMConfig(backend="compatible", target=role, optimizer=LLMRoleConfig(**vars(role)))
    return Gateway(cfg, str(d / "llm_cache.sqlite"), str(d / "ledger.json"))


def _ask(i: int) -> ChatRequest:
    return ChatRequest("target", "rollout", [{"role": "user", "content": f"question {i}"}], key=f"k{i}")


def _fill_cache(gw: Gateway) -> None:
    """The cache's database may grow no more, and its pages are filled: its next write fails as on a full disk."""
    assert gw.cache is not None
    db = gw.cache._db
    db.execute(f"PRAGMA max_page_count={db.execute('PRAGMA page_count').fetchone()[0]}")
    size, n = 2048, 0
    while size:
        try:
            db.execute("INSERT INTO responses VALUES (?, '', ?)", (f"filler{n}", "x" * size))
            db.commit()
            n += 1
        except sqlite3.Error:
            db.rollback()
            size //= 2


def _fill_journal(gw: Gateway) -> None:
    """The ledger's journal now writes to /dev/full: ENOSPC."""
    fd = gw.ledger._journal_fd
    assert fd is not None
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, fd)
    os.close(full)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("SKILLOPT_TEST_KEY", "sk-test")


def test_calls_in_flight_when_the_cache_fills_answer_and_count_lost_and_no_new_call_is_paid(tmp_path, run):
    with ScriptedServer(policy=lambda body, headers: "ok " + body["messages"][-1]["content"], latency_s=0.3) as srv:
        gw = _gateway(srv.base_url, tmp_path)
        assert run(gw.chat(_ask(0))).content == "ok question 0"  # kept

        async def three_then_full() -> list:
            calls = [asyncio.ensure_future(gw.chat(_ask(i))) for i in (1, 2, 3)]
            await asyncio.sleep(0.1)  # all three sent (the server holds each 0.3 s)
            _fill_cache(gw)
            return await asyncio.gather(*calls)

        replies = run(three_then_full())
        assert [r.content for r in replies] == ["ok question 1", "ok question 2", "ok question 3"]  # still answered
        assert srv.state.attempts == 4
        with pytest.raises(StoreUnwritable) as refused:
            run(gw.chat(_ask(4)))
        assert srv.state.attempts == 4  # refused before it was sent
        msg = refused.value.message
        assert msg.startswith("the disk is full: the response cache could not be written (database or disk is full")
        assert FIX in msg and "\n" not in msg
        again = run(gw.chat(_ask(2)))  # a reply kept in memory answers its own request again, free
        assert again.cached and again.content == "ok question 2" and srv.state.attempts == 4
        with pytest.raises(StoreUnwritable):
            gw.save_ledger()  # no step commits, no summary: nothing becomes a score
        t = gw.ledger.totals()
        assert (t["calls"], t["lost"]) == (1, 3)
        run(gw.close())

        rerun = _gateway(srv.base_url, tmp_path)  # space freed: the next session
        t = rerun.ledger.totals()
        assert (t["calls"], t["lost"]) == (1, 3)  # the journal counts the three lost, once
        assert [run(rerun.chat(_ask(i))).cached for i in range(5)] == [True, False, False, False, False]
        assert srv.state.attempts == 8  # only the three in flight are paid again (and the one never sent)
        run(rerun.close())


def test_a_journal_that_cannot_be_written_sends_no_call_and_the_reply_already_paid_stays_free(tmp_path, run):
    with ScriptedServer(policy=lambda body, headers: "ok", latency_s=0.3) as srv:
        gw = _gateway(srv.base_url, tmp_path)

        async def one_then_full() -> object:
            call = asyncio.ensure_future(gw.chat(_ask(0)))
            await asyncio.sleep(0.1)  # sent, journaled as begun
            _fill_journal(gw)
            return await call

        assert run(one_then_full()).content == "ok"  # its outcome could not be journaled; its reply is cached
        with pytest.raises(StoreUnwritable, match=r"^the disk is full: the ledger's journal could not be written "
                                                  r"\(\[Errno 28\] No space left on device"):  # fmt: skip
            run(gw.chat(_ask(1)))
        assert srv.state.attempts == 1
        run(gw.close())
        assert read_journal(tmp_path / "ledger.journal.jsonl")["target/rollout"].lost == 1  # begun, never settled
        rerun = _gateway(srv.base_url, tmp_path)
        assert run(rerun.chat(_ask(0))).cached  # counted lost (maybe billed), yet not paid again
        assert srv.state.attempts == 1
        run(rerun.close())


@pytest.mark.parametrize(
    ("err", "head", "fix"),
    [
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "the disk is full: ", FIX),
        (sqlite3.OperationalError("database or disk is full"), "the disk is full: ", FIX),
        (OSError(errno.EIO, os.strerror(errno.EIO)), "", "check the disk, then rerun the same command to resume"),
    ],
)
def test_a_store_that_cannot_write_says_why_in_one_line(err, head, fix):
    msg = unwritable("the response cache", "/runs/r/llm_cache.sqlite", err).message
    assert msg.startswith(f"{head}the response cache could not be written (") and msg.endswith(fix)
    assert "/runs/r/llm_cache.sqlite" in msg and "\n" not in msg
