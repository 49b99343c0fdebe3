"""The length guard: an opt-in limit on the optimizer prompts that carry trajectories.

The reference shows analysts whole trajectories, never truncated, and so does this project by
default. A model with a small context window (the embedded SmolLM2: 8192 tokens per llama.cpp slot)
cannot read them whole; its endpoint refuses the prompt and the run stops. Setting
`llm.optimizer.context_tokens` turns the guard on: the analyst prompts and the slow-update / meta-skill
comparisons are then cut until their estimated size, plus the reply budget, fits that window. The
embedded preset sets 4096 (half its slot, for speed on 2 CPU cores: conf/llm/embedded.yaml). Unset (every
remote preset, the paper protocol), nothing is cut.

How it cuts, always visibly:
- Each long part of a trajectory (the target's system and user prompts, the spreadsheet preview, every
  conversation entry) keeps its start and its end; the middle becomes the line
  `[… N characters cut by the length guard …]`. One length `cap` applies
  to every part; the guard picks the largest cap that fits.
- When every part is already at the smallest cap (FLOOR) and it still does not fit (many short steps),
  whole entries from the middle of each conversation give way to one `[length guard]` line that counts them.
- The header (task, failure reason, steps) is never cut, and the verification block (`[verification]`:
  gold answers, got/expected cells) only as the last resort: when the headers and verification blocks
  alone are too long (several long ones in one minibatch), each is cut the same marked way, to the
  largest length that fits. In the comparison trajectories (already rendered text) the part before the
  first `[verification]` line is cut as one piece, and the rest is treated as the verification block.

Sizes are estimated, not tokenised: digits, punctuation and non-ASCII characters count one token each
(the SmolLM2 tokenizer splits digits one by one), other characters a quarter; on this project's prompts
the estimate is 0.9-1.4x the real count, and the limit keeps a further 10% margin.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Optional

from skillopt_envs.base import EpisodeResult
from skillopt_envs.chat import content_text

from skillopt_ray.prompts.render import PROMPT_BLOCKS, EpochPair, comparison_text, minibatch_text, sub_blocks

KEY = "llm.optimizer.context_tokens"
FLOOR = 160  # the smallest length a part is cut to (characters)
SAFETY = 0.9  # share of (context - reply budget) the estimated prompt may use
_HEAVY = re.compile(r"[0-9]|[^\w\s]|[^\x00-\x7f]")
_VERIFICATION = "[verification]"


def estimate_tokens(text: str) -> int:
    """A cautious token count: digits, punctuation and non-ASCII characters one each, the rest a quarter."""
    heavy = len(_HEAVY.findall(text))
    return heavy + -(-(len(text) - heavy) // 4)


def cut_lines(text: str, cap: int) -> str:
    """A tool observation cut to about `cap` characters at line boundaries: whole first and last lines, one marker
    counting the lines between (a table row or a numbered grep hit is never shown half); cut_middle when not even
    one whole line fits at either end."""
    if len(text) <= cap:
        return text
    lines = text.splitlines(keepends=True)
    head: list[str] = []
    used = 0
    for ln in lines:
        if used + len(ln) > cap // 2:
            break
        head.append(ln)
        used += len(ln)
    tail: list[str] = []
    for ln in reversed(lines[len(head) :]):
        if used + len(ln) > cap:
            break
        tail.insert(0, ln)
        used += len(ln)
    gone = lines[len(head) : len(lines) - len(tail)]
    if not head:  # the first line alone is longer than half the room
        return cut_middle(text, cap)
    chars = sum(len(ln) for ln in gone)
    marker = f"[… {len(gone):,} lines ({chars:,} characters) cut by the length guard …]\n"
    return "".join(head) + marker + "".join(tail)


COMMAND_KEEP = 400  # a tool call's command is kept whole up to this length, whatever the cap


def cut_middle(text: str, cap: int) -> str:
    """`text` when it has at most `cap` characters; else its first and last cap/2 with a marker between."""
    if len(text) <= cap:
        return text
    head = cap // 2
    tail = cap - head
    return f"{text[:head]}\n[… {len(text) - cap:,} characters cut by the length guard …]\n{text[len(text) - tail :]}"


# ---------- one trajectory, shrunk ----------


def _is_verification(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("role") == "system"


def _cut_entry(entry: Any, cap: int) -> Any:
    if not isinstance(entry, dict):
        return cut_middle(str(entry), cap)
    fields: tuple[str, ...]
    if entry.get("type") == "tool_call":
        fields = ("command", "output")
    elif "action" in entry and "env_feedback" in entry:
        fields = ("reasoning", "action", "env_feedback")
    else:
        fields = ("content",)
    out = dict(entry)
    for f in fields:
        if out.get(f):  # content parts count as their text, an image as a marker (never its base64)
            text = content_text(out[f]) if isinstance(out[f], list) else str(out[f])
            if entry.get("type") == "tool_call":  # the call stays readable and its output is cut between lines
                out[f] = cut_middle(text, max(cap, COMMAND_KEEP)) if f == "command" else cut_lines(text, cap)
            else:
                out[f] = cut_middle(text, cap)
    return out


def _drop_middle(entries: list[Any], keep: int) -> list[Any]:
    """At most `keep` non-verification entries, the first and the last ones; one marker entry where the rest were."""
    movable = [i for i, e in enumerate(entries) if not _is_verification(e)]
    if len(movable) <= keep:
        return entries
    kept = set(movable[: (keep + 1) // 2] + movable[len(movable) - keep // 2 :] if keep else [])
    dropped = len(movable) - len(kept)
    text = f"[… {dropped} conversation entries cut by the length guard ({KEY}) …]"
    marker: Optional[dict[str, str]] = {"role": "length guard", "content": text}
    out: list[Any] = []
    for i, e in enumerate(entries):
        if _is_verification(e) or i in kept:
            out.append(e)
        elif marker is not None:
            out.append(marker)
            marker = None
    return out


def shrink_result(r: EpisodeResult, cap: int, keep: Optional[int] = None, vcap: Optional[int] = None) -> EpisodeResult:
    """A copy whose sub-blocks and conversation entries are cut to `cap` characters; with `keep`, whose
    conversation keeps at most that many of them; with `vcap`, whose verification entries are cut to that
    length too (else they stay whole)."""
    info = dict(r.info)
    for _, key in PROMPT_BLOCKS:
        if info.get(key):
            info[key] = cut_middle(str(info[key]).rstrip("\n"), cap)
    if info.get("analyst_blocks"):
        info["analyst_blocks"] = [
            [title, cut_middle(str(text).rstrip("\n"), cap)] for title, text in info["analyst_blocks"]
        ]
    entries = [
        (_cut_entry(e, vcap) if vcap is not None else e) if _is_verification(e) else _cut_entry(e, cap)
        for e in r.trajectory
    ]
    if keep is not None:
        entries = _drop_middle(entries, keep)
    return dataclasses.replace(r, info=info, trajectory=entries)


def _longest_part(results: list[EpisodeResult]) -> int:
    sizes = [len(body) for r in results for _, body in sub_blocks(r.info)]
    for r in results:
        for e in r.trajectory:
            if isinstance(e, dict):
                sizes += [len(str(v)) for v in e.values() if isinstance(v, str)]
            else:
                sizes.append(len(str(e)))
    return max(sizes, default=FLOOR)


def cut_conversation(text: str, cap: int, vcap: Optional[int] = None) -> str:
    """A rendered conversation cut to `cap` characters before its first `[verification]` line; that line and all
    after it are kept whole, or with `vcap` cut to that length."""
    at = 0 if text.startswith(_VERIFICATION) else text.find("\n" + _VERIFICATION)
    if at < 0:
        return cut_middle(text, cap)
    tail = text[at:] if vcap is None else cut_middle(text[at:], vcap)
    return cut_middle(text[:at], cap) + tail


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> Optional[int]:
    """The largest n in [lo, hi] with ok(n), ok being monotone (true up to some n); None when ok(lo) is false."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------- the guard ----------


@dataclasses.dataclass(frozen=True)
class LengthGuard:
    """`prompt_tokens`: the estimated size a prompt (system + user message) may have; None = off."""

    prompt_tokens: Optional[int] = None

    @staticmethod
    def for_role(role: Any) -> LengthGuard:
        """The guard for an LLM role's config (LLMRoleConfig): off unless `context_tokens` is set."""
        if role.context_tokens is None:
            return LengthGuard()
        return LengthGuard(max(int((role.context_tokens - role.reply_budget()) * SAFETY), 0))

    @property
    def enabled(self) -> bool:
        return self.prompt_tokens is not None

    def fits(self, system: str, user: str) -> bool:
        return self.prompt_tokens is None or estimate_tokens(system) + estimate_tokens(user) <= self.prompt_tokens

    def analyst_user(self, results: list[EpisodeResult], system: str, user_for: Callable[[str], str]) -> str:
        """`user_for(minibatch_text(results))`, with the trajectories cut until system + user fit."""
        full = user_for(minibatch_text(results))
        if self.fits(system, full):
            return full

        def at(cap: int, keep: Optional[int] = None) -> str:
            return user_for(minibatch_text([shrink_result(r, cap, keep) for r in results]))

        cap = _largest(FLOOR, _longest_part(results), lambda c: self.fits(system, at(c)))
        if cap is not None:
            return at(cap)
        most = max((sum(not _is_verification(e) for e in r.trajectory) for r in results), default=0)
        keep = _largest(0, most, lambda k: self.fits(system, at(FLOOR, k)))
        if keep is not None:
            return at(FLOOR, keep)

        # the headers and verification blocks alone are too long (many long verification blocks): those are cut last
        def bare(vcap: int) -> str:
            return user_for(minibatch_text([shrink_result(r, FLOOR, 0, vcap) for r in results]))

        vcap = _largest(FLOOR, _longest_part(results), lambda v: self.fits(system, bare(v)))
        # vcap None: the prompt goes out as small as it gets; an endpoint that refuses it names the fix (llm/context.py)
        return bare(vcap if vcap is not None else FLOOR)

    def comparison_user(self, pairs: list[EpochPair], system: str, user_for: Callable[[str], str]) -> str:
        """`user_for(comparison_text(pairs))`, with each pair's trajectories cut until system + user fit."""
        full = user_for(comparison_text(pairs))
        if self.fits(system, full):
            return full

        def cut(p: EpochPair, cap: int, vcap: Optional[int]) -> EpochPair:
            q = p.copy()
            if p.get("prev_trajectory"):
                q["prev_trajectory"] = cut_conversation(str(p["prev_trajectory"]), cap, vcap)
            if p.get("curr_trajectory"):
                q["curr_trajectory"] = cut_conversation(str(p["curr_trajectory"]), cap, vcap)
            return q

        def at(cap: int, vcap: Optional[int] = None) -> str:
            return user_for(comparison_text([cut(p, cap, vcap) for p in pairs]))

        sides = [p.get(k) for p in pairs for k in ("prev_trajectory", "curr_trajectory")]
        longest = max((len(str(s or "")) for s in sides), default=FLOOR)
        cap = _largest(FLOOR, longest, lambda c: self.fits(system, at(c)))
        if cap is not None:
            return at(cap)
        vcap = _largest(
            FLOOR, longest, lambda v: self.fits(system, at(FLOOR, v))
        )  # the verification blocks last, as above
        return at(FLOOR, vcap if vcap is not None else FLOOR)
