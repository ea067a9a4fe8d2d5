"""How long a test waits for another process: ONE factor for the whole suite.

A bound on a wait (a subprocess, a worker's queue, a process group's timeout) only guards against a
hang; on a loaded machine the awaited work takes a multiple of its quiet time, so every such bound is
``scaled(seconds)``: ``seconds`` times ``KGEVAL_TEST_TIMEOUT_SCALE`` when set, otherwise times the
1-minute load average per core (at least 1). Waits for a condition poll it (``wait_until``) rather
than sleep a fixed time. Subprocesses inherit the factor through ``env()``.
"""

from __future__ import annotations

import os
import time

ENV = "KGEVAL_TEST_TIMEOUT_SCALE"


def factor() -> float:
    """The multiplier of every bound: the environment's, else the load per core (never below 1)."""
    given = os.environ.get(ENV, "").strip()
    if given:
        return max(float(given), 1.0)
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return max(load / (os.cpu_count() or 1), 1.0)


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's factor."""
    return seconds * factor()


def env(base: dict | None = None) -> dict:
    """``base`` (default: this environment) with the factor frozen for a subprocess and its children."""
    return {**(os.environ if base is None else base), ENV: f"{factor():.3g}"}


def wait_until(condition, what: str, seconds: float = 60, interval: float = 0.1):
    """Poll ``condition()`` until it returns a truthy value (returned); fail naming ``what`` after
    ``scaled(seconds)``."""
    deadline = time.monotonic() + scaled(seconds)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {scaled(seconds):.0f} s")
        time.sleep(interval)
