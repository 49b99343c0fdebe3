"""Token, call and cost ledger per role and stage, with budget caps.

Kill-safe: with a journal path, every change to an entry is appended to the journal (one line,
one write, before the caller goes on), so a run killed at any moment resumes with every paid
call that returned already counted, and budget caps hold across any number of kills. The
journal is replayed and compacted when the ledger opens; `ledger.json` stays the readable summary.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.config import BudgetConfig, PriceConfig
from skillopt_ray.llm.types import BudgetExceeded


@dataclass
class LedgerEntry:
    calls: int = 0  # network calls that returned a response
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    errors: int = 0
    truncated: int = 0  # replies cut by the completion limit (finish_reason=length)
    filtered: int = 0  # replies or requests stopped by a content filter


_FIELDS = {f.name for f in fields(LedgerEntry)}


def journal_path(ledger_path: Optional[str]) -> Optional[str]:
    """Where the journal of `ledger.json` lives (beside it)."""
    return str(Path(ledger_path).with_name(Path(ledger_path).stem + ".journal.jsonl")) if ledger_path else None


def _entry_from(values: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry(**{k: v for k, v in values.items() if k in _FIELDS})


def read_journal(path: str | Path) -> dict[str, LedgerEntry]:
    """Entries as the journal last recorded them; a line cut by a kill mid-write is ignored."""
    entries: dict[str, LedgerEntry] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
                entries[rec["k"]] = _entry_from(rec["v"])
            except (ValueError, KeyError, TypeError):
                continue
    return entries


class Ledger:
    def __init__(
        self,
        prices: dict[str, PriceConfig],
        budget: BudgetConfig,
        state: dict[str, Any] | None = None,
        journal: Optional[str] = None,
    ):
        self.prices = prices
        self.budget = budget
        self.entries: dict[str, LedgerEntry] = {}
        for k, v in (state or {}).get("entries", {}).items():
            self.entries[k] = _entry_from(v)
        self._journal_fd: Optional[int] = None
        self.in_flight = 0  # calls sent and not yet answered: they count against max_calls before they land
        if journal:
            if Path(journal).exists():
                self.entries = read_journal(journal)  # newer than ledger.json, which is written only at save points
            self._open_journal(Path(journal))

    def _open_journal(self, path: Path) -> None:
        """Start the journal afresh with one line per entry (atomic replace), then append to it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        tmp.write_text("".join(self._line(k) for k in sorted(self.entries)), encoding="utf-8")
        os.replace(tmp, path)
        self._journal_fd = os.open(path, os.O_WRONLY | os.O_APPEND)

    def _line(self, key: str) -> str:
        return json.dumps({"k": key, "v": asdict(self.entries[key])}, separators=(",", ":")) + "\n"

    def _persist(self, role: str, stage: str) -> None:
        """Append the entry's new totals: one write() per change, so a kill leaves whole lines or a cut last one."""
        if self._journal_fd is not None:
            os.write(self._journal_fd, self._line(f"{role}/{stage}").encode("utf-8"))

    def close(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None

    def _entry(self, role: str, stage: str) -> LedgerEntry:
        return self.entries.setdefault(f"{role}/{stage}", LedgerEntry())

    def cost_of(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        p = self.prices.get(model)
        if p is None:
            return 0.0
        return (prompt_tokens * p.input_per_mtok + completion_tokens * p.output_per_mtok) / 1e6

    def record(self, role: str, stage: str, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        e = self._entry(role, stage)
        e.calls += 1
        e.prompt_tokens += prompt_tokens
        e.completion_tokens += completion_tokens
        e.cost_usd += self.cost_of(model, prompt_tokens, completion_tokens)
        self._persist(role, stage)

    def record_hit(self, role: str, stage: str) -> None:
        self._entry(role, stage).cache_hits += 1
        self._persist(role, stage)

    def record_error(self, role: str, stage: str) -> None:
        self._entry(role, stage).errors += 1
        self._persist(role, stage)

    def record_incomplete(self, role: str, stage: str, kind: str) -> None:
        """A reply the endpoint ended itself: kind `truncated` (length) or `filtered` (content filter)."""
        e = self._entry(role, stage)
        setattr(e, kind, getattr(e, kind) + 1)
        self._persist(role, stage)

    def totals(self) -> dict[str, float]:
        t = LedgerEntry()
        for e in self.entries.values():
            t.calls += e.calls
            t.cache_hits += e.cache_hits
            t.prompt_tokens += e.prompt_tokens
            t.completion_tokens += e.completion_tokens
            t.cost_usd += e.cost_usd
            t.errors += e.errors
            t.truncated += e.truncated
            t.filtered += e.filtered
        d = asdict(t)
        d["tokens"] = t.prompt_tokens + t.completion_tokens
        return d

    def check_budget(self) -> None:
        """Raise before a new network call if any cap is already reached. Calls in flight count toward max_calls,
        so concurrent calls never overshoot it; tokens and cost are known only once answered."""
        t = self.totals()
        b = self.budget
        hint = "raise it (e.g. llm.budget.{k}=...) and rerun the same command to resume"
        if b.max_calls and t["calls"] + self.in_flight >= b.max_calls:
            held = f" ({self.in_flight} still in flight)" if self.in_flight else ""
            raise BudgetExceeded(
                f"budget cap hit: {t['calls']} calls{held} >= llm.budget.max_calls={b.max_calls}; "
                + hint.format(k="max_calls")
            )
        if b.max_tokens and t["tokens"] >= b.max_tokens:
            raise BudgetExceeded(
                f"budget cap hit: {t['tokens']} tokens >= llm.budget.max_tokens={b.max_tokens}; "
                + hint.format(k="max_tokens")
            )
        if b.max_cost_usd and t["cost_usd"] >= b.max_cost_usd:
            raise BudgetExceeded(
                f"budget cap hit: ${t['cost_usd']:.4f} >= llm.budget.max_cost_usd={b.max_cost_usd}; "
                + hint.format(k="max_cost_usd")
            )

    def to_dict(self) -> dict[str, Any]:
        return {"entries": {k: asdict(v) for k, v in sorted(self.entries.items())}, "totals": self.totals()}
