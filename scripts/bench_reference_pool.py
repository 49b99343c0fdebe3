"""The reference's way to run an eval, measured beside the runner: a plain thread pool of model calls.

    .venv/bin/python scripts/bench_reference_pool.py TASKS.jsonl SKILL.md BASE_URL WORKERS OUT.json

The reference runs a chat benchmark's items in a `ThreadPoolExecutor` (one OpenAI SDK client, `WORKERS` threads,
one call per item) and scores each reply as it comes. This script does the same for a tasks file of
`scripts/bench_small_eval.py` (items `{"id", "prompt", "answer"}`, the answer in `<answer>...</answer>`), so that
the small-eval bench can run it in the same round as the runner's own engines: the ratios between them hold under
whatever load the machine has. It writes `{"scores": {id: 0|1}}` to OUT.json. It is a yardstick, not a product.
"""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def main() -> None:
    tasks, skill, base_url, workers, out = sys.argv[1:6]
    from openai import OpenAI

    rows = [json.loads(line) for line in Path(tasks).read_text().splitlines() if line.strip()]
    system = Path(skill).read_text()
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=2)

    def one(row: dict[str, Any]) -> int:
        reply = client.chat.completions.create(
            model="default",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": row["prompt"]}],
        )
        m = re.search(r"<answer>(.*?)</answer>", reply.choices[0].message.content or "", re.S)
        return int(m is not None and m.group(1).strip() == str(row["answer"]).strip())

    with ThreadPoolExecutor(int(workers)) as pool:
        scores = dict(zip((r["id"] for r in rows), pool.map(one, rows)))
    Path(out).write_text(json.dumps({"scores": scores}))
    print(f"reference pool: {sum(scores.values())}/{len(scores)} correct")


if __name__ == "__main__":
    main()
