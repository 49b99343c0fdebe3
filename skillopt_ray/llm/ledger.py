"""Token, call and cost ledger per role and stage, with budget caps."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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


class Ledger:
    def __init__(self, prices: dict[str, PriceConfig], budget: BudgetConfig, state: dict[str, Any] | None = None):
        self.prices = prices
        self.budget = budget
        self.entries: dict[str, LedgerEntry] = {}
        for k, v in (state or {}).get("entries", {}).items():
            self.entries[k] = LedgerEntry(**v)

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

    def record_hit(self, role: str, stage: str) -> None:
        self._entry(role, stage).cache_hits += 1

    def record_error(self, role: str, stage: str) -> None:
        self._entry(role, stage).errors += 1

    def totals(self) -> dict[str, float]:
        t = LedgerEntry()
        for e in self.entries.values():
            t.calls += e.calls
            t.cache_hits += e.cache_hits
            t.prompt_tokens += e.prompt_tokens
            t.completion_tokens += e.completion_tokens
            t.cost_usd += e.cost_usd
            t.errors += e.errors
        d = asdict(t)
        d["tokens"] = t.prompt_tokens + t.completion_tokens
        return d

    def check_budget(self) -> None:
        """Raise before a new network call if any cap is already reached."""
        t = self.totals()
        b = self.budget
        hint = "raise it (e.g. llm.budget.{k}=...) and rerun the same command to resume"
        if b.max_calls and t["calls"] >= b.max_calls:
            raise BudgetExceeded(f"budget cap hit: {t['calls']} calls >= llm.budget.max_calls={b.max_calls}; " + hint.format(k="max_calls"))
        if b.max_tokens and t["tokens"] >= b.max_tokens:
            raise BudgetExceeded(f"budget cap hit: {t['tokens']} tokens >= llm.budget.max_tokens={b.max_tokens}; " + hint.format(k="max_tokens"))
        if b.max_cost_usd and t["cost_usd"] >= b.max_cost_usd:
            raise BudgetExceeded(
                f"budget cap hit: ${t['cost_usd']:.4f} >= llm.budget.max_cost_usd={b.max_cost_usd}; " + hint.format(k="max_cost_usd")
            )

    def to_dict(self) -> dict[str, Any]:
        return {"entries": {k: asdict(v) for k, v in sorted(self.entries.items())}, "totals": self.totals()}
