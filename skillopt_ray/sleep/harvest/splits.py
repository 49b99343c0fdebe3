"""Stable splits: a hash of the task id picks train / val / test, and a split once given is kept forever. A task new
to this harvest may be moved from its hashed split so that each split has a task, from four tasks on train has two
(a hash alone split 8 tasks 1 / 3 / 4), and then val grows towards the gate's floor from test (which keeps one) and
from train (which keeps two): the night's gate counts each validation task once, and fewer than its floor (read from
the night's composed config; VAL_FLOOR for the sleep preset's gate) can never accept. A task placed before never
moves, so a validation task stays one."""

from __future__ import annotations

import hashlib
import re
import unicodedata

SPLITS = ("train", "val", "test")
MIN_TRAIN, MIN_TRAIN_FROM = 2, 4  # train keeps two tasks where a harvest has four or more
# the fewest validation tasks the sleep preset's gate can accept on (gate_seq_task_p 0.05: 2^-5 <= 0.05 < 2^-4);
# tests/sleep/test_sleep_night_leftout.py keeps the two in step
VAL_FLOOR = 5
_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]")


def normalise_prompt(prompt: str) -> str:
    """Lower case, no punctuation, single spaces: two requests that differ only so are one task."""
    text = unicodedata.normalize("NFKC", prompt).lower()
    return _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()


def task_id(prompt: str) -> str:
    return "h-" + hashlib.sha256(normalise_prompt(prompt).encode("utf-8")).hexdigest()[:12]


def hashed_split(tid: str, val_fraction: float, test_fraction: float) -> str:
    """The id's hash in [0, 1) against the fractions: the same id always lands in the same split."""
    u = int(hashlib.sha256(tid.encode("utf-8")).hexdigest()[:8], 16) / 2**32
    if u < val_fraction:
        return "val"
    if u < val_fraction + test_fraction:
        return "test"
    return "train"


def assign(
    ids: list[str], known: dict[str, str], val_fraction: float, test_fraction: float, val_floor: int = VAL_FLOOR
) -> dict[str, str]:
    """Every id's split: the one `known` holds (a task seen in val stays in val), else its hash's; val grows towards
    `val_floor` (the night's gate's, read from its composed config) with new tasks."""
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(f"val {val_fraction} and test {test_fraction} fractions must be >= 0 and sum below 1")
    out = {i: known.get(i) or hashed_split(i, val_fraction, test_fraction) for i in ids}
    new = [i for i in sorted(ids) if i not in known]
    _fill_empty(out, new)
    _train_floor(out, new)
    _val_floor(out, new, val_floor)
    return out


def _fill_empty(out: dict[str, str], new: list[str]) -> None:
    """Each split gets at least one task (the custom-task loader refuses an empty split), taken from a new task
    of a split that has two or more; a task placed before never moves."""
    for split in ("val", "test", "train"):
        if split in out.values():
            continue
        sizes = {s: sum(1 for v in out.values() if v == s) for s in SPLITS}
        donor = next((i for i in new if sizes[out[i]] >= 2), None)
        if donor is not None:
            out[donor] = split
            new.remove(donor)


def _train_floor(out: dict[str, str], new: list[str]) -> None:
    """From MIN_TRAIN_FROM tasks on, train gets MIN_TRAIN: new tasks move in from the larger of val and test while
    that split keeps one task. Tasks placed before stay where they are, even if train stays short."""
    if len(out) < MIN_TRAIN_FROM:
        return
    while sum(1 for v in out.values() if v == "train") < MIN_TRAIN:
        sizes = {s: sum(1 for v in out.values() if v == s) for s in ("test", "val")}
        movable = [i for i in new if out[i] != "train" and sizes[out[i]] >= 2]
        if not movable:
            return
        donor = max(movable, key=lambda i: (sizes[out[i]], out[i] == "test"))
        out[donor] = "train"
        new.remove(donor)


def _val_floor(out: dict[str, str], new: list[str], floor: int) -> None:
    """Val grows towards `floor` with new tasks: from test while it keeps one, then from train while it keeps
    MIN_TRAIN (a night whose gate can never accept learns nothing from its train tasks either)."""
    for donor_split, keep in (("test", 1), ("train", MIN_TRAIN)):
        while sum(1 for v in out.values() if v == "val") < floor:
            movable = [i for i in new if out[i] == donor_split]
            if not movable or sum(1 for v in out.values() if v == donor_split) <= keep:
                break
            out[movable[0]] = "val"
            new.remove(movable[0])
