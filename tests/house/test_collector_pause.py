"""Imports run with the cycle collector off, counted across threads; it comes back on and what was imported is frozen."""

from __future__ import annotations

import gc
import threading

from skillopt_ray.base.collector import imports_without_collector


def test_the_collector_is_off_inside_and_back_on_after_with_the_imports_frozen():
    assert gc.isenabled()
    before = gc.get_freeze_count()
    kept = []
    try:
        with imports_without_collector():
            assert not gc.isenabled()
            kept.extend([[i] for i in range(1000)])  # objects made during the "import"
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + 1000
    finally:
        gc.unfreeze()


def test_overlapping_pauses_in_two_threads_turn_it_on_only_when_the_last_ends():
    inside, release = threading.Event(), threading.Event()
    seen = []

    def other():
        with imports_without_collector():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    try:
        with imports_without_collector():
            t.start()
            assert inside.wait(10)
        seen.append(gc.isenabled())  # the other thread's pause still runs
        release.set()
        t.join(10)
        seen.append(gc.isenabled())
    finally:
        release.set()
        gc.unfreeze()
    assert seen == [False, True]


def test_a_collector_the_process_had_turned_off_stays_off():
    gc.disable()
    try:
        with imports_without_collector():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
