"""Check one reply of the python-functions example: run the task's hidden unit tests on the function the reply wrote.

Run by skillopt_ray in its sandbox as `check.py <task.json> <reply.txt>` (no network, limits, no keys). The reply's
code runs in a child process of its own, in an empty folder, and is handed only the arguments of each test: what it
prints never reaches this script's output (so it cannot print a score of its own), it is never told where the
expected values are, and a function that never returns fails its tests after TIME_LIMIT_S instead of stalling the
check. Prints the share of tests passed, a score in [0, 1], on its last line; what it prints before that (which test
failed and how) is shown to the optimizer's analysts.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
TIME_LIMIT_S = 10  # for all of one reply's tests together
SHOWN_CHARS = 600  # of what the reply's code printed, shown to the analysts

# The child: runs the reply's code, calls the function on each test's arguments and writes one JSON line per call to
# the stdout it was started with, which the reply's code cannot print to (its prints go to stderr).
CHILD = r"""
import json, os, sys
job = json.loads(sys.stdin.read())
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout.reconfigure(line_buffering=True)
def report(**fields):
    out.write(json.dumps(fields) + "\n")
    out.flush()
namespace = {}
try:
    exec(compile(job["code"], "reply", "exec"), namespace)
except BaseException as e:
    report(load=f"{type(e).__name__}: {e}")
    os._exit(0)
fn = namespace.get(job["function"])
if not callable(fn):
    report(load=f"no function named {job['function']} was defined")
    os._exit(0)
for i, args in enumerate(job["args"]):
    try:
        report(i=i, got=json.loads(json.dumps(fn(*args))))  # compared as JSON: tuples become lists, keys strings
    except BaseException as e:
        report(i=i, error=f"raised {type(e).__name__}: {e}")
os._exit(0)
"""


def code_of(reply: str) -> str:
    """The last fenced code block of the reply, else the whole reply."""
    blocks = FENCE.findall(reply)
    return blocks[-1] if blocks else reply


def run_reply(code: str, function: str, args: list) -> tuple[list[dict], str, bool]:
    """The child's report lines, what the reply's code printed, and whether it ran out of time."""
    job = json.dumps({"code": code, "function": function, "args": args})
    with tempfile.TemporaryDirectory(prefix="reply-") as empty:
        try:
            p = subprocess.run(
                [sys.executable, "-I", "-c", CHILD],
                input=job, capture_output=True, text=True, cwd=empty, timeout=TIME_LIMIT_S,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": empty},
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            return _reports(_text(e.stdout)), _text(e.stderr), True
    return _reports(p.stdout), p.stderr, False


def _text(data) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")


def _reports(stdout: str) -> list[dict]:
    found = []
    for line in stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            found.append(row)
    return found


def score(meta: dict, reports: list[dict], timed_out: bool) -> float:
    """Print one FAIL line per failed test and return the share passed."""
    load = next((r["load"] for r in reports if "load" in r), None)
    if load is not None:
        print(f"the code does not run: {load}")
        return 0.0
    by_test = {r.get("i"): r for r in reports if "i" in r}
    passed = 0
    for i, (args, expected) in enumerate(meta["tests"]):
        call = f"{meta['function']}({', '.join(repr(a) for a in args)})"
        r = by_test.get(i)
        if r is None:
            why = f"did not return within {TIME_LIMIT_S} s" if timed_out else "ended the program before returning"
            print(f"FAIL {call} {why}")
        elif "error" in r:
            print(f"FAIL {call} {r['error']}")
        elif r.get("got") == expected:
            passed += 1
        else:
            print(f"FAIL {call} returned {r.get('got')!r}, expected {expected!r}")
    return passed / len(meta["tests"])


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        meta = json.load(f)["metadata"]
    with open(sys.argv[2], encoding="utf-8") as f:
        code = code_of(f.read())
    reports, printed, timed_out = run_reply(code, meta["function"], [args for args, _ in meta["tests"]])
    if printed.strip():
        shown = printed.strip()[-SHOWN_CHARS:]
        print("the code printed (last part):\n" + "\n".join("  | " + line for line in shown.splitlines()))
    print(score(meta, reports, timed_out))


if __name__ == "__main__":
    main()
