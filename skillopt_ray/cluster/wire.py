"""The messages between a command and the kept cluster's holder (skillopt_ray.cluster.service): one JSON object a line.

The command sends its request (or a status question) and later the signals it gets; the holder answers with
frames: why it does not run the command here, that it took it, the run's output, and its exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, TypedDict

if TYPE_CHECKING:  # the engine's own record (the command reads it as JSON: no engine import at run time)
    from skillopt_ray.engine.warm import Readiness


class Frame(TypedDict, total=False):
    """One line from the holder to the command; each frame holds one of these keys."""

    own: str  # the holder does not run this command (why): the command runs on its own
    refused: str  # a bad request (why)
    accepted: bool  # the holder runs the command; it waits for the run from here on
    out: str  # the run's standard output, as printed
    err: str  # the run's standard error
    exit: int  # the run's exit code: the last frame


class Serving(TypedDict):
    """The command the holder serves now."""

    pid: int
    argv: list[str]


class StatusAnswer(TypedDict):
    """The holder's answer to `{"status": true}` (python -m skillopt_ray.cluster status)."""

    standby: Readiness
    busy: bool
    serving: Optional[Serving]
