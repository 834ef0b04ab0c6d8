"""Container commands for the pods the simulated kubelet runs in tests (it runs them as local
processes, so they are Python, not images)."""

from __future__ import annotations

import sys

#: Runs until the test deletes its pod (longer than any test waits).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
