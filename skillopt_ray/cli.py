"""Command line: compose the config, start or join Ray, launch the driver actor, show progress, print the summary.

    python -m skillopt_ray +experiment=alfworld [overrides...] [--cfg job] [-m] [--debug]
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

CONF_DIR = Path(os.environ.get("SKILLOPT_CONF_DIR", Path(__file__).resolve().parent.parent / "conf"))
from skillopt_ray.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED  # noqa: F401 - EXIT_ERROR re-exported


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def compose(overrides: list[str]) -> Any:
    """Hydra composition with our strict schema; errors become one-line UsageErrors."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from skillopt_ray.config import register_schema

    register_schema()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        text = " ".join(str(e).split())
        cause = e.__cause__
        if cause is not None and str(cause).strip():
            text += ": " + " ".join(str(cause).split()).split(" full_key:")[0]
        text = text.split(" Config search path")[0]
        if "Could not override" in text:
            text += " (unknown key; see --cfg job for the valid keys)"
        if "experiment" in text and ("Could not find" in text or "not found" in text):
            raise UsageError(f"unknown experiment: {text.split(' Available options')[0].strip()}; available: {', '.join(experiments())}") from None
        raise UsageError(f"invalid configuration: {text[:400]}") from None
    if OmegaConf.is_missing(cfg, "experiment") or cfg.experiment is None:
        raise UsageError(f"no experiment chosen: add +experiment=<name> (one of {', '.join(experiments())})")
    return cfg


def typed(cfg: Any) -> tuple[Any, dict[str, Any]]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from skillopt_ray.config import ConfigError, validate

    try:
        data = OmegaConf.to_container(cfg, resolve=True)
        obj = OmegaConf.to_object(cfg)
        validate(obj)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except OmegaConfBaseException as e:
        raise UsageError(f"invalid configuration: {' '.join(str(e).split())[:300]}") from None
    return obj, data  # type: ignore[return-value]


def resolve_paths(data: dict[str, Any]) -> dict[str, Any]:
    """Absolute paths before anything crosses into actors or Tune trials (which change cwd)."""
    data["output_dir"] = str(Path(data["output_dir"]).expanduser().resolve())
    for sect, key in (("env", "data_dir"), ("env", "manifest_dir"), ("eval", "skill_path")):
        if data[sect].get(key):
            data[sect][key] = str(Path(os.path.expandvars(data[sect][key])).expanduser().resolve())
    if data.get("skill_init"):
        data["skill_init"] = str(Path(data["skill_init"]).expanduser().resolve())
    return data


def run_dir_for(data: dict[str, Any]) -> Path:
    from skillopt_ray.config import run_identity

    name = data.get("run_name")
    if not name:
        prefix = "eval" if data["mode"] == "eval" else "train"
        name = f"{data['experiment']}-{prefix}-seed{data['seed']}-{run_identity(data)}"
    return Path(data["output_dir"]) / "runs" / name


def check_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"output directory {path} is not writable ({e.strerror}); set output_dir=<writable folder>") from None


def check_keys(data: dict[str, Any]) -> None:
    for role in ("target", "optimizer"):
        r = data["llm"][role]
        if r["provider"] == "embedded":
            continue
        if r["provider"] == "azure" and not r.get("azure_endpoint"):
            raise UsageError(f"Azure backend needs an endpoint: set AZURE_OPENAI_ENDPOINT or llm.{role}.azure_endpoint")
        has_url = r.get("base_url") or data["llm"].get("base_url")
        if data["llm"]["backend"] == "compatible" and not has_url:  # before the key: the URL is what is missing
            raise UsageError("llm=compatible needs a server URL: add llm.base_url=http://host:port/v1 (or set COMPATIBLE_BASE_URL)")
        env = r.get("api_key_env")
        token_env = r.get("azure_ad_token_env")
        if env and not os.environ.get(env) and not (token_env and os.environ.get(token_env)):
            if r["provider"] == "openai" and has_url and data["llm"]["backend"] == "compatible":
                continue  # local OpenAI-compatible servers often need no key
            raise UsageError(f"missing API key for llm.{role} ({data['llm']['backend']}): set the environment variable {env}")


def check_skill_files(data: dict[str, Any]) -> None:
    """Skill documents the run will read: present, regular, UTF-8 text (checked before Ray starts)."""
    keys = [("skill_init", data.get("skill_init"))]
    if data["mode"] == "eval":
        keys.append(("eval.skill_path", data["eval"].get("skill_path")))
    for key, value in keys:
        if not value:
            continue
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"{key}={value!r} is not a file; give the path to a skill .md file")
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise UsageError(f"{key}={value!r} cannot be read ({e.strerror}); give the path to a skill .md file") from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"{key}={value!r} is not UTF-8 text (byte {e.start} cannot be decoded: a binary file?); "
                             "give the path to a skill .md file") from None
        if b"\x00" in raw:
            raise UsageError(f"{key}={value!r} contains NUL bytes (a binary file?); give the path to a skill .md file")


def start_ray(data: dict[str, Any]) -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = data["ray"]["address"] or os.environ.get("RAY_ADDRESS")
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, logging_level="ERROR")
    if address and address not in ("auto", "local"):
        probe_address(address)  # a configured address that does not answer is an error even if Ray is already up here
    if ray.is_initialized():
        return
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(num_cpus=data["ray"]["num_cpus"] or os.cpu_count(), object_store_memory=data["ray"]["object_store_memory_mb"] * 1024 * 1024, **kwargs)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        raise UsageError(f"cannot reach Ray at {address or 'a new local cluster'}: {_one_line(e)}; check ray.address / RAY_ADDRESS, or drop it to start locally") from None


def probe_address(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds (not Ray's minutes of retries) when host:port does not answer."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot reach Ray at {address}: {getattr(e, 'strerror', None) or e}; check ray.address / RAY_ADDRESS, "
                         "or drop it to start a local cluster") from None


class Progress:
    """One updating line on a terminal; plain log lines otherwise."""

    def __init__(self, mode: str):
        self.tty = sys.stderr.isatty() if mode == "auto" else mode == "rich"
        self.off = mode == "off"
        self.last_line = ""
        self.last_print = 0.0
        self.t0 = time.monotonic()
        self.stage_start: dict[str, float] = {}
        self.last_stage: Any = None

    def line(self, p: dict[str, Any]) -> str:
        parts = [p.get("phase", "")]
        if p.get("epoch"):
            parts.append(f"epoch {p['epoch']}")
        if p.get("global_step"):
            parts.append(f"step {p['global_step']}/{p.get('total_steps', '?')}")
        if p.get("stage"):
            parts.append(str(p["stage"]))
        if p.get("total"):
            done, total = p.get("done", 0), p["total"]
            eta = ""
            key = f"{p.get('stage')}|{p.get('global_step')}"
            start = self.stage_start.setdefault(key, time.monotonic())
            if done:
                eta = f" eta {((time.monotonic() - start) / done) * (total - done):.0f}s"
            parts.append(f"episodes {done}/{total}{eta}")
        parts.append(f"acc/rej/skip {p.get('accept', 0)}/{p.get('reject', 0)}/{p.get('skip', 0)}")
        parts.append(f"tokens {p.get('tokens', 0)}")
        if p.get("cost_usd"):
            parts.append(f"${p['cost_usd']:.4f}")
        parts.append(f"{time.monotonic() - self.t0:.0f}s")
        return " | ".join(x for x in parts if x)

    def show(self, p: dict[str, Any]) -> None:
        if self.off:
            return
        text = self.line(p)
        if self.tty:
            sys.stderr.write("\r" + text[:150].ljust(150))
            sys.stderr.flush()
        else:
            core = text.rsplit(" | ", 1)[0]
            if core != self.last_line and (time.monotonic() - self.last_print > 5 or p.get("stage") != self.last_stage):
                print(f"[progress] {text}", file=sys.stderr, flush=True)
                self.last_line, self.last_print, self.last_stage = core, time.monotonic(), p.get("stage")

    def close(self) -> None:
        if self.tty and not self.off:
            sys.stderr.write("\n")


def summary_table(s: dict[str, Any]) -> str:
    if s.get("mode") == "eval":
        e = s["eval"]
        rows = [f"eval on {s['split']}: hard {e['hard']:.3f}  soft {e['soft']:.3f}  (n={e['n']}, infra errors {e['infra_errors']}, data errors {e.get('data_errors', 0)})"]
        rows += [f"  {t:<34} hard {v['hard']:.3f} soft {v['soft']:.3f} n={v['n']}" for t, v in e["per_type"].items()]
        return "\n".join(rows)
    rows = ["", f"{'skill':<9}{'selection':>11}{'test hard':>11}{'test soft':>11}"]
    sel = s["selection"]
    for k in ("initial", "best", "final"):
        t = s["test"][k]
        rows.append(f"{k:<9}{(sel[k] if sel[k] is not None else float('nan')):>11.3f}{t['hard']:>11.3f}{t['soft']:>11.3f}")
    c = s["counts"]
    rows.append(f"steps {s['steps']}: {c['accept']} accepted, {c['reject']} rejected, {c['skip']} skipped; "
                f"test hard delta (best - initial) {s['delta_test_hard_best_vs_initial']:+.3f}")
    tok = s["tokens"]
    rows.append(f"model calls {tok['calls']} (+{tok['cache_hits']} from cache), tokens {tok['tokens']}, cost ${tok['cost_usd']:.4f}, "
                f"wall {s['wall_time_s']:.0f}s")
    rows.append("per task type (test, best skill): " + ", ".join(f"{t} {v['hard']:.2f}" for t, v in s["test"]["best"]["per_type"].items()))
    return "\n".join(rows)


def job_submission_id() -> Optional[str]:
    """The `ray job submit` submission id when we run as a job's entrypoint, else None."""
    import json

    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw).get("metadata", {}).get("job_submission_id")
    except ValueError:
        return None


def record_job(run_dir: Path) -> None:
    """Map the job to its run: every submission that worked on this run directory is listed in jobs.json."""
    job = job_submission_id()
    if not job:
        return
    from skillopt_ray.utils.io import atomic_write_json, read_json

    path = run_dir / "jobs.json"
    jobs = read_json(path) if path.exists() else []
    jobs.append({"submission_id": job, "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
    atomic_write_json(path, jobs)
    print(f"ray job {job} -> run directory {run_dir}", file=sys.stderr)


def run_one(data: dict[str, Any]) -> int:
    """Run a composed, validated config end to end; returns the exit code."""
    outcome = execute(data)
    for note in outcome.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    if outcome["status"] != "ok":
        print(f"error: {outcome['message']}", file=sys.stderr)
        return int(outcome["exit"])
    print(summary_table(outcome["summary"]))
    print(f"run directory: {outcome['run_dir']}")
    ml = outcome.get("mlflow")
    if ml:
        print(f"mlflow run: {ml['run_id']} (tracking uri {ml['tracking_uri']}; view with: mlflow ui --backend-store-uri {ml['tracking_uri']} --host 127.0.0.1)")
    return EXIT_OK


def needs_embedded_server(data: dict[str, Any]) -> bool:
    """A role runs on the embedded model and calls will reach it (replay mode answers from the cache)."""
    return any(data["llm"][r]["provider"] == "embedded" for r in ("target", "optimizer")) and data["llm"]["cache_mode"] != "replay"


def execute(data: dict[str, Any]) -> dict[str, Any]:
    """One training (or eval) run through the driver actor; the outcome dict it returns says how it ended.

    Used by the CLI and by each sweep trial, so both run exactly the same code."""
    import ray

    from skillopt_ray.driver import DriverActor
    from skillopt_ray.llm.embedded import NOTICE, EmbeddedServer, EmbeddedUnavailable

    check_skill_files(data)
    run_dir = run_dir_for(data)
    check_output_dir(Path(data["output_dir"]))
    if run_dir.exists() and not data["resume"]:
        backup = run_dir.with_name(run_dir.name + f".old-{int(time.time())}")
        shutil.move(str(run_dir), str(backup))
        print(f"resume=false: previous run moved to {backup}", file=sys.stderr)
    elif (run_dir / "state.json").exists():
        print(f"resuming run in {run_dir}", file=sys.stderr)
    run_dir.mkdir(parents=True, exist_ok=True)
    record_job(run_dir)
    check_keys(data)
    server: Optional[EmbeddedServer] = None
    try:
        if needs_embedded_server(data):
            print(f"note: {NOTICE}", file=sys.stderr)
            e = data["llm"]["embedded"]
            url = e.get("server_url")
            if not url:
                try:
                    server = EmbeddedServer(e["model_path"], e["ctx_size"], e["threads"], e["parallel"], e["startup_timeout_s"],
                                            run_dir / "embedded_server.log")
                    url = server.start()
                except EmbeddedUnavailable as err:
                    raise UsageError(str(err)) from None
            for r in ("target", "optimizer"):
                if data["llm"][r]["provider"] == "embedded":
                    data["llm"][r]["base_url"] = url
        start_ray(data)
        from skillopt_ray.lifeline import identity

        # the driver, the gateway and the env actors exit within ~0.1 s of this process's death (no paid calls after a kill)
        driver = DriverActor.options(num_cpus=0).remote(data, str(run_dir), identity())
        ref = driver.run.remote()
        progress = Progress(data["debug"]["progress"])
        print(f"run directory: {run_dir}", file=sys.stderr)
        while True:
            ready, _ = ray.wait([ref], timeout=1.0)
            if ready:
                break
            try:
                progress.show(ray.get(driver.progress.remote(), timeout=5))
            except Exception:  # noqa: BLE001 - progress is best effort
                pass
        progress.close()
        outcome = ray.get(ref)
        ray.kill(driver, no_restart=True)
    finally:
        if server is not None:
            server.stop()
    return outcome


def expand_multirun(overrides: list[str]) -> list[list[str]]:
    """Hydra-style sweeps: `seed=1,2,3 optimizer.learning_rate=4,6` -> the cartesian product."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    choices = []
    for o in parsed:
        if o.is_sweep_override():
            vals = [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        else:
            vals = [o.input_line]
        choices.append(vals)
    return [list(c) for c in itertools.product(*choices)]


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("config groups: " + ", ".join(sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())))
        return EXIT_OK
    show_cfg = False
    if "--cfg" in argv:
        i = argv.index("--cfg")
        show_cfg = True
        del argv[i : i + 2]
    multirun = False
    for flag in ("-m", "--multirun"):
        if flag in argv:
            argv.remove(flag)
            multirun = True
    try:
        runs = expand_multirun(argv) if multirun else [argv]
        code = EXIT_OK
        for overrides in runs:
            cfg = compose(overrides)
            _obj, data = typed(cfg)
            data = resolve_paths(data)
            if show_cfg:
                import yaml

                from skillopt_ray.config import redact

                print(yaml.safe_dump(redact(data), sort_keys=False))
                continue
            if multirun:
                print(f"=== multirun: {' '.join(overrides)}", file=sys.stderr)
            code = max(code, run_one(data))
        return code
    except UsageError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_STOPPED
