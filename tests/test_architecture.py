"""ARCHITECTURE.md's "straight path" names only files and functions that exist.

Every code name in backticks in that section must be defined (a def, class, JS function or
const, attribute, JSON key or element id) in the package, its templates and scripts, or the
KubeSpawner / JupyterHub code it hands over to; every file it names must exist.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import jupyterhub.spawner
import kubespawner
import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "jhub_gpubooking"
KUBESPAWNER = Path(kubespawner.__file__).parent
SECTION_TITLE = '## The straight path: from the page\'s "Book" button to the pod\'s limits'

IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
FILE_NAME = re.compile(r"[\w./-]+\.(?:py|js|html)")
HTML_ID_OR_HEADER = re.compile(r"[A-Za-z][\w]*(?:-[\w]+)+")


def section() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert SECTION_TITLE in text
    body = text.split(SECTION_TITLE, 1)[1]
    return body.split("\n## ", 1)[0]


def code_spans() -> list[str]:
    # a span may wrap onto the next line of the list
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", section(), re.S)]


@cache
def sources() -> str:
    files = [
        *(p for p in PACKAGE.rglob("*") if p.suffix in {".py", ".js", ".html"}),
        *KUBESPAWNER.glob("*.py"),
        Path(jupyterhub.spawner.__file__),
    ]
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


def defined(name: str) -> bool:
    escaped = re.escape(name)
    return bool(re.search(
        rf"\b(?:def|class|function|const|let|var)\s+{escaped}\b"  # functions, classes, JS consts
        rf"|^\s*(?:self\.)?{escaped}\s*[:=]"  # attributes, annotations, traits
        rf"|[\"']{escaped}[\"']\s*:"  # JSON keys (the page's config)
        rf"|\bid=\"{escaped}\"",  # element ids in templates
        sources(),
        re.M,
    ))


def file_exists(name: str) -> bool:
    candidates = [ROOT / name, PACKAGE / name, KUBESPAWNER / name]
    return any(path.is_file() for path in candidates)


def test_the_section_names_files_and_functions():
    spans = code_spans()
    assert sum(bool(FILE_NAME.fullmatch(s)) for s in spans) >= 15
    assert sum(bool(IDENTIFIER.fullmatch(s)) for s in spans) >= 50


@pytest.mark.parametrize("span", code_spans())
def test_every_name_exists(span):
    if FILE_NAME.fullmatch(span):
        assert file_exists(span), f"no file {span}"
    elif IDENTIFIER.fullmatch(span):
        missing = [part for part in span.split(".") if not defined(part)]
        assert missing == [], f"{span}: nothing defines {missing}"
    elif HTML_ID_OR_HEADER.fullmatch(span):
        assert span in sources(), f"{span} appears nowhere in the code"
