"""custom_search: the reference's controller-run web search loop, against a search proxy you run.

The target never calls tools itself: on a non-final round it returns either up to Q search queries in
<search_queries>[...]</search_queries> or an answer; the controller runs the queries (HTTP POST of
{query, max_num_results, provider} to env.options.search_api_url, the raw token from the environment
variable env.options.search_auth_env as the Authorization header) and sends the results back with the
next round's policy. The final round must answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any

from skillopt_envs.officeqa.prompts import skill_section
from skillopt_envs.officeqa.scoring import extract_answer, has_answer_tag

_QUERIES = re.compile(r"<search_queries>(.*?)</search_queries>", re.IGNORECASE | re.DOTALL)
_LIST_KEYS = ("results", "items", "data", "organic", "organic_results", "search_results", "webPages", "value")
RETRY_STATUS = {408, 429}
BACKOFF_S = (1, 2, 4, 8)
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"


def system_prompt(skill: str, max_turns: int, max_queries: int) -> str:
    protocol = (
        f"You answer questions about U.S. Treasury Bulletins with the help of web search run for you, over at most "
        f"{max_turns} model rounds. On a round that is not the last, reply with EITHER a JSON list of at most "
        f"{max_queries} search queries inside <search_queries>...</search_queries> OR a final answer, never both. "
        "The last round must give the answer. When snippets disagree, reconcile them from the most authoritative "
        "source, and keep the answer concise."
    )
    closing = "When you are ready, give the final answer inside <answer>...</answer>."
    return (protocol + "\n\n" + skill_section(skill) + closing).rstrip()


def round_policy(turn: int, max_turns: int, max_queries: int) -> str:
    """The round's policy lines: a non-final round allows an answer or up to Q queries and says how many rounds
    remain afterwards; the final round demands the answer and forbids queries."""
    if turn < max_turns:
        return (
            f"## Round Policy\nThis is round {turn}/{max_turns}. Reply with either a final answer in "
            f"<answer>...</answer> or at most {max_queries} queries in <search_queries>[...]</search_queries>. "
            f"At most {max_turns - turn} model rounds remain after this one."
        )
    return (
        f"## Round Policy\nThis is the final round ({turn}/{max_turns}). Give the final answer in "
        "<answer>...</answer> now; do not emit <search_queries>."
    )


def first_user_tail(turn: int, max_turns: int, max_queries: int) -> str:
    return (
        round_policy(turn, max_turns, max_queries)
        + "\n\n## Output Format\nReply with only search queries or only a final answer."
        + "\n\nDo not use any built-in web search of your own: the controller runs the searches."
    )


def extract_queries(reply: str) -> list[str]:
    """The queries of the first <search_queries> block: JSON (a dict's queries / search_queries / query, a list, a
    string), else its non-empty lines stripped of list marks and quotes; one query split on ; or , when that gives
    more than one; repeats dropped. No block: []."""
    m = _QUERIES.search(reply or "")
    if not m:
        return []
    body = m.group(1).strip()
    found: list[str] = []
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("queries", "search_queries", "query"):
            if key in data:
                v = data[key]
                found = [v] if isinstance(v, str) else [str(x) for x in v] if isinstance(v, list) else []
                break
    elif isinstance(data, list):
        found = [str(x) for x in data]
    elif isinstance(data, str):
        found = [data]
    found = [q.strip() for q in found if q.strip()]
    if not found:
        found = [ln.strip(" -*\t\r\n\"'") for ln in body.splitlines()]
        found = [q for q in found if q]
    if len(found) <= 1:
        one = found[0] if found else ""
        parts = [p.strip().strip("\"'").strip() for p in re.split(r"[;,]", one)]
        parts = [p for p in parts if p]
        if len(parts) > 1:
            found = parts
    return list(dict.fromkeys(found))


def _items(data: Any) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in _LIST_KEYS:
            if isinstance(data.get(key), list):
                return data[key]
        for v in data.values():
            inner = _items(v) if isinstance(v, dict) else []
            if inner:
                return inner
    return []


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((str(d[k]) for k in keys if d.get(k)), "")


def render_results(query: str, body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return f"Query: {query}\n\n{body or '[empty response]'}"
    items = _items(data)
    if not items:
        return f"Query: {query}\n{json.dumps(data, ensure_ascii=False) if data else '[no results]'}"
    blocks = []
    for i, it in enumerate(items, start=1):
        d = it if isinstance(it, dict) else {"snippet": str(it)}
        title = _first(d, ("title", "name", "headline", "source")) or f"Result {i}"
        url = _first(d, ("url", "link", "href", "display_url"))
        snippet = _first(d, ("snippet", "description", "body", "text", "content"))
        blocks.append(f"[{i}] {title}\nURL: {url}\nSnippet: {snippet}")
    return f"Query: {query}\n" + "\n\n".join(blocks)


def search_once(query: str, url: str, token: str, provider: str, n: int, timeout: float) -> str:
    """One query with the reference's retries (408, 429, >= 500, connection errors and timeouts; 1, 2, 4, 8 s)."""
    payload = json.dumps({"query": query, "max_num_results": n, "provider": provider}).encode()
    headers = {"Authorization": token, "Content-Type": "application/json", "User-Agent": USER_AGENT}
    for attempt in range(len(BACKOFF_S) + 1):
        try:
            req = urllib.request.Request(url, data=payload, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            if not (e.code in RETRY_STATUS or e.code >= 500) or attempt == len(BACKOFF_S):
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError):
            if attempt == len(BACKOFF_S):
                raise
        time.sleep(BACKOFF_S[attempt])
    raise AssertionError("unreachable")


async def run_custom_search(ep: Any) -> None:
    """The loop on an Episode (benchmark.py): rounds 1..max, each a call without tools."""
    o = ep.opts
    token = os.environ.get(o.search_auth_env, "") if o.search_auth_env else ""
    if not o.search_api_url or not token:
        ep.fail = (
            f"error: custom_search needs env.options.search_api_url and the environment variable {o.search_auth_env}"
        )
        return
    for turn in range(1, ep.max_turns + 1):
        reply = await ep.call(turn, tools=False)
        response = reply.content or ""
        ep.response = response
        ep.messages.append({"role": "assistant", "content": response})
        ep.conversation.append({"type": "message", "turn": turn, "content": response})
        if has_answer_tag(response):
            ep.final_answer = extract_answer(response)
            return
        if turn == ep.max_turns:
            ep.fail = f"Final round ({ep.max_turns}) ended without <answer>...</answer>"
            return
        queries = extract_queries(response)[: o.max_queries_per_turn]
        if not queries:
            ep.fail = "Model neither produced search queries nor a final answer"
            return
        blocks = []
        for i, q in enumerate(queries, start=1):
            try:
                body = await asyncio.to_thread(
                    search_once,
                    q,
                    o.search_api_url,
                    token,
                    o.search_provider,
                    o.search_max_num_results,
                    o.search_timeout_seconds,
                )
                text = render_results(q, body)
            except Exception as e:  # noqa: BLE001 - a failed query is part of the observation, as in the reference
                text = f"Query: {q}\n\n[search error: {e}]"
            blocks.append(f"## Query {i}\n{text}")
        results = "\n\n".join(blocks)
        ep.calls += 1
        ep.conversation.append(
            {"type": "tool_call", "turn": turn, "command": f"custom_search({queries!r})", "output": results}
        )
        nxt = (
            f"## Search Results Round {turn}\n{results}\n\n"
            + round_policy(turn + 1, ep.max_turns, o.max_queries_per_turn)
            + "\n\nFollow the round policy exactly."
        )
        ep.messages.append({"role": "user", "content": nxt})
        ep.conversation.append({"role": "user", "turn": turn + 1, "content": nxt})
