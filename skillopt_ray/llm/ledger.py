"""Token, call and cost ledger per role and stage, with budget caps.

Kill-safe: with a journal path, every change to an entry is appended to the journal (one line,
one write, before the caller goes on), so a run killed at any moment resumes with every paid
call that returned already counted, and budget caps hold across any number of kills. Each call is
journaled once more before it is sent (`begin`) and its outcome line names it: a call begun and never
settled was sent by a process that died before the reply came, so the endpoint may have answered (and
billed) it. The next open counts such calls as `lost`, with their estimated tokens and cost, and the
budget caps count them. The journal is replayed and compacted when the ledger opens; `ledger.json`
stays the readable summary. Journal lines carry their wall-clock time, so per-call durations can be read
back from a run that was not resumed (scripts/bench_quickstart.py does).

A journal write that fails (a full disk; a short write counts) is remembered in `failed`, and the journal is not
written again in this session, so it stays whole lines and at most one cut last line: a call about to be sent then
raises StoreUnwritable instead of going out (it could not be counted), while outcomes of calls already sent are kept
in memory only (the next session counts those calls lost).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.io import atomic_write_text
from skillopt_ray.config import BudgetConfig, PriceConfig
from skillopt_ray.llm.types import BudgetExceeded, StoreUnwritable, unwritable
from skillopt_ray.runs.records import LedgerState

MIN_COMPLETION = 16  # the smallest reply budget worth a call: below it a capped run stops instead of sending
MAX_ROOM = 1 << 30  # a cost cap with a free model: no limit from it

# the loop stage an episode key's first part names (see stage_of_key)
KEY_STAGES = {"train": "rollout", "eval": "validate", "slow": "slow:rollout", "meta": "meta:rollout"}


def stage_of_key(key: str) -> str:
    """The ledger stage of an episode from its sample key, so that the target's calls are booked by the stage they
    ran in: training batches `train/...` -> rollout, skill evaluations `eval/...` (the gate's selection split and the
    final test split; the key does not say which) -> validate, the epoch boundary's paired rollouts `slow/...` or
    `meta/...` -> slow:rollout or meta:rollout, an eval-only run `evalonly/<split>/...` -> eval:<split>. Keys of any
    other shape stay rollout."""
    head, _, rest = key.partition("/")
    if head == "evalonly":
        return f"eval:{rest.split('/', 1)[0]}" if rest else "eval"
    return KEY_STAGES.get(head, "rollout")


@dataclass
class LedgerEntry:
    calls: int = 0  # network calls that returned a response
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens: the model's reasoning, billed as output
    cached_tokens: int = 0  # of prompt_tokens: served from the provider's prompt cache
    cost_usd: float = 0.0
    errors: int = 0
    truncated: int = 0  # replies cut by the completion limit (finish_reason=length)
    filtered: int = 0  # replies or requests stopped by a content filter
    lost: int = 0  # calls sent whose replies a kill or a full disk lost: maybe answered and billed, paid again
    lost_tokens_est: int = 0  # their tokens as estimated before sending (prompt characters / 4 + completion budget)
    lost_cost_usd_est: float = 0.0
    # replies the endpoint answered with HTTP 200 (and billed) whose body was cut off in transit, so never read (the
    # call was retried): their tokens estimated from the prompt (characters / 4) and the bytes that arrived (/ 4)
    unread: int = 0
    unread_tokens_est: int = 0
    unread_cost_usd_est: float = 0.0


_FIELDS = {f.name for f in fields(LedgerEntry)}


class JournalLine(TypedDict, total=False):
    """One journal line. An entry's new totals: `k` (role/stage) and `v` (its LedgerEntry fields), with `d` naming
    the call they settle; a call about to be sent: `p` (its id), `k`, `m` (model), `pe`/`ce` (estimated prompt and
    completion tokens); a call cancelled: `d` alone. `t`: wall-clock time of the write."""

    k: str
    v: JSONObject
    p: str
    m: str
    pe: int
    ce: int
    d: str
    t: float


def journal_path(ledger_path: Optional[str]) -> Optional[str]:
    """Where the journal of `ledger.json` lives (beside it)."""
    return str(Path(ledger_path).with_name(Path(ledger_path).stem + ".journal.jsonl")) if ledger_path else None


def _values(entry: LedgerEntry) -> JSONObject:
    """An entry's fields as a dict, in field order: what `asdict` gives for these flat numbers, without its deep copy
    (the journal writes one per paid call)."""
    return dict(entry.__dict__)


def _entry_from(values: Mapping[str, object]) -> LedgerEntry:
    known: Any = {k: v for k, v in values.items() if k in _FIELDS}  # numbers, as this code wrote them
    return LedgerEntry(**known)


def read_journal(path: str | Path) -> dict[str, LedgerEntry]:
    """Entries as the journal last recorded them, calls begun and never settled counted as `lost`; a line cut
    by a kill mid-write is ignored."""
    return _replay(path)[0]


def _price(
    prices: dict[str, PriceConfig], model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float:
    """US dollars for one call; cached prompt tokens at the model's cached-input price when it has one."""
    p = prices.get(model)
    if p is None:
        return 0.0
    cached = min(cached_tokens, prompt_tokens) if p.cached_input_per_mtok is not None else 0
    fresh = (prompt_tokens - cached) * p.input_per_mtok + cached * (p.cached_input_per_mtok or 0.0)
    return (fresh + completion_tokens * p.output_per_mtok) / 1e6


def _count_lost(
    e: LedgerEntry, prices: dict[str, PriceConfig], model: str, prompt_est: int, completion_est: int
) -> None:
    """One call whose reply was lost (a kill, a full disk), with its tokens and cost as estimated before sending."""
    e.lost += 1
    e.lost_tokens_est += prompt_est + completion_est
    e.lost_cost_usd_est += _price(prices, model, prompt_est, completion_est)


def _replay(path: str | Path, prices: Optional[dict[str, PriceConfig]] = None) -> tuple[dict[str, LedgerEntry], int]:
    """(entries, how many calls were begun and never settled in this journal); lost calls priced with `prices`."""
    entries: dict[str, LedgerEntry] = {}
    pending: dict[str, JournalLine] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            if "p" in rec:  # a call about to be sent
                pending[str(rec["p"])] = cast(JournalLine, rec)
                continue
            if "d" in rec:  # that call's outcome came back (or it was cancelled)
                pending.pop(str(rec["d"]), None)
            try:
                if "k" in rec:
                    entries[rec["k"]] = _entry_from(rec["v"])
            except (KeyError, TypeError):
                continue
    for rec in pending.values():
        try:
            e = entries.setdefault(str(rec["k"]), LedgerEntry())
            _count_lost(e, prices or {}, str(rec.get("m", "")), int(rec.get("pe", 0)), int(rec.get("ce", 0)))
        except (KeyError, TypeError, ValueError):
            continue
    return entries, len(pending)


class Ledger:
    def __init__(
        self,
        prices: dict[str, PriceConfig],
        budget: BudgetConfig,
        state: LedgerState | None = None,
        journal: Optional[str] = None,
    ):
        self.prices = prices
        self.budget = budget
        self.entries: dict[str, LedgerEntry] = {}
        for k, v in (state or {}).get("entries", {}).items():
            self.entries[k] = _entry_from(v)
        self._journal_fd: Optional[int] = None
        self._journal_path = journal or ""
        self.failed: Optional[StoreUnwritable] = None  # the first journal write that failed
        self.in_flight = 0  # calls sent and not yet answered: they count against max_calls before they land
        self._ids = itertools.count(1)
        self._session = f"{os.getpid()}.{int(time.time() * 1000) % 10**9}"  # call ids stay unique across sessions
        self._open_calls: set[str] = set()
        self._started = time.monotonic()  # max_minutes counts from here
        self.lost_at_open = 0  # calls a killed earlier session sent and never heard back from
        # admitted calls not yet settled: hold id -> (worst-case tokens, worst-case cost), counted against the caps
        self._holds: dict[int, tuple[int, float]] = {}
        self._hold_ids = itertools.count(1)
        if journal:
            if Path(journal).exists():
                # newer than ledger.json, which is written only at save points
                self.entries, self.lost_at_open = _replay(journal, prices)
            self._open_journal(Path(journal))

    def _open_journal(self, path: Path) -> None:
        """Start the journal afresh with one line per entry (atomic replace), then append to it."""
        try:
            atomic_write_text(path, "".join(self._line(k) for k in sorted(self.entries)))  # a new file, never planted
            self._journal_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:  # a full disk: one line saying so, and the journal as it was
            raise unwritable("the ledger's journal", str(path), e) from None

    def _line(self, key: str) -> str:
        return json.dumps({"k": key, "v": _values(self.entries[key])}, separators=(",", ":")) + "\n"

    def _write(self, rec: JournalLine) -> bool:
        """One journal line in one write(), so a kill leaves whole lines or a cut last one. False when it was not
        written: this write failed (a full disk), or an earlier one did (`failed`)."""
        if self._journal_fd is None:
            return True
        if self.failed is not None:
            return False
        rec["t"] = round(time.time(), 3)
        data = (json.dumps(rec, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            if os.write(self._journal_fd, data) < len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a short write: the disk filled mid-line
            return True
        except OSError as e:
            self.failed = unwritable("the ledger's journal", self._journal_path, e)
            return False

    def _persist(self, role: str, stage: str, call: Optional[str] = None) -> None:
        """Append the entry's new totals (and, with `call`, that this call is settled): one line, one write."""
        if self._journal_fd is None:
            return
        key = f"{role}/{stage}"
        rec: JournalLine = {"k": key, "v": _values(self.entries[key])}
        if call is not None and call in self._open_calls:
            self._open_calls.discard(call)
            rec["d"] = call
        self._write(rec)

    def begin(self, role: str, stage: str, model: str, prompt_tokens_est: int, completion_tokens_est: int) -> str:
        """Journal a call about to be sent; returns its id, which the call's outcome (record*, settle) names.
        Until then a kill leaves it `lost` for the next session, with these estimates."""
        call = f"{self._session}.{next(self._ids)}"
        line: JournalLine = {"p": call, "k": f"{role}/{stage}", "m": model, "pe": prompt_tokens_est,
                             "ce": completion_tokens_est}  # fmt: skip
        if not self._write(line):  # not journaled, so not to be sent: a kill would leave it uncounted
            assert self.failed is not None
            raise StoreUnwritable(self.failed.message)
        self._open_calls.add(call)
        return call

    def unkept(self, role: str, stage: str, model: str, call: str, prompt_tokens_est: int, completion_tokens_est: int
               ) -> None:  # fmt: skip
        """A call answered whose reply could not be kept (the response cache could not write it): counted `lost`,
        with its estimates, as a killed call is, since the rerun pays for it again. Journaled as its outcome, or, when
        the journal cannot be written either, left open there, which the next session counts the same way."""
        _count_lost(self._entry(role, stage), self.prices, model, prompt_tokens_est, completion_tokens_est)
        self._persist(role, stage, call)

    def is_open(self, call: str) -> bool:
        """Whether a begun call has no outcome yet."""
        return call in self._open_calls

    def settle(self, call: str) -> None:
        """A begun call ended without an outcome line (cancelled by its caller): it is no longer pending."""
        if call in self._open_calls:
            self._open_calls.discard(call)
            self._write({"d": call})

    def close(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None

    def _entry(self, role: str, stage: str) -> LedgerEntry:
        return self.entries.setdefault(f"{role}/{stage}", LedgerEntry())

    def cost_of(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        return _price(self.prices, model, prompt_tokens, completion_tokens, cached_tokens)

    def record(
        self,
        role: str,
        stage: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        call: Optional[str] = None,
        reasoning_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        """A reply the endpoint answered (and billed), whatever becomes of it: a reply cut at the completion limit
        or stopped by a content filter is recorded here too, before the gateway decides it is unusable."""
        e = self._entry(role, stage)
        e.calls += 1
        e.prompt_tokens += prompt_tokens
        e.completion_tokens += completion_tokens
        e.reasoning_tokens += reasoning_tokens
        e.cached_tokens += cached_tokens
        e.cost_usd += self.cost_of(model, prompt_tokens, completion_tokens, cached_tokens)
        self._persist(role, stage, call)

    def record_hit(self, role: str, stage: str) -> None:
        self._entry(role, stage).cache_hits += 1
        self._persist(role, stage)

    def record_error(self, role: str, stage: str, call: Optional[str] = None) -> None:
        self._entry(role, stage).errors += 1
        self._persist(role, stage, call)

    def record_incomplete(self, role: str, stage: str, kind: str, call: Optional[str] = None) -> None:
        """A reply the endpoint ended itself: kind `truncated` (length) or `filtered` (content filter)."""
        e = self._entry(role, stage)
        setattr(e, kind, getattr(e, kind) + 1)
        self._persist(role, stage, call)

    def record_unread(
        self, role: str, stage: str, model: str, replies: int, prompt_tokens_est: int, completion_tokens_est: int
    ) -> None:
        """Replies billed and never read (a 200 whose body was cut off): counted apart from `calls`, estimated."""
        e = self._entry(role, stage)
        e.unread += replies
        e.unread_tokens_est += prompt_tokens_est + completion_tokens_est
        e.unread_cost_usd_est += self.cost_of(model, prompt_tokens_est, completion_tokens_est)
        self._persist(role, stage)

    def totals(self) -> dict[str, float]:
        t = LedgerEntry()
        for e in self.entries.values():
            t.calls += e.calls
            t.cache_hits += e.cache_hits
            t.prompt_tokens += e.prompt_tokens
            t.completion_tokens += e.completion_tokens
            t.reasoning_tokens += e.reasoning_tokens
            t.cached_tokens += e.cached_tokens
            t.cost_usd += e.cost_usd
            t.errors += e.errors
            t.truncated += e.truncated
            t.filtered += e.filtered
            t.lost += e.lost
            t.lost_tokens_est += e.lost_tokens_est
            t.lost_cost_usd_est += e.lost_cost_usd_est
            t.unread += e.unread
            t.unread_tokens_est += e.unread_tokens_est
            t.unread_cost_usd_est += e.unread_cost_usd_est
        d = asdict(t)
        d["tokens"] = t.prompt_tokens + t.completion_tokens
        return d

    def check_budget(self) -> None:
        """Raise before a new network call if any cap is already reached. Calls in flight count toward max_calls,
        so concurrent calls never overshoot it; tokens and cost are known only once answered. Calls whose replies
        a kill or a full disk lost count too, with their estimated tokens and cost (the endpoint may have billed them)."""
        b = self.budget
        minutes = (time.monotonic() - self._started) / 60
        if b.max_minutes and minutes >= b.max_minutes:
            raise BudgetExceeded(
                f"budget cap hit: {minutes:.1f} minutes >= llm.budget.max_minutes={b.max_minutes:g}; "
                "raise it (e.g. llm.budget.max_minutes=...) and rerun the same command to resume"
            )
        if not (b.max_calls or b.max_tokens or b.max_cost_usd):
            return  # no cap: nothing to add up
        t = self.totals()
        hint = "raise it (e.g. llm.budget.{k}=...) and rerun the same command to resume"
        lost = t["lost"]
        lost_note = f" ({lost} of them sent before a kill or a full disk, replies lost)" if lost else ""
        if t["unread"]:
            lost_note += f" ({t['unread']} of them answered but cut off in transit, billed)"
        if b.max_calls and t["calls"] + lost + t["unread"] + self.in_flight >= b.max_calls:
            held = f" ({self.in_flight} still in flight)" if self.in_flight else ""
            raise BudgetExceeded(
                f"budget cap hit: {t['calls'] + lost + t['unread']} calls{held} >= llm.budget.max_calls={b.max_calls}{lost_note}; "
                + hint.format(k="max_calls")
            )
        tokens = t["tokens"] + t["lost_tokens_est"] + t["unread_tokens_est"]
        if b.max_tokens and tokens >= b.max_tokens:
            est = (
                f" (~{t['lost_tokens_est']} estimated for {lost} calls whose replies a kill or a full disk lost)"
                if lost
                else ""
            )
            raise BudgetExceeded(
                f"budget cap hit: {tokens} tokens >= llm.budget.max_tokens={b.max_tokens}{est}; "
                + hint.format(k="max_tokens")
            )
        cost = t["cost_usd"] + t["lost_cost_usd_est"] + t["unread_cost_usd_est"]
        if b.max_cost_usd and cost >= b.max_cost_usd:
            est = (
                f" (~${t['lost_cost_usd_est']:.4f} estimated for {lost} calls whose replies a kill or a full disk lost)"
                if lost
                else ""
            )
            raise BudgetExceeded(
                f"budget cap hit: ${cost:.4f} >= llm.budget.max_cost_usd={b.max_cost_usd}{est}; "
                + hint.format(k="max_cost_usd")
            )

    def held(self) -> tuple[int, float]:
        """Worst-case tokens and cost of the calls admitted and not yet settled."""
        return sum(h[0] for h in self._holds.values()), sum(h[1] for h in self._holds.values())

    def room(self, model: str, prompt_worst: int) -> tuple[Optional[int], str]:
        """The completion tokens a call with this worst-case prompt may ask for without crossing a token or cost cap,
        on top of what is spent and of the calls in flight at their worst case, and the cap (its config key) that
        leaves the least; (None, "") without a token or cost cap."""
        b = self.budget
        t = self.totals()
        held_tokens, held_cost = self.held()
        rooms: list[tuple[int, str]] = []
        if b.max_tokens:
            spent = t["tokens"] + t["lost_tokens_est"] + t["unread_tokens_est"]
            rooms.append((int(b.max_tokens - spent - held_tokens - prompt_worst), "llm.budget.max_tokens"))
        if b.max_cost_usd:
            spent_cost = t["cost_usd"] + t["lost_cost_usd_est"] + t["unread_cost_usd_est"]
            left = b.max_cost_usd - spent_cost - held_cost - self.cost_of(model, prompt_worst, 0)
            per_token = self.cost_of(model, 0, 1_000_000) / 1e6
            fit = int(left / per_token) if per_token > 0 else (MAX_ROOM if left >= 0 else -1)
            rooms.append((fit, "llm.budget.max_cost_usd"))
        if not rooms:
            return None, ""
        return min(rooms)

    def hold(self, model: str, prompt_worst: int, completion: int) -> Optional[tuple[int, int]]:
        """Admit a call before it is sent, at its worst case: raises BudgetExceeded when a cap is already reached, or
        when even a minimal reply (MIN_COMPLETION tokens) would cross one; returns None when the call must wait for
        the calls in flight, which with it could cross a token or cost cap; else takes a hold and returns its id
        (give it to `release`) and the completion limit to send, `completion` clamped to what remains under the
        caps. So no call is sent whose worst case crosses a cap: the endpoint's count never exceeds it."""
        self.check_budget()
        room, cap = self.room(model, prompt_worst)
        if room is not None and room < completion:
            if self._holds:
                return None
            if room < MIN_COMPLETION:
                raise BudgetExceeded(
                    f"budget cap reached: the next call needs {prompt_worst} prompt tokens at worst and "
                    f"{MIN_COMPLETION} for its reply, which would cross {cap}={getattr(self.budget, cap.split('.')[-1])}"
                    f" ({max(0, room)} completion tokens left); raise it (e.g. {cap}=...) and rerun the same command "
                    "to resume"
                )
            completion = room
        hid = next(self._hold_ids)
        self._holds[hid] = (prompt_worst + completion, self.cost_of(model, prompt_worst, completion))
        self.in_flight += 1
        return hid, completion

    def release(self, hold_id: int) -> None:
        """The held call ended (answered, failed or cancelled): what it spent is recorded, its hold goes."""
        if self._holds.pop(hold_id, None) is not None:
            self.in_flight -= 1

    def to_dict(self) -> LedgerState:
        return {"entries": {k: asdict(v) for k, v in sorted(self.entries.items())}, "totals": self.totals()}
