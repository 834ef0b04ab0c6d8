"""The JupyterLab extension (labextension/): its logic's unit tests (vitest) and its committed
prebuilt output, which must be exactly what the sources build to.

The prebuilt output is committed so that building the wheel, installing it and running the demo
need no Node.js; these tests are what keeps it honest. They need Node.js and npm; the first run
installs labextension/node_modules from package-lock.json (``npm ci``, the only network use),
later runs are offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from labextension_lock import EXTENSION, labextension_to_myself
from packaging.version import Version

import jhub_gpubooking

# runs in one dependency set when both run side by side: it does not use the Hub, the spawner,
# SQLAlchemy or tornado (pytest.mark.one_set, tests/one_set.py)
pytestmark = pytest.mark.one_set("latest")

PREBUILT = EXTENSION / "prebuilt"
MODULES = EXTENSION / "node_modules"
# written after a successful `npm ci`: the hash of the lock file it installed
STAMP = MODULES / ".jhub-gpubooking-lock-hash"


def npm(*args: str, timeout: float = 600) -> str:
    env = {**os.environ, "CI": "true", "NPM_CONFIG_UPDATE_NOTIFIER": "false", "NPM_CONFIG_FUND": "false",
           "NPM_CONFIG_AUDIT": "false"}
    result = subprocess.run(["npm", *args], cwd=EXTENSION, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"npm {' '.join(args)} failed:\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def node_modules() -> Iterator[Path]:
    """labextension/node_modules as package-lock.json says, installed once per lock file; the
    module's tests hold labextension/ to themselves (see :mod:`labextension_lock`)."""
    if shutil.which("npm") is None:
        pytest.fail("npm is not on PATH: the JupyterLab extension's tests need Node.js 20 and npm")
    with labextension_to_myself():
        lock_hash = hashlib.sha256((EXTENSION / "package-lock.json").read_bytes()).hexdigest()
        if not STAMP.exists() or STAMP.read_text().strip() != lock_hash:
            npm("ci", timeout=900)
            STAMP.write_text(lock_hash)
        yield MODULES


def test_the_extension_logic_passes_its_unit_tests(node_modules):
    output = npm("test")
    # vitest's summary, e.g. "Tests  19 passed (19)": some tests ran and none failed
    assert " passed" in output and " failed" not in output, output[-3000:]


def test_the_extension_type_checks(node_modules):
    npm("run", "typecheck")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_committed_prebuilt_output_is_what_the_sources_build_to(node_modules):
    """Rebuilds in place (the output depends on the sources' path relative to node_modules, not on
    where the checkout lives) and compares. A stale prebuilt/ is left rebuilt: commit it."""
    committed = snapshot(PREBUILT)
    npm("run", "build")
    rebuilt = snapshot(PREBUILT)
    changed = sorted(name for name in committed.keys() | rebuilt.keys() if committed.get(name) != rebuilt.get(name))
    assert changed == [], (
        "labextension/prebuilt/ was out of date with labextension/src (rebuilt now; commit it): "
        f"{changed}"
    )


def test_the_prebuilt_output_is_the_extension_jupyterlab_loads():
    """What JupyterLab reads from share/jupyter/labextensions/jhub-gpubooking/package.json."""
    source = json.loads((EXTENSION / "package.json").read_text())
    built = json.loads((PREBUILT / "package.json").read_text())
    assert built["name"] == source["name"] == "jhub-gpubooking"
    entry = PREBUILT / built["jupyterlab"]["_build"]["load"]
    assert entry.is_file() and entry.name.startswith("remoteEntry.")
    assert built["jupyterlab"]["_build"]["extension"] == "./extension"
    # one version for the Python package and the extension (the extension has no ".dev0")
    assert source["version"] == Version(jhub_gpubooking.__version__).base_version
