"""Check one reply of the python-functions example: run the task's hidden unit tests on the function the reply wrote.

Run by skillopt_ray in its sandbox as `check.py <task.json> <reply.txt>` (no network, limits, no keys), so the
model's code can be executed here. Prints the share of tests passed, a score in [0, 1], on its last line; what it
prints before that (which test failed and how) is shown to the optimizer's analysts.
"""

import json
import re
import sys

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def code_of(reply: str) -> str:
    """The last fenced code block of the reply, else the whole reply."""
    blocks = FENCE.findall(reply)
    return blocks[-1] if blocks else reply


def as_json(value):
    """Compare as JSON would: tuples become lists, dict keys strings."""
    return json.loads(json.dumps(value))


def main() -> None:
    task = json.load(open(sys.argv[1], encoding="utf-8"))
    reply = open(sys.argv[2], encoding="utf-8").read()
    meta = task["metadata"]
    namespace: dict = {}
    try:
        exec(compile(code_of(reply), "reply", "exec"), namespace)
    except Exception as e:  # the reply's code does not even load: every test fails
        print(f"the code does not run: {type(e).__name__}: {e}")
        print(0.0)
        return
    fn = namespace.get(meta["function"])
    if not callable(fn):
        print(f"no function named {meta['function']} was defined")
        print(0.0)
        return
    passed = 0
    for args, expected in meta["tests"]:
        shown = ", ".join(repr(a) for a in args)
        try:
            got = as_json(fn(*args))
        except Exception as e:
            print(f"FAIL {meta['function']}({shown}) raised {type(e).__name__}: {e}")
            continue
        if got == expected:
            passed += 1
        else:
            print(f"FAIL {meta['function']}({shown}) returned {got!r}, expected {expected!r}")
    print(passed / len(meta["tests"]))


if __name__ == "__main__":
    main()
