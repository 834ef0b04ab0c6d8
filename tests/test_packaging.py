"""The package as a lab gets it: sdist and wheel built from a clean checkout, the requirements it
declares (exactly what it imports), and the wheel installed on the z2jh hub image's pins without
any extra, where ``pip check`` is clean and the spawner and both commands work."""

from __future__ import annotations

import ast
import email
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from labextension_lock import labextension_to_myself
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# runs in one dependency set when both run side by side: it does not use the Hub, the spawner,
# SQLAlchemy or tornado (pytest.mark.one_set, tests/one_set.py); in pins, whose run has fewer of
# the CPU's minutes than latest's once the wall-clock waits have a lane of their own
pytestmark = pytest.mark.one_set("pins")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "jhub_gpubooking"
HUB_IMAGE_PINS = REPO / "vendor" / "z2jh" / "hub-image-requirements.txt"


def run(*command: str | Path, cwd: Path | None = None, timeout: float = 600) -> str:
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True,
                            text=True, timeout=timeout, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command} failed:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The tracked files only, as a fresh clone has them (no venvs, caches or build output)."""
    if not (REPO / ".git").exists():
        return REPO  # an unpacked sdist is clean by construction
    target = tmp_path_factory.mktemp("checkout") / "jhub-gpubooking"
    with labextension_to_myself():  # not while another test run rebuilds labextension/prebuilt
        for name in run("git", "ls-files", "-z", cwd=REPO).split("\0"):
            if name and (REPO / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, target / name)
    return target


@pytest.fixture(scope="module")
def built(checkout, tmp_path_factory) -> tuple[Path, Path, str]:
    """``python -m build``: the sdist, then the wheel built from it; and the build's output."""
    dist = tmp_path_factory.mktemp("dist")
    output = run(sys.executable, "-m", "build", "--outdir", dist, checkout)
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")
    return sdist, wheel, output


def test_the_build_does_not_warn_about_deprecations_or_data_folders(built):
    output = built[2]
    assert "Deprecat" not in output
    # what setuptools says about data folders that are not (namespace) packages
    assert "is absent from the `packages` configuration" not in output


def test_the_sdist_carries_docs_helm_values_tests_and_the_vendored_z2jh_files(built):
    with tarfile.open(built[0]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {
        "docs/index.md", "helm-values/values.yaml", "helm-values/webhook/kustomization.yaml",
        "tests/test_packaging.py", "tests/conftest.py", "vendor/z2jh/SOURCE",
        "vendor/z2jh/hub-image-requirements.txt", "scripts/test", "scripts/demo",
        "scripts/refresh-z2jh", "demo/launch.py", "README.md", "LICENSE", "CHANGELOG.md",
        "labextension/package.json", "labextension/package-lock.json", "labextension/src/index.ts",
        "labextension/prebuilt/package.json",
    } <= names
    assert not [name for name in names if name.endswith((".pyc", ".sqlite"))]
    assert not [name for name in names if name.startswith(("labextension/node_modules/", "labextension/lib/"))]


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_has_an_spdx_license_and_project_urls(built):
    metadata = wheel_metadata(built[1])
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert not [c for c in metadata.get_all("Classifier") if c.startswith("License ::")]
    assert {url.split(",")[0] for url in metadata.get_all("Project-URL")} >= {
        "Documentation", "Source", "Issues", "Changelog"
    }


def test_the_wheel_holds_the_data_folders(built):
    with zipfile.ZipFile(built[1]) as archive:
        names = set(archive.namelist())
    data = built[1].name.split("-py3")[0] + ".data/data"
    assert {
        "jhub_gpubooking/templates/service/reservation.html",
        "jhub_gpubooking/templates/spawner/form.html",
        "jhub_gpubooking/static/service/booking.js",
        "jhub_gpubooking/db/migrations/alembic.ini",
        "jhub_gpubooking/db/migrations/script.py.mako",
        "jhub_gpubooking/service/openapi.yaml",
        "jhub_gpubooking/devcluster/__main__.py",
        # enables the JupyterLab server extension wherever the wheel is installed
        f"{data}/etc/jupyter/jupyter_server_config.d/jhub_gpubooking.json",
    } <= names
    assert [n for n in names if n.startswith("jhub_gpubooking/db/migrations/versions/")]


def test_the_wheel_carries_the_prebuilt_jupyterlab_extension(built):
    """Where JupyterLab finds it after ``pip install``: no ``jupyter lab build``, no Node.js."""
    prebuilt = REPO / "labextension" / "prebuilt"
    with zipfile.ZipFile(built[1]) as archive:
        shipped = {name.split("/share/jupyter/labextensions/jhub-gpubooking/", 1)[1]: archive.read(name)
                   for name in archive.namelist() if "/share/jupyter/labextensions/jhub-gpubooking/" in name}
    with labextension_to_myself():
        committed = {str(path.relative_to(prebuilt)): path.read_bytes()
                     for path in prebuilt.rglob("*") if path.is_file()}
    assert shipped == committed
    assert "package.json" in shipped and any(name.startswith("static/remoteEntry.") for name in shipped)


def imported_distributions(files: list[Path]) -> set[str]:
    """The distributions whose top-level modules ``files`` import (stdlib and our own left out)."""
    modules = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    modules -= set(sys.stdlib_module_names) | {"jhub_gpubooking", "__future__"}
    providers = packages_distributions()
    return {canonicalize_name(providers[module][0]) for module in modules}


def declared(metadata: email.message.Message, extra: str | None = None) -> set[str]:
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist")]
    return {
        canonicalize_name(r.name) for r in requirements
        if (r.marker is None if extra is None else r.marker and r.marker.evaluate({"extra": extra}))
        and canonicalize_name(r.name) != "jhub-gpubooking"
    }


def test_requirements_are_exactly_what_the_package_imports(built):
    metadata = wheel_metadata(built[1])
    cluster = sorted((PACKAGE / "devcluster").rglob("*.py"))
    lab_server = [PACKAGE / "lab" / "handlers.py"]  # runs in the user's single-user server
    rest = sorted(set(PACKAGE.rglob("*.py")) - set(cluster) - set(lab_server))
    # CP-SAT is optional: core/ilp_solvers.py imports it only when it is installed
    optional = declared(metadata, "cpsat")
    assert optional == {"ortools"} and optional <= imported_distributions(rest)
    assert declared(metadata) == imported_distributions(rest) - optional
    # the simulated cluster's own needs are its extra, not every hub's
    assert declared(metadata, "devcluster") == imported_distributions(cluster) - declared(metadata)
    # the user image's: the server extension's imports, and JupyterLab to show the labextension
    assert declared(metadata, "lab") - {"jupyterlab"} == (
        imported_distributions(lab_server) - declared(metadata)
    )


def test_the_wheel_installs_on_the_hub_image_pins_without_extras(built, tmp_path):
    """What a lab's hub image gets: no test extra, no official kubernetes client."""
    venv = tmp_path / "hub"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "-c", HUB_IMAGE_PINS, built[1], timeout=900)
    run(python, "-m", "pip", "check")
    installed = {
        canonicalize_name(name): version for name, version in re.findall(
            r"^(\S+)==(\S+)$", run(python, "-m", "pip", "list", "--format=freeze"), re.MULTILINE)
    }
    pins = {canonicalize_name(name): version for name, version in re.findall(
        r"^([A-Za-z0-9._-]+)==(\S+)", HUB_IMAGE_PINS.read_text(), re.MULTILINE)}
    # the image's versions stay (JupyterHub, kubespawner, SQLAlchemy, tornado, ...)
    assert {n: v for n, v in installed.items() if n in pins and pins[n] != v} == {}
    assert installed["jupyterhub"] == pins["jupyterhub"]
    assert not {"kubernetes", "pytest"} & set(installed)
    # the Hub imports the spawner; the service and the admin CLI start
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run([python, "-c", "import jhub_gpubooking.spawner, jhub_gpubooking.hub_config"],
                   check=True, env=env, cwd=tmp_path)
    for command in ("jhub-gpubooking-service", "jhub-gpubooking"):
        result = subprocess.run([venv / "bin" / command, "--help"], capture_output=True,
                                text=True, env=env, cwd=tmp_path, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "usage" in (result.stdout + result.stderr).lower() or "Options" in result.stdout
