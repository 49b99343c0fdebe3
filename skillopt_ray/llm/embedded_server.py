"""Process entry point for the embedded llama.cpp server (xllamacpp). Run by EmbeddedServer, not by hand."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def _owner_gone(why: str) -> None:
    """Exit at once: the server keeps no state, and its HTTP threads would hold a clean exit back."""
    sys.stderr.write(f"embedded server (pid {os.getpid()}): {why}; exiting\n")
    sys.stderr.flush()
    os._exit(0)


def _hold_lifeline(fd: int) -> None:
    from skillopt_ray.base.lifeline import hold
    from skillopt_ray.llm.embedded_orphans import OWNER_ENV, parse_marker

    owner = parse_marker(os.environ.get(OWNER_ENV))
    hold(fd, {"pid": owner[0], "start": owner[1]} if owner else None, _owner_gone)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--lifeline", type=int, default=None, help="read end of the starter's lifeline pipe")
    a = ap.parse_args()
    if a.lifeline is not None:  # before the model loads: a starter killed meanwhile leaves nothing behind
        _hold_lifeline(a.lifeline)
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = a.model
    p.n_ctx = a.ctx
    p.n_parallel = a.parallel
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    # flash attention off: on CPU it made SmolLM2's generation 1.7x slower at a 1.5k-token context and 2.5-3x slower at
    # 7k (83 vs 48 and 34 vs 12 tokens/s on 1 thread), for 15-20% faster prompt reading; llama.cpp's default (auto) turns it on
    p.flash_attn_type = 0
    p.port = a.port
    p.hostnames = ["127.0.0.1"]
    p.model_alias = "smollm2-135m"
    # the model's own chat template (jinja) renders the tools a request offers and parses its tool calls
    p.use_jinja = True
    server = xllamacpp.Server(p)  # serves HTTP on its own threads
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"embedded server listening on 127.0.0.1:{a.port}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
