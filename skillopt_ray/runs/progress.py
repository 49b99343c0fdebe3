"""What a run is doing, shown while it runs, and how long it took.

Two displays share one interface, `update(snapshot)` / `close()`:

- `RichDisplay` (a terminal): a few live lines drawn with rich, redrawn in place and cut to the
  terminal's width (never wrapped): the phase and stage, a bar for the stage's episodes, a bar for
  the whole run's planned episodes with an ETA, accept/reject/skip counts, tokens and cost.
- `PlainDisplay` (a pipe, a file, `ray job` logs): one `[progress]` line whenever the phase or stage
  changes, and at most one every `every_s` seconds in between; no control characters.

`debug.progress=auto` picks rich on a terminal and plain otherwise; `off` shows only the notes.
Snapshots are plain dicts (`DriverActor.progress()`): phase, stage, epoch, epochs, global_step,
total_steps, done/total (the stage's episodes), run_done/run_total (the run's), accept/reject/skip,
tokens, cost_usd, notes. Missing keys are left out of the display.

`RunClock` keeps the time a run directory has been worked on (`sessions.json`, one entry per
command), so a summary can say how long this command took and, for a resumed run, how long the
run took in all.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from skillopt_ray.runs.records import Progress, Session, Timing
from skillopt_ray.runs.rundir import RunDir  # noqa: E402

PHASES = {
    "starting": "start-up",
    "train": "training",
    "epoch_boundary": "epoch boundary",
    "final": "final evaluation",
    "eval": "evaluation",
    "done": "done",
}


# ---------------------------------------------------------------- formatting


def fmt_duration(seconds: Optional[float]) -> str:
    """12s, 3m05s, 1h02m: what a person reads off a clock."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_tokens(n: Optional[float]) -> str:
    if not n:
        return "0"
    n = float(n)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}"


def stage_label(stage: str) -> str:
    """The driver's stage names in words: validate:test:best -> 'test evaluation (best skill)'."""
    if not stage:
        return ""
    parts = stage.split(":")
    if parts[0] == "validate":
        if len(parts) >= 3:
            return f"{parts[1]} evaluation ({parts[2]} skill)"
        return f"{parts[1]} evaluation" if len(parts) > 1 else "evaluation"
    if parts[0] == "eval":
        return f"evaluation on {parts[1]}" if len(parts) > 1 else "evaluation"
    if len(parts) == 2 and parts[1] == "rollout":
        who = {"slow": "slow update", "meta": "meta skill"}.get(parts[0], parts[0].replace("_", " "))
        return f"{who}: paired rollouts"
    return stage.replace("_", " ").replace(":", ": ")


def headline(p: Progress, sep: str = " · ") -> str:
    """Phase, epoch, step and stage in one phrase."""
    phase = p.get("phase") or "starting"
    parts = [PHASES.get(phase, phase.replace("_", " "))]
    if p.get("epoch") and phase in ("train", "epoch_boundary"):
        parts.append(f"epoch {p['epoch']}" + (f"/{p['epochs']}" if p.get("epochs") else ""))
    if p.get("global_step") and phase == "train":
        parts.append(f"step {p['global_step']}/{p.get('total_steps', '?')}")
    label = stage_label(str(p.get("stage") or ""))
    if label:
        parts.append(label)
    return sep.join(parts)


def counts_text(p: Progress, sep: str = " · ") -> str:
    parts = []
    if any(k in p for k in ("accept", "reject", "skip")):
        parts.append(f"accepted {p.get('accept', 0)}{sep}rejected {p.get('reject', 0)}{sep}skipped {p.get('skip', 0)}")
    if "tokens" in p:
        parts.append(f"tokens {fmt_tokens(p.get('tokens'))}")
    if p.get("cost_usd"):
        parts.append(f"${p['cost_usd']:.4f}")
    return sep.join(parts)


class Eta:
    """The whole run's ETA from the rate at which planned episodes got done in this command."""

    def __init__(self, clock: Any = time.monotonic):
        self.clock = clock
        self.first: Optional[tuple[float, int]] = None
        self.best_done = 0

    def observe(self, done: Optional[int], total: Optional[int]) -> Optional[float]:
        if done is None or not total:
            return None
        self.best_done = max(self.best_done, int(done))  # a stage that restarts its count never moves the run back
        now = self.clock()
        if self.first is None:
            self.first = (now, self.best_done)
            return None
        t0, d0 = self.first
        if self.best_done <= d0 or now - t0 < 1.0:
            return None
        rate = (self.best_done - d0) / (now - t0)
        return max(0.0, (total - self.best_done) / rate)


# ---------------------------------------------------------------- displays


class _Base:
    def __init__(self, stream: Optional[TextIO] = None, clock: Any = time.monotonic, started: Optional[float] = None):
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.t0 = clock() if started is None else started
        self.snap: Progress = {}
        self.eta = Eta(clock)
        self.run_eta: Optional[float] = None
        self.shown_notes: list[str] = []

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _new_notes(self, p: Progress) -> list[str]:
        fresh = [n for n in p.get("notes") or [] if n not in self.shown_notes]
        self.shown_notes.extend(fresh)
        return fresh

    def _absorb(self, p: Progress) -> None:
        self.snap = p.copy()
        self.run_eta = self.eta.observe(p.get("run_done"), p.get("run_total"))
        if p.get("run_done") is not None:
            self.snap["run_done"] = self.eta.best_done

    def unshown(self, notes: list[str]) -> list[str]:
        """Of a run's notes, those not printed yet (the CLI prints these at the end)."""
        return [n for n in notes if n not in self.shown_notes]

    def update(self, p: Progress) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> _Base:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class NullDisplay(_Base):
    """`off`: no progress, but the run's notes (data source, task counts) still print when they appear."""

    def update(self, p: Progress) -> None:
        for note in self._new_notes(p):
            print(f"note: {note}", file=self.stream, flush=True)


class PlainDisplay(_Base):
    """One log line per phase or stage change, and at most one per `every_s` seconds in between."""

    def __init__(
        self,
        stream: Optional[TextIO] = None,
        clock: Any = time.monotonic,
        every_s: float = 30.0,
        started: Optional[float] = None,
    ):
        super().__init__(stream, clock, started)
        self.every_s = every_s
        self.last_key: Any = None
        self.last_body = ""
        self.last_print = -math.inf

    def line(self, p: Progress) -> str:
        parts = [headline(p, ", ")]  # ASCII only: logs may not be UTF-8
        if p.get("total"):
            parts.append(f"episodes {p.get('done', 0)}/{p['total']}")
        if p.get("run_total"):
            run = f"run {p.get('run_done', 0)}/{p['run_total']} episodes"
            if self.run_eta is not None:
                run += f", eta {fmt_duration(self.run_eta)}"
            parts.append(run)
        extra = counts_text(p, ", ")
        if extra:
            parts.append(extra)
        return " | ".join(parts)

    def update(self, p: Progress) -> None:
        self._absorb(p)
        for note in self._new_notes(p):
            print(f"note: {note}", file=self.stream, flush=True)
        p = self.snap
        key = (p.get("phase"), p.get("global_step"), p.get("stage"))
        body = self.line(p)
        now = self.clock()
        if key != self.last_key or (body != self.last_body and now - self.last_print >= self.every_s):
            print(f"[progress {fmt_duration(self.elapsed())}] {body}", file=self.stream, flush=True)
            self.last_key, self.last_body, self.last_print = key, body, now


class _Screen:
    """The live lines, laid out for the width rich gives at each redraw."""

    def __init__(self, display: RichDisplay):
        self.d = display

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        width = max(20, options.max_width)
        for line in self.d.lines(width):
            if isinstance(line, Text):
                line.no_wrap = True
                line.overflow = "ellipsis"
                line.truncate(width, overflow="ellipsis")
            yield line


class RichDisplay(_Base):
    """Live lines on a terminal, cut to its width at every redraw (resizes included)."""

    def __init__(
        self,
        stream: Optional[TextIO] = None,
        clock: Any = time.monotonic,
        force_terminal: Optional[bool] = None,
        width: Optional[int] = None,
        refresh_per_second: float = 4,
        started: Optional[float] = None,
    ):
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        super().__init__(stream, clock, started)
        self.console = Console(
            file=self.stream, force_terminal=force_terminal, width=width, highlight=False, soft_wrap=False
        )
        self.spinner = Spinner("dots")
        self.live = Live(
            _Screen(self),
            console=self.console,
            refresh_per_second=refresh_per_second,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=True,
        )
        self.live.start()
        self.closed = False

    def _bar(self, label: str, done: int, total: int, tail: str, width: int) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = f"  {label:<5} "
        count = f" {done}/{total} episodes"
        room = width - len(head) - len(count) - len(tail) - 1
        if room < 8:  # too narrow for a bar: words only
            return Text(f"{head}{count.strip()}{tail}")
        grid = Table.grid(padding=0)
        for w in (len(head), room, len(count) + len(tail)):
            grid.add_column(width=w, no_wrap=True)
        grid.add_row(
            Text(head, style="bold"),
            ProgressBar(total=max(total, 1), completed=min(done, total), width=room),
            Text(count + tail),
        )
        return grid

    def lines(self, width: int) -> list[Any]:
        from rich.text import Text

        p = self.snap
        clock = fmt_duration(self.elapsed())
        spin = self.spinner.render(time.monotonic())
        head = headline(p)
        room = width - len(clock) - 3
        if len(head) > room:
            head = head[: max(0, room - 1)] + "…"
        top = Text.assemble(
            spin if isinstance(spin, Text) else Text(str(spin)),
            " ",
            (head, "bold"),
            " " * max(1, room - len(head)),
            (clock, "dim"),
        )
        out: list[Any] = [top]
        if p.get("total"):
            out.append(self._bar("stage", int(p.get("done", 0)), int(p["total"]), "", width))
        if p.get("run_total"):
            tail = f" · eta {fmt_duration(self.run_eta)}" if self.run_eta is not None else ""
            out.append(self._bar("run", int(p.get("run_done", 0)), int(p["run_total"]), tail, width))
        extra = counts_text(p)
        if extra:
            out.append(Text("  " + extra, style="dim"))
        return out

    def update(self, p: Progress) -> None:
        if self.closed:
            return
        self._absorb(p)
        for note in self._new_notes(p):  # above the live lines, broken between words at the terminal's width
            self.console.print(f"note: {note}", highlight=False, markup=False, overflow="fold")
        self.live.refresh()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.live.stop()
        if self.snap and self.snap.get("phase") not in (
            "final",
            "done",
        ):  # stopped early: say where (a summary follows otherwise)
            self.console.print(
                f"stopped during: {headline(self.snap)} · {fmt_duration(self.elapsed())}",
                highlight=False,
                markup=False,
                overflow="ellipsis",
                no_wrap=True,
            )


def make_display(mode: str, stream: Optional[TextIO] = None, started_at: Optional[float] = None) -> _Base:
    """The display `debug.progress` asks for: auto | rich | plain | off. `started_at` (a time.time() value) is when
    the command began; the displayed clock counts from it."""
    stream = stream if stream is not None else sys.stderr
    started = None if started_at is None else time.monotonic() - max(0.0, time.time() - started_at)
    if mode == "auto":
        tty = hasattr(stream, "isatty") and stream.isatty() and os.environ.get("TERM", "") != "dumb"
        mode = "rich" if tty else "plain"
    if mode == "rich":
        return RichDisplay(stream, force_terminal=True, started=started)
    if mode == "plain":
        return PlainDisplay(stream, started=started)
    return NullDisplay(stream, started=started)


# ---------------------------------------------------------------- time on a run


def _process_start() -> Optional[float]:
    """This process's start as a time.time() value (Linux), so a command's time includes its imports."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


_FIRST_CLOCK = [True]


def command_start() -> float:
    """When the command began: the process's start for the first run of `python -m skillopt_ray`, now otherwise
    (a multirun's later runs, sweep trials in shared workers)."""
    now = time.time()
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    first, _FIRST_CLOCK[0] = _FIRST_CLOCK[0], False
    if first and spec is not None and spec.name in ("skillopt_ray.__main__", "skillopt_ray.cli"):
        started = _process_start()
        if started is not None and 0 <= now - started < 600:
            return started
    return now


@dataclass
class RunClock:
    """Wall time per command on one run directory, kept in `sessions.json` (written every `every_s` and at the end,
    so a killed command loses at most that much)."""

    run_dir: Path
    started: float = field(default_factory=command_start)
    every_s: float = 10.0
    sessions: list[Session] = field(default_factory=list)
    _last_write: float = 0.0

    def begin(self) -> RunClock:
        self.sessions = RunDir(self.run_dir).read_sessions()
        self.sessions.append(
            {
                "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
                "wall_s": 0.0,
                "status": "running",
            }
        )
        self._write()
        return self

    @property
    def command_s(self) -> float:
        return time.time() - self.started

    @property
    def total_s(self) -> float:
        return sum(float(s.get("wall_s", 0.0)) for s in self.sessions[:-1]) + self.command_s

    def _write(self) -> None:
        if not self.sessions:
            return
        self.sessions[-1]["wall_s"] = round(self.command_s, 1)
        try:
            RunDir(self.run_dir).write_sessions(self.sessions)
        except OSError:
            pass  # time keeping never stops a run
        self._last_write = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self._last_write >= self.every_s:
            self._write()

    def end(self, status: str) -> Timing:
        if self.sessions:
            self.sessions[-1]["status"] = status
        self._write()
        return self.timing()

    def timing(self) -> Timing:
        return Timing(
            command_s=round(self.command_s, 1),
            run_total_s=round(self.total_s, 1),
            sessions=len(self.sessions),
        )


def time_line(timing: Optional[Timing]) -> str:
    """The summary's clock line: this command's wall time, and the run's in all when it was resumed."""
    if not timing:
        return ""
    line = f"time: {fmt_duration(timing['command_s'])} this command (wall clock)"
    if timing.get("sessions", 1) > 1:
        line += f"; {fmt_duration(timing['run_total_s'])} in all over {timing['sessions']} commands (resumed run)"
    return line
