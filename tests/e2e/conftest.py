"""One demo for all end-to-end tests of this folder (starting it costs ~15 s)."""

from __future__ import annotations

import pytest
from e2e_harness import Driver, start_demo


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    running = start_demo(tmp_path_factory.mktemp("e2e-demo"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def driver(demo):
    client = Driver(demo)
    yield client
    client.close()
