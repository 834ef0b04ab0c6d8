"""One test run at a time in ``labextension/``: ``scripts/test`` runs the dependency sets side by
side, and the extension's tests install ``node_modules`` and rebuild ``prebuilt/`` in place, which
a second run must neither do at the same moment nor read half-written (the packaging tests copy
and compare ``prebuilt/``)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EXTENSION = Path(__file__).resolve().parents[1] / "labextension"


@contextmanager
def labextension_to_myself() -> Iterator[None]:
    """Hold the lock on ``labextension/`` (an flock on the folder itself) while the block runs."""
    folder = os.open(EXTENSION, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # closing releases the lock
