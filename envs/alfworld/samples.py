"""Built-in sample games: ALFRED PDDL problems we generate, on the domain and grammar the alfworld wheel ships.

Each game is written in the real `json_2.1.1/<split>/<task>/<trial>/game.tw-pddl`
layout with a walkthrough, and kept only after the real engine wins it by
playing that walkthrough. Several receptacles (some closed) and distractor
objects make the games non-trivial.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from skillopt_envs.alfworld.data import GAME_FOLDER_TYPES
from skillopt_envs.kit import ensure_samples, samples_root

MADE_BY = "skillopt_ray skillopt_envs.alfworld.samples"  # the sample folder's COMPLETE marker says who wrote it

# room -> receptacles (type, openable)
ROOMS = {
    "kitchen": [
        ("CounterTop", False),
        ("CounterTop", False),
        ("Cabinet", True),
        ("Cabinet", True),
        ("Drawer", True),
        ("Fridge", True),
        ("Microwave", True),
        ("SinkBasin", False),
        ("StoveBurner", False),
        ("DiningTable", False),
        ("GarbageCan", False),
        ("Shelf", False),
    ],
    "bedroom": [
        ("Bed", False),
        ("Desk", False),
        ("Drawer", True),
        ("Drawer", True),
        ("Dresser", False),
        ("Shelf", False),
        ("Shelf", False),
        ("SideTable", False),
        ("GarbageCan", False),
        ("Safe", True),
    ],
    "livingroom": [
        ("Sofa", False),
        ("ArmChair", False),
        ("CoffeeTable", False),
        ("SideTable", False),
        ("Drawer", True),
        ("Shelf", False),
        ("TVStand", False),
        ("GarbageCan", False),
        ("Cabinet", True),
    ],
}
KITCHEN_OBJECTS = ["Apple", "Bread", "Egg", "Mug", "Potato", "Tomato", "Cup", "Plate", "Lettuce", "Bowl"]
ROOM_OBJECTS = {
    "bedroom": ["AlarmClock", "Book", "CD", "CellPhone", "KeyChain", "Pencil", "Pen", "CreditCard", "Pillow"],
    "livingroom": ["Book", "CellPhone", "KeyChain", "Newspaper", "RemoteControl", "Vase", "Statue", "CreditCard"],
    "kitchen": KITCHEN_OBJECTS + ["DishSponge", "Spatula", "Fork"],
}
CLEANABLE = {
    "Apple",
    "Bread",
    "Egg",
    "Mug",
    "Potato",
    "Tomato",
    "Cup",
    "Plate",
    "Lettuce",
    "Bowl",
    "DishSponge",
    "Spatula",
    "Fork",
}
HEATABLE = {"Apple", "Bread", "Egg", "Mug", "Potato", "Tomato", "Cup", "Plate"}
COOLABLE = HEATABLE | {"Lettuce", "Bowl"}

# task type -> (room, object pool, destination pool)
TASK_SPECS = {
    "pick_and_place_simple": (
        "livingroom",
        ["Book", "CellPhone", "KeyChain", "Newspaper", "RemoteControl"],
        ["Sofa", "ArmChair", "CoffeeTable", "Shelf"],
    ),
    "look_at_obj_in_light": ("bedroom", ["AlarmClock", "Book", "CD", "CellPhone", "Pencil"], []),
    "pick_clean_then_place_in_recep": (
        "kitchen",
        ["Apple", "Mug", "Plate", "DishSponge", "Fork"],
        ["CounterTop", "DiningTable", "Shelf", "Cabinet"],
    ),
    "pick_heat_then_place_in_recep": (
        "kitchen",
        ["Apple", "Bread", "Egg", "Mug", "Potato"],
        ["CounterTop", "DiningTable", "Fridge"],
    ),
    "pick_cool_then_place_in_recep": (
        "kitchen",
        ["Apple", "Bread", "Lettuce", "Tomato", "Bowl"],
        ["CounterTop", "DiningTable", "Microwave"],
    ),
    "pick_two_obj_and_place": (
        "bedroom",
        ["CD", "KeyChain", "Pencil", "CellPhone", "CreditCard"],
        ["Drawer", "Desk", "Dresser", "Shelf"],
    ),
}


def _coord(v: float) -> str:
    sign = "_plus_" if v >= 0 else "_minus_"
    whole, frac = f"{abs(v):05.2f}".split(".")
    return f"{sign}{whole}_dot_{frac}"


def _mangle(kind: str, xyz: tuple[float, float, float]) -> str:
    coords = "".join(f"_bar_{_coord(c)}" for c in xyz)
    if kind == "SinkBasin":  # ALFRED names basins after their sink; the demangler then shows "sinkbasin"
        return "Sink" + coords + "_bar_SinkBasin"
    return kind + coords


@dataclass
class Thing:
    kind: str
    pid: str
    loc: str = ""
    openable: bool = False
    holder: Optional[Thing] = None
    name: str = ""  # demangled, filled after loading


@dataclass
class Scene:
    task_type: str
    receptacles: list[Thing] = field(default_factory=list)
    objects: list[Thing] = field(default_factory=list)
    start_loc: str = "loc_bar_0_bar_0_bar_0_bar_30"
    goal_obj: str = ""
    goal_recep: str = ""


def _build_scene(task_type: str, rng: random.Random) -> Scene:
    room, obj_pool, dest_pool = TASK_SPECS[task_type]
    scene = Scene(task_type)
    for i, (kind, openable) in enumerate(ROOMS[room]):
        xyz = (round(rng.uniform(-3, 3), 2), round(0.1 * i, 2), round(rng.uniform(-3, 3), 2))
        scene.receptacles.append(
            Thing(kind, _mangle(kind, xyz), f"loc_bar_{i + 1}_bar__minus_{i}_bar_1_bar_45", openable)
        )
    if task_type == "look_at_obj_in_light":
        side = next(r for r in scene.receptacles if r.kind in ("SideTable", "Desk"))
        scene.objects.append(Thing("DeskLamp", _mangle("DeskLamp", (1.11, 0.67, 1.35)), side.loc, holder=side))
        scene.goal_recep = "DeskLamp"
    goal = rng.choice(obj_pool)
    scene.goal_obj = goal
    if dest_pool:
        scene.goal_recep = rng.choice([d for d in dest_pool if any(r.kind == d for r in scene.receptacles)])
    n_goal = 2 if task_type == "pick_two_obj_and_place" else 1
    sources = [
        r
        for r in scene.receptacles
        if r.kind != scene.goal_recep and r.kind not in ("SinkBasin", "Microwave", "Fridge", "StoveBurner")
    ]
    for k in range(n_goal):
        holder = rng.choice(sources)
        xyz = (round(rng.uniform(-3, 3), 2), round(0.5 + 0.1 * k, 2), round(rng.uniform(-3, 3), 2))
        scene.objects.append(Thing(goal, _mangle(goal, xyz), holder.loc, holder=holder))
    distractors = [o for o in ROOM_OBJECTS[room] if o != goal]
    for k in range(rng.randint(4, 7)):
        kind = rng.choice(distractors)
        holder = rng.choice(scene.receptacles)
        xyz = (round(rng.uniform(-3, 3), 2), round(1.0 + 0.1 * k, 2), round(rng.uniform(-3, 3), 2))
        scene.objects.append(Thing(kind, _mangle(kind, xyz), holder.loc, holder=holder))
    return scene


def _goal_pddl(scene: Scene) -> str:
    o, r = f"{scene.goal_obj}Type", f"{scene.goal_recep}Type"
    t = scene.task_type
    if t == "look_at_obj_in_light":
        return (
            f"(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot {r}) (toggleable ?ot) "
            f"(isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) "
            f"(exists (?o - object ?a - agent) (and (objectType ?o {o}) (holds ?a ?o))))"
        )
    if t == "pick_two_obj_and_place":
        return (
            f"(and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {o}) (receptacleType ?r {r}) (inReceptacle ?o1 ?r) "
            f"(exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 {o}) (receptacleType ?r {r}) (inReceptacle ?o2 ?r)))))))"
        )
    extra = {
        "pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o)",
        "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o)",
        "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o)",
    }.get(t, "")
    return f"(and (exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) (objectType ?o {o}) (receptacleType ?r {r}) {extra}))))"


def _problem_pddl(scene: Scene, name: str) -> str:
    kinds_o = sorted({o.kind for o in scene.objects})
    kinds_r = sorted({r.kind for r in scene.receptacles})
    locs = sorted({r.loc for r in scene.receptacles} | {scene.start_loc})
    objs = ["agent1 - agent"] + [f"{k} - object" for k in kinds_o] + [f"{k}Type - otype" for k in kinds_o]
    objs += [f"{k}Type - rtype" for k in kinds_r] + [f"{o.pid} - object" for o in scene.objects]
    objs += [f"{r.pid} - receptacle" for r in scene.receptacles] + [f"{loc} - location" for loc in locs]
    init = [f"(atLocation agent1 {scene.start_loc})"]
    for r in scene.receptacles:
        init += [f"(receptacleType {r.pid} {r.kind}Type)", f"(receptacleAtLocation {r.pid} {r.loc})"]
        if r.openable:
            init.append(f"(openable {r.pid})")
    for o in scene.objects:
        assert o.holder is not None
        init += [
            f"(objectType {o.pid} {o.kind}Type)",
            f"(inReceptacle {o.pid} {o.holder.pid})",
            f"(objectAtLocation {o.pid} {o.loc})",
        ]
        init.append(f"(toggleable {o.pid})" if o.kind == "DeskLamp" else f"(pickupable {o.pid})")
        for pred, kinds in (("cleanable", CLEANABLE), ("heatable", HEATABLE), ("coolable", COOLABLE)):
            if o.kind in kinds:
                init.append(f"({pred} {o.pid})")
    init += [f"(canContain {r}Type {o}Type)" for r in kinds_r for o in kinds_o if o != "DeskLamp"]
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n"
        + "\n".join(objs)
        + "\n)\n(:init\n"
        + "\n".join(init)
        + "\n)\n(:goal\n"
        + _goal_pddl(scene)
        + "\n)\n)\n"
    )


def _task_desc(scene: Scene) -> str:
    o, r = scene.goal_obj.lower(), scene.goal_recep.lower()
    return {
        "pick_and_place_simple": f"put a {o} in {r}",
        "look_at_obj_in_light": f"look at {o} under the {r}",
        "pick_clean_then_place_in_recep": f"put a clean {o} in {r}",
        "pick_heat_then_place_in_recep": f"put a hot {o} in {r}",
        "pick_cool_then_place_in_recep": f"put a cool {o} in {r}",
        "pick_two_obj_and_place": f"find two {o} and put them in {r}",
    }[scene.task_type]


def _names(gamefile: Path) -> dict[str, str]:
    """Entity id -> the name the engine shows (via the real demangler)."""
    from skillopt_envs.alfworld.game import AlfWorldGame

    game = AlfWorldGame(gamefile)
    env = game.env
    while not hasattr(env, "_entity_infos") and hasattr(env, "_wrapped_env"):
        env = env._wrapped_env
    infos = env._entity_infos
    names = {info.id.lower(): info.name for info in infos.values()}
    game.close()
    return names


def _walkthrough(scene: Scene, names: dict[str, str]) -> list[str]:
    def n(t: Thing) -> str:
        return names[t.pid.lower()].strip()

    goal_objs = [o for o in scene.objects if o.kind == scene.goal_obj]
    steps: list[str] = []
    opened: set[str] = set()

    def visit(r: Thing) -> None:
        steps.append(f"go to {n(r)}")
        if r.openable and r.pid not in opened:
            steps.append(f"open {n(r)}")
            opened.add(r.pid)

    def fetch(o: Thing) -> None:
        assert o.holder is not None
        visit(o.holder)
        steps.append(f"take {n(o)} from {n(o.holder)}")

    t = scene.task_type
    if t == "look_at_obj_in_light":
        lamp = next(o for o in scene.objects if o.kind == "DeskLamp")
        fetch(goal_objs[0])
        assert lamp.holder is not None
        steps.append(f"go to {n(lamp.holder)}")
        steps.append(f"use {n(lamp)}")
        return steps
    dest = next(r for r in scene.receptacles if r.kind == scene.goal_recep)
    for o in goal_objs[: 2 if t == "pick_two_obj_and_place" else 1]:
        fetch(o)
        tool = {
            "pick_clean_then_place_in_recep": ("clean", "SinkBasin"),
            "pick_heat_then_place_in_recep": ("heat", "Microwave"),
            "pick_cool_then_place_in_recep": ("cool", "Fridge"),
        }.get(t)
        if tool:
            rec = next(r for r in scene.receptacles if r.kind == tool[1])
            steps.append(f"go to {n(rec)}")
            steps.append(f"{tool[0]} {n(o)} with {n(rec)}")
        visit(dest)
        steps.append(f"move {n(o)} to {n(dest)}")
    return steps


def _grammar(task: str) -> str:
    import alfworld

    path = Path(alfworld.__file__).parent / "data" / "alfred.twl2"
    return path.read_text().replace("UNKNOWN GOAL", task)


def _domain() -> str:
    import alfworld

    return (Path(alfworld.__file__).parent / "data" / "alfred.pddl").read_text()


def verify_game(gamefile: str | Path) -> bool:
    """True when the real engine wins the game by playing its walkthrough."""
    from skillopt_envs.alfworld.game import AlfWorldGame, read_walkthrough

    game = AlfWorldGame(gamefile)
    try:
        game.reset()
        for action in read_walkthrough(gamefile):
            out = game.step(action)
            if out.won:
                return True
        return False
    finally:
        game.close()


def generate_games(out_root: Path, per_type: dict[str, int], seed: int = 0) -> list[Path]:
    """Write winnable games under out_root/json_2.1.1/<split>/...; returns the game files."""
    rng = random.Random(seed)
    written = []
    domain = _domain()
    for split, count in per_type.items():
        for task_type in GAME_FOLDER_TYPES:  # folder names as alfworld-download writes them
            made = 0
            attempt = 0
            while made < count:
                attempt += 1
                if attempt > count * 10:
                    raise RuntimeError(f"could not generate a winnable {task_type} game")
                scene = _build_scene(task_type, rng)
                trial = f"trial_sample_{split}_{made:03d}"
                folder = (
                    out_root
                    / "json_2.1.1"
                    / split
                    / f"{task_type}-{scene.goal_obj}-None-{scene.goal_recep}-{made + 1}"
                    / trial
                )
                folder.mkdir(parents=True, exist_ok=True)
                game = {
                    "pddl_domain": domain,
                    "grammar": _grammar(_task_desc(scene)),
                    "pddl_problem": _problem_pddl(scene, trial),
                    "solvable": True,
                    "walkthrough": [],
                }
                path = folder / "game.tw-pddl"
                path.write_text(json.dumps(game))
                game["walkthrough"] = _walkthrough(scene, _names(path))
                path.write_text(json.dumps(game))
                if verify_game(path):
                    written.append(path)
                    made += 1
                else:
                    path.unlink()
    return written


SAMPLE_SPLITS = {"train": 2, "valid_seen": 1, "valid_unseen": 1}  # games per task type


def default_sample_dir() -> Path:
    return samples_root(None, "alfworld_samples_v1")


def ensure_sample_games(sample_dir: Optional[str] = None) -> Path:
    """Generate the sample set once (idempotent: a marker file records completion)."""
    root = Path(sample_dir).expanduser() if sample_dir else default_sample_dir()
    return ensure_samples(root, lambda tmp: generate_games(tmp, SAMPLE_SPLITS, seed=1234), MADE_BY)
