"""Label and field selectors with the Kubernetes API server's grammar.

Part of the devcluster, a *contract test of the Kubernetes API calls KubeSpawner makes* (not a cluster).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ApiError

# Which field selectors the real API server accepts, per resource (all kinds accept the metadata ones).
SUPPORTED_FIELDS = {
    "pods": {"status.phase", "spec.nodeName", "spec.schedulerName", "status.podIP"},
    "events": {
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
    },
    "secrets": {"type"},
}
METADATA_FIELDS = {"metadata.name", "metadata.namespace"}

_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")
_EQUALITY_REQUIREMENT = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS_REQUIREMENT = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")

Predicate = Callable[[dict], bool]


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" also match objects that lack the label, as in Kubernetes.
        return not present or value not in self.values


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a ``(a,b)`` value set."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (f,g),h notin (i),j,!k``; raise a 400 ApiError on bad syntax."""
    requirements = []
    for part in _split_top_level(text or ""):
        if match := _SET_REQUIREMENT.match(part):
            key, operator, raw_values = match.groups()
            values = frozenset(v.strip() for v in raw_values.split(",") if v.strip())
            requirements.append(Requirement(key, operator, values))
        elif match := _EQUALITY_REQUIREMENT.match(part):
            key, operator, value = match.groups()
            requirements.append(Requirement(key, "!=" if operator == "!=" else "=", frozenset([value])))
        elif match := _EXISTS_REQUIREMENT.match(part):
            negated, key = match.groups()
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
        else:
            raise ApiError.bad_request(f"unable to parse requirement: {part.strip()!r}")
    return requirements


def field_value(obj: dict, path: str) -> str:
    """The string form of a dotted field path, "" when absent (as the API server compares it)."""
    value: object = obj
    for step in path.split("."):
        value = value.get(step) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def parse_field_selector(text: str | None, resource: str) -> list[tuple[str, bool, str]]:
    """Parse ``a=b,c!=d`` into (path, wanted_equal, value); unsupported fields are a 400 like the API."""
    terms = []
    supported = METADATA_FIELDS | SUPPORTED_FIELDS.get(resource, set())
    for part in _split_top_level(text or ""):
        match = _EQUALITY_REQUIREMENT.match(part)
        if not match:
            raise ApiError.bad_request(f"invalid selector: {part.strip()!r}")
        path, operator, value = match.groups()
        if path not in supported:
            raise ApiError.bad_request(f'field label not supported: {path}')
        terms.append((path, operator != "!=", value))
    return terms


def make_filter(resource: str, label_selector: str | None, field_selector: str | None) -> Predicate:
    """One predicate over whole objects combining both selectors (parsed once, up front)."""
    requirements = parse_label_selector(label_selector)
    field_terms = parse_field_selector(field_selector, resource)

    def matches(obj: dict) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        if not all(requirement.matches(labels) for requirement in requirements):
            return False
        return all((field_value(obj, path) == value) == equal for path, equal, value in field_terms)

    return matches
