"""Container commands for the pods the simulated kubelet runs in tests (it runs them as local
processes, so they are Python, not images)."""

from __future__ import annotations

import sys


def sleeping(seconds: int) -> list[str]:
    """A command that sleeps ``seconds``, then exits 0."""
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


#: Runs until the test deletes its pod (longer than any test waits).
SLEEPER = sleeping(600)
