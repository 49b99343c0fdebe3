"""Built-in DocVQA-format samples: document pages rendered as PNG images, with questions answered on the page.

Three layouts, each a DocVQA question type: a form (`form`), a table (`table/list`) and a letter
(`layout`). Text is drawn with a TrueType font (DejaVu Sans, which matplotlib ships; Pillow's own font
otherwise). Every page also gets its text layer (`<image>.txt`: the drawn lines, top to bottom), which a
target that sees no images reads instead (env.options.page_input=text). The names, numbers and dates are
made up, so no model knows the answers by heart. The splits are written in the reference's runnable
format (a CSV per split folder), so the samples go through the same loader as real data.
"""

from __future__ import annotations

import csv
import importlib.util
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.kit import ensure_samples as made_once
from skillopt_envs.kit import samples_root

MADE_BY = "skillopt_envs.docvqa.samples"  # the sample folder's COMPLETE marker says who wrote it

SPLIT_SIZES = {"train": 12, "val": 6, "test": 6}
PAGE_SIZE = (816, 1056)  # a letter page at 96 dpi
VERSION = "v1"
CSV_COLUMNS = ("questionId", "question", "answer", "image_path", "topic", "docId", "source_split")

COMPANIES = [
    "Halvard Tobacco Co.",
    "Brindle & Oates Ltd",
    "Quenmore Foods Inc.",
    "Sorrel Chemical Corp.",
    "Tarn Valley Mills",
    "Ostby Research Group",
    "Pellham Paper Works",
    "Corvane Industries",
]
PEOPLE = [
    "Dr. Alma Vesk",
    "Mr. Jonas Treil",
    "Ms. Petra Olund",
    "Dr. Ravi Mendel",
    "Mrs. Ida Kroll",
    "Mr. Colm Brady",
    "Ms. Sunniva Ard",
    "Dr. Felix Harrow",
]
TITLES = ["Director of Research", "Vice President, Sales", "Plant Manager", "Chief Chemist", "Treasurer"]
DEPARTMENTS = ["Purchasing", "Research & Development", "Quality Control", "Marketing", "Accounts Payable"]
REGIONS = ["North", "South", "East", "West", "Central"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


@dataclass
class Line:
    text: str
    box: tuple[int, int, int, int]  # left, top, right, bottom in pixels
    origin: tuple[int, int] = (0, 0)  # where it was drawn
    size: int = 18  # font size


@dataclass
class Page:
    """A rendered page's content: its lines (the text layer) and one question with its answer."""

    layout: str
    topic: str
    lines: list[Line] = field(default_factory=list)
    question: str = ""
    answer: str = ""

    @property
    def text_layer(self) -> str:
        return "\n".join(ln.text for ln in self.lines)


def font_path() -> Optional[str]:
    """DejaVu Sans from matplotlib's data, found without importing matplotlib."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    ttf = Path(list(spec.submodule_search_locations)[0]) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
    return str(ttf) if ttf.is_file() else None


def load_font(size: int) -> Any:
    from PIL import ImageFont

    path = font_path()
    return ImageFont.truetype(path, size) if path else ImageFont.load_default(size)


class Canvas:
    """Draws lines of text top to bottom and records each one's box."""

    def __init__(self, page: Page):
        from PIL import Image, ImageDraw

        self.page = page
        self.image = Image.new("L", PAGE_SIZE, 255)
        self.draw = ImageDraw.Draw(self.image)
        self.fonts: dict[int, Any] = {}

    def text(self, x: int, y: int, text: str, size: int = 18) -> Line:
        font = self.fonts.setdefault(size, load_font(size))
        self.draw.text((x, y), text, fill=0, font=font)
        box = tuple(int(v) for v in self.draw.textbbox((x, y), text, font=font))
        line = Line(text, box, (x, y), size)  # type: ignore[arg-type]
        self.page.lines.append(line)
        return line

    def rule(self, y: int, x0: int = 60, x1: int = PAGE_SIZE[0] - 60) -> None:
        self.draw.line((x0, y, x1, y), fill=0, width=2)


def _date(rng: random.Random) -> str:
    return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1961, 1999)}"


def form_page(rng: random.Random) -> tuple[Page, Any]:
    page = Page("form", "form")
    c = Canvas(page)
    company = rng.choice(COMPANIES)
    fields = {
        "Name": rng.choice(PEOPLE),
        "Department": rng.choice(DEPARTMENTS),
        "Date": _date(rng),
        "Account No.": f"{rng.choice('ABCDKMRT')}{rng.choice('ABCDKMRT')}-{rng.randint(10000, 99999)}",
        "Amount": f"${rng.randint(100, 9999):,}.{rng.randint(0, 99):02d}",
        "Voucher No.": str(rng.randint(100000, 999999)),
    }
    c.text(60, 50, company.upper(), 26)
    c.text(60, 95, "REQUEST FOR PAYMENT", 22)
    c.rule(135)
    y = 170
    for label, value in fields.items():
        c.text(80, y, f"{label}:", 18)
        c.text(300, y, value, 18)
        c.draw.line((295, y + 26, 700, y + 26), fill=120, width=1)
        y += 60
    c.text(80, y + 40, "Approved by: ______________________", 16)
    label = rng.choice(["Account No.", "Amount", "Date", "Voucher No.", "Department"])
    questions = {
        "Account No.": "What is the account number on the form?",
        "Amount": "What amount is requested on the form?",
        "Date": "What date is written on the form?",
        "Voucher No.": "What is the voucher number?",
        "Department": "Which department is named on the form?",
    }
    page.question, page.answer = questions[label], fields[label]
    return page, c.image


def table_page(rng: random.Random) -> tuple[Page, Any]:
    page = Page("table", "table/list")
    c = Canvas(page)
    year = rng.randint(1970, 1999)
    product = rng.choice(["Shipments (cases)", "Net Sales ($000)", "Units Produced"])
    c.text(60, 50, rng.choice(COMPANIES), 24)
    c.text(60, 92, f"{product} by Region, {year}", 20)
    c.rule(130)
    cols = ["Region", "Q1", "Q2", "Q3", "Q4"]
    xs = [70, 260, 390, 520, 650]
    for x, h in zip(xs, cols):
        c.text(x, 150, h, 18)
    c.rule(182)
    regions = rng.sample(REGIONS, 4)
    cells: dict[tuple[str, str], str] = {}
    y = 200
    for r in regions:
        c.text(xs[0], y, r, 18)
        for x, q in zip(xs[1:], cols[1:]):
            v = f"{rng.randint(1000, 99999):,}"
            cells[(r, q)] = v
            c.text(x, y, v, 18)
        y += 44
    c.rule(y + 4)
    c.text(70, y + 30, f"Source: regional office reports, {year}.", 14)
    region, quarter = rng.choice(regions), rng.choice(cols[1:])
    page.question = f"What is the {quarter} value for the {region} region?"
    page.answer = cells[(region, quarter)]
    return page, c.image


def letter_page(rng: random.Random) -> tuple[Page, Any]:
    page = Page("letter", "layout")
    c = Canvas(page)
    company, sender, recipient = rng.choice(COMPANIES), rng.choice(PEOPLE), rng.choice(PEOPLE)
    title, date = rng.choice(TITLES), _date(rng)
    city = rng.choice(["Richmond, Virginia", "Winston-Salem, N.C.", "Louisville, Kentucky", "Dayton, Ohio"])
    c.text(60, 50, company, 26)
    c.text(60, 90, city, 16)
    c.rule(120)
    c.text(500, 150, date, 18)
    c.text(60, 210, recipient, 18)
    c.text(60, 260, f"Dear {recipient.split()[0]} {recipient.split()[-1]}:", 18)
    body = [
        "Thank you for your letter regarding the samples sent to our laboratory.",
        f"The results of the tests will be reviewed by the {rng.choice(DEPARTMENTS)} staff",
        "and a full report will follow within the month.",
    ]
    y = 310
    for ln in body:
        c.text(60, y, ln, 16)
        y += 32
    c.text(60, y + 50, "Sincerely,", 18)
    c.text(60, y + 120, sender, 18)
    c.text(60, y + 150, title, 16)
    which = rng.choice(["sender", "date", "title"])
    if which == "sender":
        page.question, page.answer = "Who signed the letter?", sender
    elif which == "date":
        page.question, page.answer = "What is the date of the letter?", date
    else:
        page.question, page.answer = "What is the title of the person who signed the letter?", title
    return page, c.image


LAYOUTS: list[Callable[[random.Random], tuple[Page, Any]]] = [form_page, table_page, letter_page]


def make_page(index: int, seed: int = 7) -> tuple[Page, Any]:
    """Page `index` (its layout cycles form, table, letter), deterministic for (index, seed)."""
    rng = random.Random(seed * 100003 + index)
    return LAYOUTS[index % len(LAYOUTS)](rng)


def write_samples(root: Path, sizes: dict[str, int], seed: int = 7) -> None:
    """Pages, text layers and train/val/test CSVs (relative image paths) under `root`."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    index = 0
    for split, n in sizes.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        rows = []
        for _ in range(n):
            page, image = make_page(index, seed)
            qid, doc = str(90000 + index), f"s{index:04d}"
            rel = f"images/q{qid}_d{doc}.png"
            image.save(root / rel, optimize=False, compress_level=6)
            (root / rel).with_suffix(".txt").write_text(page.text_layer + "\n", encoding="utf-8")
            rows.append(
                {
                    "questionId": qid,
                    "question": page.question,
                    "answer": repr([page.answer]),
                    "image_path": rel,
                    "topic": page.topic,
                    "docId": doc,
                    "source_split": "generated",
                }
            )
            index += 1
        with (root / split / f"{split}.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            w.writerows(rows)


def ensure_samples(sample_dir: Optional[str] = None, sizes: Optional[dict[str, int]] = None) -> Path:
    """The sample folder, generated on first use (atomically: a half-written folder is never used)."""
    root = samples_root(sample_dir, f"docvqa_samples_{VERSION}")
    return made_once(root, lambda tmp: write_samples(tmp, sizes or SPLIT_SIZES), MADE_BY)
