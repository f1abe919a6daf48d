"""Stopping a hook that runs past its time limit, and telling one that cannot be stopped.

Each hook runs in a thread of its own (:func:`graph.runtime.call_hook`). One past its
limit is stopped by raising :data:`STOP` (``SystemExit``) in its thread (CPython's
``PyThreadState_SetAsyncExc``): pure-Python code, a CPU-bound loop included, gets it at
its next bytecode and ends. Code that does not return to the interpreter (a C extension
holding the interpreter lock, a blocking call) or a hook that swallows the exception
keeps running: such a thread is **abandoned** and watched; once it has burnt
:data:`RUNAWAY_CPU_SECONDS` of CPU since, it is a **runaway**
(:func:`runaways`), and the worker's watchdog (:mod:`workers.watchdog`) ends the
process, as it does when the interpreter is frozen outright, so the delivery is taken by
another worker and counted against its attempts.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time

#: CPU seconds an abandoned hook thread may still burn before it is a runaway (a hook
#: blocked in I/O burns none and is left to finish).
RUNAWAY_CPU_SECONDS = 2.0

#: What a stopped hook's thread gets: ``SystemExit`` is no ``Exception``, so neither the
#: hook's nor a library's ``except Exception`` swallows it, and a thread ends quietly on it.
STOP = SystemExit

_abandoned: dict[threading.Thread, tuple[int, float]] = {}
_guard = threading.Lock()


def _cpu_clock(thread: threading.Thread) -> int | None:
    with contextlib.suppress(AttributeError, OSError, TypeError):
        return time.pthread_getcpuclockid(thread.ident)  # type: ignore[arg-type]
    return None


def stop(thread: threading.Thread) -> bool:
    """Raise :data:`STOP` in ``thread`` (at its next bytecode) and watch it until
    it ends (:func:`runaways`).

    Args:
        thread: a started hook thread that ran past its limit.

    Returns:
        whether the exception was set (``False``: the thread had already ended).
    """
    if thread.ident is None or not thread.is_alive():
        return False
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                      ctypes.py_object(STOP))
    clock = _cpu_clock(thread)
    if clock is not None:
        with _guard:
            _abandoned[thread] = (clock, time.clock_gettime(clock))
    return done == 1


def runaways(cpu_seconds: float = RUNAWAY_CPU_SECONDS) -> list[str]:
    """Names of the abandoned hook threads still alive that burnt more than
    ``cpu_seconds`` of CPU since they were stopped; ended ones are forgotten."""
    found = []
    with _guard:
        for thread, (clock, at) in list(_abandoned.items()):
            if not thread.is_alive():
                del _abandoned[thread]
                continue
            try:
                used = time.clock_gettime(clock) - at
            except OSError:  # the thread ended meanwhile
                del _abandoned[thread]
                continue
            if used > cpu_seconds:
                found.append(thread.name)
    return found
