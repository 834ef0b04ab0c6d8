"""Every module the project writes stays small (the developers' guide: under 600 lines), so a
growing one is split along its seams when it grows, not after a reader has drowned in it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[1]
LIMIT = 600
#: Where the project's own code lives; built and installed things are not looked at.
SOURCES = ("jhub_gpubooking", "tests", "benchmarks", "scripts", "demo", "docs", "labextension/src",
           "labextension/style", "labextension/test")
SUFFIXES = {".py", ".js", ".ts", ".tsx", ".html", ".css", ".sh"}


def project_files() -> list[Path]:
    return sorted(path for folder in SOURCES for path in (ROOT / folder).rglob("*")
                  if path.suffix in SUFFIXES and path.is_file()
                  and not {"node_modules", "_build", "__pycache__", "lib"} & set(path.parts))


def test_the_modules_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in project_files()}
    assert {"jhub_gpubooking/db/store.py", "tests/test_gpu.py", "labextension/src/index.ts"} <= names


def test_every_module_stays_under_the_limit():
    too_long = {path.relative_to(ROOT).as_posix(): count for path in project_files()
                if (count := len(path.read_text().splitlines())) >= LIMIT}
    assert too_long == {}
