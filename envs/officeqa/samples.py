"""Built-in OfficeQA-format samples: four fictional Treasury-Bulletin-like documents in the parsed layout
(`treasury_bulletins_parsed/transformed/*.txt` for the tools, `jsons/*.json` page elements for the oracle
context) and questions whose answers must be looked up in them.

The figures are drawn from a seeded generator, so no model knows them. Most questions cite their bulletin
without a page number, so no oracle page is given and the agent has to glob, grep and read; a few cite a
page (the oracle path). Some questions need two documents and a subtraction.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.kit import ensure_samples as made_once
from skillopt_envs.kit import samples_root

BULLETINS = [(1944, 1, "January"), (1944, 2, "February"), (1950, 6, "June"), (1962, 12, "December")]
SOURCES = [
    "Individual income taxes",
    "Corporation income taxes",
    "Excise taxes",
    "Customs duties",
    "Estate and gift taxes",
]
MONTHS = ["July", "August", "September", "October", "November", "December"]
SPLIT_SIZES = {"train": 8, "val": 4, "test": 4}
VERSION = "officeqa_samples_v1"
FILLER = (
    "Figures are on the basis of daily Treasury statements unless otherwise noted. Detail may not add to totals "
    "because of rounding. Revised figures replace those published in earlier issues of the Bulletin."
)


@dataclass
class Bulletin:
    year: int
    month: int
    month_name: str
    receipts: dict[str, tuple[float, float]]  # source -> (previous fiscal year, fiscal year)
    debt: dict[str, float]  # month -> public debt outstanding at the end of the month
    gold: dict[str, float]  # month -> gold stock

    @property
    def name(self) -> str:
        return f"treasury_bulletin_{self.year}_{self.month:02d}"

    @property
    def fy(self) -> int:
        return self.year - 1

    @property
    def url(self) -> str:
        return f"https://fraser.stlouisfed.org/title/treasury-bulletin-407/{self.month_name.lower()}-{self.year}-sample"


def _money(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 1)


def make_bulletins(seed: int = 7) -> list[Bulletin]:
    rng = random.Random(seed)
    out = []
    for year, month, name in BULLETINS:
        receipts = {s: (_money(rng, 200, 9000), _money(rng, 200, 9000)) for s in SOURCES}
        debt = {m: _money(rng, 40000, 260000) for m in MONTHS}
        gold = {m: _money(rng, 15000, 24000) for m in MONTHS}
        out.append(Bulletin(year, month, name, receipts, debt, gold))
    return out


def _fmt(x: float) -> str:
    return f"{x:,.1f}"


def _pages(b: Bulletin) -> list[list[tuple[str, str]]]:
    """The bulletin's pages, each a list of (text for the .txt, HTML or text for the JSON element)."""
    total_prev = sum(v[0] for v in b.receipts.values())
    total = sum(v[1] for v in b.receipts.values())
    intro = (
        f"TREASURY BULLETIN\n{b.month_name} {b.year}\n\nSummary of Fiscal Operations\n\n"
        f"Budget receipts in the fiscal year {b.fy} came to {_fmt(total)} million dollars, against {_fmt(total_prev)} "
        f"million dollars in the fiscal year {b.fy - 1}. {FILLER}"
    )
    prose = "\n".join(f"Note {i}. {FILLER}" for i in range(1, 31))

    def table(title: str, head: list[str], rows: list[list[str]]) -> tuple[str, str]:
        md = [f"{title}", "", "| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
        md += ["| " + " | ".join(r) + " |" for r in rows]
        cells = "".join(f"<th>{h}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
        return "\n".join(md), f"<p>{title}</p><table><tr>{cells}</tr>{body}</table>"

    receipts_rows = [[s, _fmt(a), _fmt(c)] for s, (a, c) in b.receipts.items()]
    receipts_rows.append(["Total budget receipts", _fmt(total_prev), _fmt(total)])
    t1 = table(
        "Table 1.- Budget receipts by source (in millions of dollars)",
        ["Source", f"Fiscal year {b.fy - 1}", f"Fiscal year {b.fy}"],
        receipts_rows,
    )
    t2 = table(
        f"Table 2.- Public debt outstanding, end of month, calendar year {b.fy} (in millions of dollars)",
        ["Month", "Public debt"],
        [[m, _fmt(v)] for m, v in b.debt.items()],
    )
    t3 = table(
        f"Table 3.- Monetary gold stock, end of month, calendar year {b.fy} (in millions of dollars)",
        ["Month", "Gold stock"],
        [[m, _fmt(v)] for m, v in b.gold.items()],
    )
    return [
        [(intro, intro)],
        [(prose, prose), t1],
        [(prose, prose), t2],
        [t3, (f"Footnote. {FILLER}", f"Footnote. {FILLER}")],
    ]


def write_bulletin(b: Bulletin, transformed: Path, jsons: Path) -> None:
    pages = _pages(b)
    text = "\n\n".join(t for page in pages for t, _ in page) + "\n"
    (transformed / f"{b.name}.txt").write_text(text, encoding="utf-8")
    elements = [
        {"type": "text", "content": el, "bbox": [{"page_id": n, "coord": [0, 0, 1, 1]}]}
        for n, page in enumerate(pages, start=1)
        for _, el in page
    ]
    payload = {"document": {"id": b.name, "elements": elements}}
    (jsons / f"{b.name}.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")


def make_questions(bulletins: list[Bulletin], seed: int = 5) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    qs: list[dict[str, Any]] = []
    for b in bulletins:
        src = rng.choice(SOURCES[:4])
        qs.append(
            {
                "category": "easy",
                "question": f"According to the {b.month_name} {b.year} Treasury Bulletin, how much did {src.lower()} "
                f"bring in during the fiscal year {b.fy}, in millions of dollars?",
                "answer": f"{b.receipts[src][1]:.1f}",
                "source_files": f"{b.name}.txt",
                "source_docs": b.url,
            }
        )
        month = rng.choice(MONTHS)
        qs.append(
            {
                "category": "easy",
                "question": f"What was the public debt outstanding at the end of {month} {b.fy}, as reported in the "
                f"{b.month_name} {b.year} Treasury Bulletin, in millions of dollars?",
                "answer": f"{b.debt[month]:.1f}",
                "source_files": f"{b.name}.txt",
                # this one cites its page: the oracle page context carries Table 2
                "source_docs": f"{b.url}?page=3",
            }
        )
    for a, b in zip(bulletins, bulletins[1:] + bulletins[:1]):
        month = rng.choice(MONTHS)
        diff = round(b.gold[month] - a.gold[month], 1)
        qs.append(
            {
                "category": "hard",
                "question": f"By how much did the monetary gold stock at the end of {month} differ between calendar year "
                f"{b.fy} (per the {b.month_name} {b.year} bulletin) and calendar year {a.fy} (per the {a.month_name} "
                f"{a.year} bulletin)? Give the later figure minus the earlier one, in millions of dollars.",
                "answer": f"{diff:.1f}",
                "source_files": f"{b.name}.txt\r\n{a.name}.txt",
                "source_docs": f"{b.url}\r\n{a.url}",
            }
        )
        total = round(sum(v[1] for v in a.receipts.values()), 1)
        qs.append(
            {
                "category": "hard",
                "question": f"What were total budget receipts in the fiscal year {a.fy} according to the "
                f"{a.month_name} {a.year} Treasury Bulletin, in millions of dollars?",
                "answer": f"{total:.1f}",
                "source_files": f"{a.name}.txt",
                "source_docs": a.url,
            }
        )
    rng.shuffle(qs)
    for i, q in enumerate(qs, start=1):
        q["uid"] = f"SAMPLE{i:03d}"
    return qs


FIELDS = ["uid", "question", "answer", "source_docs", "source_files", "category"]


def ensure_samples(sample_dir: Optional[str] = None) -> Path:
    """The sample data folder (generated on first use): train/ val/ test/ CSVs and treasury_bulletins_parsed/."""
    return made_once(samples_root(sample_dir, VERSION), _write, "skillopt_envs.officeqa.samples")


def _write(tmp: Path) -> None:
    parsed = tmp / "treasury_bulletins_parsed"
    (parsed / "transformed").mkdir(parents=True)
    (parsed / "jsons").mkdir()
    bulletins = make_bulletins()
    for b in bulletins:
        write_bulletin(b, parsed / "transformed", parsed / "jsons")
    questions, start = make_questions(bulletins), 0
    for split, n in SPLIT_SIZES.items():
        (tmp / split).mkdir()
        with (tmp / split / f"{split}.csv").open("w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(questions[start : start + n])
        start += n
