"""Hook time limits hold for CPU-bound hooks: a pure-Python loop is stopped at its limit
and reported as a hook failure; a hook that cannot be stopped is named as a runaway
(what the worker's watchdog acts on: tests/workers/test_watchdog.py)."""

from __future__ import annotations

import threading
import time

from graph import hook_threads
from graph.context import HookConfig
from graph.model import HookResult, WorkItem
from graph.registry import HookRegistry
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from tests.graph.test_contract import small_graph


def hook_thread(name):
    return next((t for t in threading.enumerate() if t.name == f"hook-{name}"), None)


def test_a_cpu_bound_hook_is_stopped_at_its_time_limit_and_reported_as_a_hook_failure():
    """Given an exit hook that loops forever in pure Python (never sleeps, never returns)
    When the node's exit chain runs with the hook's 0.2 s limit
    Then the chain blocks, retriable, with the hook's timeout as the reason, and the
      hook's thread has ended (it is not left burning CPU)."""
    reg = HookRegistry()
    spins = [0]

    @reg.hook("spin", timeout=0.2)
    def spin(ctx):
        while True:
            spins[0] += 1

    rt = Runtime(small_graph(reg, "spin"), MemoryStateStore())
    result = rt.enrol(WorkItem("local:1"), HookConfig(), None)
    assert result.status == "blocked"
    assert result.messages[0].code == "hook-timeout"
    assert "ran past its timeout of 0.2 s" in result.messages[0].text
    thread = hook_thread("spin")
    if thread is not None:
        thread.join(10)
        assert not thread.is_alive()
    assert spins[0] > 0
    counted = spins[0]
    time.sleep(0.1)
    assert spins[0] == counted  # stopped, not abandoned
    assert hook_threads.runaways(0.0) == []


def test_a_hook_that_swallows_the_stop_is_named_a_runaway():
    """Given a CPU-bound hook that catches the stop and goes on looping
    When it runs past its limit
    Then it is still reported as a timeout, and once it has burnt CPU since, it is named
      a runaway (what makes the worker's watchdog end the process); once it ends, it is
      forgotten."""
    reg = HookRegistry()
    release = threading.Event()

    @reg.hook("stubborn", timeout=0.2)
    def stubborn(ctx):
        while not release.is_set():
            try:
                while not release.is_set():
                    pass
            except SystemExit:
                continue
        return HookResult.passed("stubborn")

    rt = Runtime(small_graph(reg, "stubborn"), MemoryStateStore())
    try:
        result = rt.enrol(WorkItem("local:1"), HookConfig(), None)
        assert result.messages[0].code == "hook-timeout"
        deadline = time.monotonic() + 30
        while "hook-stubborn" not in hook_threads.runaways(0.2):
            assert time.monotonic() < deadline, "never named a runaway"
            time.sleep(0.05)
    finally:
        release.set()
    thread = hook_thread("stubborn")
    if thread is not None:
        thread.join(10)
    assert hook_threads.runaways(0.0) == []
