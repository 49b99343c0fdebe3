"""The dashboard's HTTP side: a small Starlette app serving one page and the JSON it polls.

Starlette and uvicorn already come with MLflow's server, so the page needs no new dependency, and the page itself
is plain HTML, CSS and JavaScript shipped in `static/` (charts are drawn as SVG by the page): it works offline,
which a cluster's login node often is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Optional

from skillopt_envs.jsontypes import JSONObject
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from skillopt_ray.base import untrusted
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.dashboard import nights, views
from skillopt_ray.dashboard.keys import allowed_endpoint, key_routes
from skillopt_ray.dashboard.launcher import Launcher
from skillopt_ray.dashboard.limits import PathPolicy
from skillopt_ray.dashboard.security import Guard, GuardMiddleware

STATIC = Path(__file__).resolve().parent / "static"
# A form's JSON is a few hundred bytes; anything much larger is refused before it is read whole.
MAX_BODY_BYTES = 64 * 1024
# A run id is a path under the output folder a few levels deep; a longer one names no run.
MAX_RUN_ID_CHARS = 1024
SLOW_WALK_S = 0.5  # a walk of the output folder slower than this (or cut short) ...
WALK_REUSE_S = 30.0  # ... is reused for this long before the folder is walked again


class BodyTooLarge(UsageError):
    """A request body over MAX_BODY_BYTES: answered 413."""

    status = 413


class Dashboard:
    """The state of one dashboard server: which output folder it shows, who may use it, and the runs it launched."""

    def __init__(
        self,
        outputs: Path,
        cwd: Path,
        ray_address: Optional[str] = None,
        guard: Optional[Guard] = None,
        allow_paths: tuple[Path, ...] = (),
        allow_endpoints: tuple[str, ...] = (),
        project: Optional[Path] = None,
    ):
        self.outputs = Path(outputs).resolve()
        self.cwd = Path(cwd)
        self.given_project = Path(project).resolve() if project else None
        self.guard = guard or Guard.make(None, "127.0.0.1")
        policy = PathPolicy.make(Path(cwd), self.outputs, allow_paths)
        hosts = frozenset(allowed_endpoint(h) for h in allow_endpoints if h.strip())
        self.launcher = Launcher(cwd, ray_address, policy, hosts)
        self.rows: views.RowCache = untrusted.StatCache()  # the table's rows, read again when a run's files change
        self.details: views.DetailCache = untrusted.StatCache(64)  # the runs' pages, likewise
        self._walk: Optional[tuple[untrusted.Walk, float]] = None  # a costly walk and when it was made

    @property
    def project(self) -> Optional[Path]:
        """The project whose staged nights the Nights tab lists (read-only): the one given, else found again at each
        poll (a project whose first night is staged after the dashboard started is shown without a restart)."""
        return self.given_project or nights.project_for(self.outputs, self.cwd)

    def resolve(self, run_id: str) -> Path:
        """A run id from the page, as a run directory under the output folder (never outside it)."""
        if len(run_id) > MAX_RUN_ID_CHARS or "\x00" in run_id:
            raise KeyError(run_id[:80])
        try:
            path = (self.outputs / run_id).resolve()
            found = views.is_run_dir(path)
        except (OSError, ValueError):  # a name the file system refuses (too long a part, say) names no run
            raise KeyError(run_id[:80]) from None
        if path != self.outputs and self.outputs not in path.parents:
            raise KeyError(run_id)
        if not found:
            for launch in self.launcher.launches.values():
                if launch.run_dir and Path(launch.run_dir).name == run_id and views.is_run_dir(Path(launch.run_dir)):
                    return Path(launch.run_dir)
            raise KeyError(run_id)
        return path

    def walk(self) -> untrusted.Walk:
        """The run folders under the output folder. A walk that was cut short or slow (an output folder of `/`) is
        reused for WALK_REUSE_S, so polls every 2 s do not walk the disk every time."""
        now = time.monotonic()
        if self._walk is not None and now - self._walk[1] < WALK_REUSE_S:
            return self._walk[0]
        walk = views.walk_runs(self.outputs)
        costly = bool(walk.stopped) or time.monotonic() - now > SLOW_WALK_S
        self._walk = (walk, now) if costly else None
        return walk

    def runs(self) -> JSONObject:
        """The table's rows, and a note when the walk of the output folder stopped early."""
        walk = self.walk()
        alive, stopped = self.launcher.alive_run_dirs(), self.launcher.stopped_run_dirs()
        rows = views.compare_rows(self.outputs, walk.found, alive, stopped, self.rows)
        return {"outputs": str(self.outputs), "runs": rows, "note": walk.stopped}


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _refused(e: UsageError) -> JSONResponse:
    return _error(str(e), getattr(e, "status", 400))


async def _read_body(request: Request) -> bytes:
    """The body, read no further than MAX_BODY_BYTES (BodyTooLarge past it)."""
    too_large = BodyTooLarge(f"the request body is over {MAX_BODY_BYTES // 1024} KiB; a launch form is far smaller")
    try:
        if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            raise too_large
    except ValueError:
        raise UsageError("the Content-Length header is not a number") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _body(request: Request) -> JSONObject:
    """The POST's JSON object; UsageError (a 400) for anything else, BodyTooLarge (a 413) past the size limit."""
    raw = await _read_body(request)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise UsageError("the request body is not valid JSON (or is nested too deeply)") from None
    if not isinstance(body, dict):
        raise UsageError("the request body must be a JSON object of the form's fields")
    return body


def _view_routes(dash: Dashboard) -> list[Route]:
    """The page and the read-only JSON it polls: the runs, one run, a step's diff, two skills' diff, curves."""

    def run_path(request: Request) -> Path:
        return dash.resolve(request.query_params.get("id", ""))

    async def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def schema(request: Request) -> Response:
        presets = {k: request.query_params.get(k, "") for k in ("experiment", "smoke", "llm")}
        try:
            return JSONResponse(await asyncio.to_thread(dash.launcher.schema, presets))
        except UsageError as e:
            return _error(str(e))

    async def runs(_: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(dash.runs))

    async def run(request: Request) -> Response:
        try:
            path = run_path(request)
        except KeyError:
            return _error("no such run under the output folder", 404)
        alive = str(path) in dash.launcher.alive_run_dirs()
        stopped = str(path) in dash.launcher.stopped_run_dirs()
        detail = await asyncio.to_thread(
            views.cached_detail, dash.outputs, path, alive, stopped, dash.rows, dash.details
        )
        if str(path) in dash.launcher.stopping_run_dirs():
            detail["row"]["status"] = "stopping"
        return JSONResponse(detail)

    async def diff(request: Request) -> Response:
        try:
            text = views.step_diff(run_path(request), request.query_params.get("step", ""))
        except (KeyError, ValueError):
            return _error("no such run or step", 404)
        return PlainTextResponse(text)

    return [
        Route("/", index),
        Route("/api/schema", schema),
        Route("/api/runs", runs),
        Route("/api/run", run),
        Route("/api/diff", diff),
    ]


def _compare_routes(dash: Dashboard) -> list[Route]:
    """The comparison's JSON: two runs' best skills diffed, and the curves of the ticked runs."""

    async def skill_diff(request: Request) -> Response:
        try:
            a = dash.resolve(request.query_params.get("a", ""))
            b = dash.resolve(request.query_params.get("b", ""))
        except KeyError:
            return _error("pick two runs under the output folder", 404)
        return PlainTextResponse(await asyncio.to_thread(views.skill_diff, a, b))

    async def compare(request: Request) -> Response:
        ids = [i for i in request.query_params.get("ids", "").split(",") if i]
        try:
            paths = [dash.resolve(i) for i in ids]
        except KeyError as e:
            return _error(f"no such run: {e.args[0]}", 404)
        curves = {i: views.curve(views.RunDir(p)) for i, p in zip(ids, paths)}
        return JSONResponse({"curves": curves})

    return [Route("/api/skill_diff", skill_diff), Route("/api/compare", compare)]


def _launch_routes(dash: Dashboard) -> list[Route]:
    """The launcher's JSON: check a form's command, launch it, stop a launch, list the launches."""

    async def check(request: Request) -> Response:
        try:
            form = await _body(request)
            overrides, data = await asyncio.to_thread(dash.launcher.check, form)
        except UsageError as e:
            return _refused(e)
        from skillopt_ray.dashboard.launcher import display_command

        keys = [r.to_dict() for r in key_routes(data)]  # the form says which key goes where
        return JSONResponse({"command": display_command(overrides), "keys": keys})

    async def launch(request: Request) -> Response:
        try:
            form = await _body(request)
            started = await asyncio.to_thread(dash.launcher.launch, form)
        except UsageError as e:
            return _refused(e)
        return JSONResponse(started.to_dict())

    async def stop(request: Request) -> Response:
        try:
            body = await _body(request)
        except UsageError as e:
            return _refused(e)
        try:
            stopped = await asyncio.to_thread(dash.launcher.stop, str(body.get("id", "")))
        except KeyError:
            return _error("no such launch", 404)
        return JSONResponse(stopped.to_dict())

    async def resume(request: Request) -> Response:
        try:
            body = await _body(request)
            started = await asyncio.to_thread(dash.launcher.resume, str(body.get("id", "")))
        except UsageError as e:
            return _refused(e)
        except KeyError:
            return _error("no such launch", 404)
        return JSONResponse(started.to_dict())

    async def launches(_: Request) -> Response:
        return JSONResponse({"launches": await asyncio.to_thread(dash.launcher.list)})

    return [
        Route("/api/check", check, methods=["POST"]),
        Route("/api/launch", launch, methods=["POST"]),
        Route("/api/stop", stop, methods=["POST"]),
        Route("/api/resume", resume, methods=["POST"]),
        Route("/api/launches", launches),
    ]


def _night_routes(dash: Dashboard) -> list[Route]:
    """The Nights tab's JSON, read-only: the project's staged nights, and one night's report and skill diff."""

    async def list_nights(_: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(nights.night_rows, dash.project))

    async def night(request: Request) -> Response:
        stamp = request.query_params.get("stamp", "")
        try:
            folder = nights.find_night(dash.project, stamp)
            detail = await asyncio.to_thread(nights.night_detail, folder)
        except KeyError:
            return _error("no such staged night in the project", 404)
        except ValueError as e:  # a manifest staging did not write
            return _error(str(e), 422)
        return JSONResponse(detail)

    return [Route("/api/nights", list_nights), Route("/api/night", night)]


def build_app(dash: Dashboard) -> Starlette:
    routes = [
        *_view_routes(dash),
        *_compare_routes(dash),
        *_night_routes(dash),
        *_launch_routes(dash),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        dash.launcher.close()  # runs started here stop with the page's server; rerunning their command resumes them

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(GuardMiddleware, guard=dash.guard)
    return app
