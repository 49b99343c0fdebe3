"""The driver's tracker opens in a thread (after the first model call, in one process): logging calls made before
it is open are kept in order and sent once it is open, so no stage waits for MLflow; errors still reach the run."""

from __future__ import annotations

import threading

import pytest

from skillopt_ray.engine.driver import TrackerWhenReady


class FakeTracker:
    """Records the calls it gets, in order, and the thread that made each."""

    def __init__(self, fail_on: str = ""):
        self.calls: list[tuple[str, tuple]] = []
        self.fail_on = fail_on
        self.run_id = "r1"

    def _record(self, name, *args):
        if name == self.fail_on:
            raise RuntimeError(f"store refused {name}")
        self.calls.append((name, args))

    def log_artifact(self, *args):
        self._record("log_artifact", *args)

    def log_metrics(self, *args):
        self._record("log_metrics", *args)

    def set_tags(self, *args):
        self._record("set_tags", *args)

    def flush(self):
        pass

    def finish(self, status):
        self._record("finish", status)


def test_logging_before_the_tracker_is_open_returns_at_once_and_is_sent_in_order():
    go, opened = threading.Event(), threading.Event()
    fake = FakeTracker()

    def open_tracker():
        opened.set()
        return fake

    t = TrackerWhenReady(open_tracker, start=go)
    t.log_artifact("skills/v0.md", "skills")  # the seed skill, before any model call
    t.set_tags({"k": "v"})
    assert not opened.is_set() and fake.calls == []  # nothing waited for the store
    go.set()
    t.finish("FINISHED")  # a call whose caller waits: after every kept call
    assert fake.calls == [
        ("log_artifact", ("skills/v0.md", "skills")),
        ("set_tags", ({"k": "v"},)),
        ("finish", ("FINISHED",)),
    ]
    t.log_metrics({"x": 1.0}, 1)  # once open, calls go straight through
    assert fake.calls[-1] == ("log_metrics", ({"x": 1.0}, 1))


def test_a_kept_call_that_fails_is_raised_to_the_next_use():
    go = threading.Event()
    t = TrackerWhenReady(lambda: FakeTracker(fail_on="log_artifact"), start=go)
    t.log_artifact("a", None)
    go.set()
    with pytest.raises(RuntimeError, match="store refused log_artifact"):
        t.finish("FINISHED")
    assert t.opened() is not None  # the store opened: a failed run can still be marked ended


def test_an_open_that_fails_drops_the_kept_calls_and_raises_at_the_next_wait():
    def broken():
        raise RuntimeError("no store")

    go = threading.Event()
    t = TrackerWhenReady(broken, start=go)
    t.log_artifact("a", None)
    go.set()
    with pytest.raises(RuntimeError, match="no store"):
        t.get()
    assert t.opened() is None
    with pytest.raises(RuntimeError, match="no store"):
        t.log_metrics({"a": 1.0}, 0)


def test_other_attributes_wait_for_the_open_tracker():
    go = threading.Event()
    t = TrackerWhenReady(FakeTracker, start=go)
    threading.Timer(0.2, go.set).start()
    assert t.run_id == "r1"


@pytest.mark.timeout(120)  # a guard: before the fix this waited for a model call forever (wait_s=None)
def test_a_use_that_waits_opens_the_tracker_without_a_model_call():
    """A run that needs its tracker before any model call went out (a finished run's command again, a resume past its
    last call) opens it then, instead of waiting out the first-call wait for a call that cannot come."""
    go, fake = threading.Event(), FakeTracker()
    t = TrackerWhenReady(lambda: fake, start=go, wait_s=None)
    t.log_artifact("skills/v0.md", "skills")  # kept: logging never starts the open
    assert not go.is_set()
    t.finish("FINISHED")
    assert go.is_set()
    assert fake.calls == [("log_artifact", ("skills/v0.md", "skills")), ("finish", ("FINISHED",))]


@pytest.mark.timeout(120)
def test_a_failed_run_marks_its_tracker_ended_without_a_model_call():
    go = threading.Event()
    t = TrackerWhenReady(FakeTracker, start=go, wait_s=None)
    assert t.opened() is not None and go.is_set()


def test_a_steps_flush_waits_for_the_open_tracker_and_every_kept_call():
    """A step's commit ends with flush(): everything kept has reached MLflow, so a run stopped between steps (a
    sweep's scheduler, a kill) has its MLflow run and its steps logged."""
    go, fake = threading.Event(), FakeTracker()
    t = TrackerWhenReady(lambda: fake, start=go)
    t.log_artifact("skills/v0.md", "skills")
    t.log_metrics({"current_score": 0.5}, 1)
    assert fake.calls == []
    threading.Timer(0.2, go.set).start()
    t.flush()
    assert fake.calls == [("log_artifact", ("skills/v0.md", "skills")), ("log_metrics", ({"current_score": 0.5}, 1))]


def test_without_a_start_event_logging_waits_for_the_open_tracker():
    """On Ray the tracker opens at once (no first-call event) and a logging call waits for it, as every use did: a
    sweep trial stopped by its scheduler right after a step has its MLflow run."""
    gate, fake = threading.Event(), FakeTracker()

    def slow_open():
        gate.wait(10)
        return fake

    t = TrackerWhenReady(slow_open)
    threading.Timer(0.2, gate.set).start()
    t.log_artifact("skills/v0.md", "skills")
    assert fake.calls == [("log_artifact", ("skills/v0.md", "skills"))]
