"""Built-in SearchQA-format sample items (fictional facts, so no model knows them by heart).

Each context is several `[DOC]` documents: one states the fact, the others are distractors
about other entities, so the answer must be read, not guessed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Optional

from skillopt_envs.kit import ensure_samples, samples_root
from skillopt_envs.searchqa.data import SearchQAItem

MADE_BY = "skillopt_ray skillopt_envs.searchqa.samples"  # the sample folder's COMPLETE marker says who wrote it

PLACES = [
    "Zorland",
    "Vellmoor",
    "Quandria",
    "Ostrevia",
    "Palumbo Isles",
    "Karthane",
    "Brisca",
    "Telmund",
    "Yarrow Reach",
    "Danquell",
    "Morvia",
    "Essenhold",
]
CITIES = [
    "Quillton",
    "Marrowgate",
    "Sel Haven",
    "Dunmere",
    "Astrabel",
    "Corvin",
    "Halloway",
    "Peltier",
    "Rushford",
    "Lindqvist",
    "Obrec",
    "Faymouth",
]
RIVERS = [
    "Ambrel",
    "Sutter",
    "Kovash",
    "Lune",
    "Orrin",
    "Teague",
    "Wendle",
    "Ysolde",
    "Brannock",
    "Caddis",
    "Merrow",
    "Pell",
]
SPLIT_SIZES = {"train": 12, "val": 6, "test": 6}


def _doc(title: str, text: str) -> str:
    return f"[DOC] [TLE] {title} [PAR] {text}"


def make_items(seed: int = 11) -> list[SearchQAItem]:
    rng = random.Random(seed)
    items: list[SearchQAItem] = []
    for i, place in enumerate(PLACES * 2):
        city, river = CITIES[(i * 5) % len(CITIES)], RIVERS[(i * 7) % len(RIVERS)]
        if i < len(PLACES):
            q, a, fact = (
                f"What is the capital city of {place}?",
                city,
                f"The capital of {place} is {city}, a port on the {river}.",
            )
        else:
            q, a, fact = (
                f"Which river flows through the capital of {place}?",
                river,
                f"{city}, capital of {place}, lies on the {river} river.",
            )
        others = rng.sample([p for p in PLACES if p != place], 3)
        docs = [
            _doc(
                o,
                f"{o} is known for its {rng.choice(['wool', 'glass', 'tea', 'salt'])} trade and its old {rng.choice(RIVERS)} bridge.",
            )
            for o in others
        ]
        docs.insert(rng.randrange(len(docs) + 1), _doc(place, fact))
        items.append({"id": f"sample-{i:02d}", "question": q, "context": " ".join(docs), "answers": [a]})
    rng.shuffle(items)
    return items


def ensure_sample_items(sample_dir: Optional[str] = None) -> Path:
    """The sample folder (<split>/items.json), made once."""
    return ensure_samples(samples_root(sample_dir, "searchqa_samples_v1"), _write, MADE_BY)


def _write(tmp: Path) -> None:
    items, start = make_items(), 0
    for split, n in SPLIT_SIZES.items():
        (tmp / split).mkdir()
        (tmp / split / "items.json").write_text(json.dumps(items[start : start + n], indent=1))
        start += n
