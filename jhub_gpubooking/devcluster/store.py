"""In-memory object store of the devcluster: resourceVersions, watch history and watch fan-out.

The devcluster is a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster:
objects live in memory only and every change is one global resourceVersion, like etcd's revision.
"""

from __future__ import annotations

import asyncio
import copy
import re
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from .errors import ApiError
from .selectors import Predicate

# plural -> (kind, namespaced); the core/v1 resources KubeSpawner and kubectl touch.
RESOURCES = {
    "pods": ("Pod", True),
    "events": ("Event", True),
    "persistentvolumeclaims": ("PersistentVolumeClaim", True),
    "services": ("Service", True),
    "secrets": ("Secret", True),
    "configmaps": ("ConfigMap", True),
    "namespaces": ("Namespace", False),
    "nodes": ("Node", False),
}
# the Kubernetes version the devcluster answers /version with and its nodes report as kubelet version
SIMULATED_VERSION = "v1.31.0-devcluster"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def utc_timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with a ``Z``, the API server's timestamp format."""
    moment = moment or datetime.now(timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    """One entry of the watch history: what happened to which object at which resourceVersion."""

    resource_version: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str
    obj: dict
    previous: dict | None  # the object before a MODIFIED, so selectors can see it leave or enter


class Watcher:
    """One open watch: a queue of matching events, selector transitions turned into ADDED/DELETED."""

    def __init__(self, resource: str, namespace: str | None, matches: Predicate):
        self.resource = resource
        self.namespace = namespace
        self.matches = matches
        self.queue: asyncio.Queue[dict] = asyncio.Queue()

    def _in_scope(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.matches(obj)

    def offer(self, change: Change) -> None:
        if change.resource != self.resource:
            return
        now_matches = self._in_scope(change.obj)
        before_matched = self._in_scope(change.previous)
        if change.type == "MODIFIED" and now_matches != before_matched:
            event_type = "ADDED" if now_matches else "DELETED"
        elif now_matches or (change.type == "DELETED" and before_matched):
            event_type = change.type
        else:
            return
        self.queue.put_nowait({"type": event_type, "object": change.obj})


class ObjectStore:
    """Objects keyed by (resource, namespace, name) with a global, monotonically growing resourceVersion.

    ``history_limit`` plays etcd's compaction: a watch from a resourceVersion older than the retained
    history is refused with 410 Gone, so clients must re-list.
    """

    def __init__(self, history_limit: int = 1000):
        self.resource_version = 1
        self._objects: dict[str, dict[tuple[str, str], dict]] = {name: {} for name in RESOURCES}
        self._history: deque[Change] = deque(maxlen=history_limit)
        self._compacted_through = 0  # changes up to this resourceVersion are no longer retained
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Change], None]] = []
        self._admissions: dict[str, list[Callable[[dict], None]]] = {}

    # -- plumbing for the scheduler, kubelet and API handlers -------------------------------

    def add_listener(self, listener: Callable[[Change], None]) -> None:
        """Call ``listener`` synchronously after every change (controllers react to these)."""
        self._listeners.append(listener)

    def add_admission(self, resource: str, admit: Callable[[dict], None]) -> None:
        """Run ``admit(obj)`` before creating a ``resource``: it may set defaults or raise ApiError."""
        self._admissions.setdefault(resource, []).append(admit)

    def _record(self, change_type: str, resource: str, obj: dict, previous: dict | None) -> None:
        change = Change(self.resource_version, change_type, resource, copy.deepcopy(obj), previous)
        if len(self._history) == self._history.maxlen:
            self._compacted_through = self._history[0].resource_version
        self._history.append(change)
        for watcher in list(self._watchers):
            watcher.offer(change)
        for listener in self._listeners:
            listener(change)

    def _bump(self, obj: dict) -> None:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)

    @staticmethod
    def _check_resource(resource: str) -> None:
        if resource not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _key(self, resource: str, namespace: str | None, name: str) -> tuple[str, str]:
        return (namespace or "" if RESOURCES[resource][1] else "", name)

    def _require_namespace(self, resource: str, namespace: str | None) -> None:
        if RESOURCES[resource][1] and ("", namespace) not in self._objects["namespaces"]:
            raise ApiError.not_found("namespaces", namespace or "")

    # -- the REST verbs ------------------------------------------------------------------------

    def create(self, resource: str, namespace: str | None, body: dict) -> dict:
        self._check_resource(resource)
        kind, namespaced = RESOURCES[resource]
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = kind, "v1"
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        name = metadata.get("name") or ""
        if not _DNS_SUBDOMAIN.match(name):
            causes = [(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                      "consist of lower case alphanumeric characters, '-' or '.'")]
            raise ApiError.invalid(kind, name, causes)
        if namespaced:
            if metadata.get("namespace") not in (None, namespace):
                raise ApiError.bad_request("the namespace of the object does not match the request")
            metadata["namespace"] = namespace
            self._require_namespace(resource, namespace)
        else:
            metadata.pop("namespace", None)
        for admit in self._admissions.get(resource, []):
            admit(obj)
        key = self._key(resource, namespace, name)
        if key in self._objects[resource]:
            raise ApiError.already_exists(resource, name)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = utc_timestamp()
        metadata.setdefault("labels", {})
        self._bump(obj)
        self._objects[resource][key] = obj
        self._record("ADDED", resource, obj, None)
        return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str | None, name: str) -> dict:
        self._check_resource(resource)
        obj = self._objects[resource].get(self._key(resource, namespace, name))
        if obj is None:
            raise ApiError.not_found(resource, name)
        return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None, matches: Predicate) -> tuple[list[dict], int]:
        """Matching objects (``namespace=None``: all namespaces) and the resourceVersion of the list."""
        self._check_resource(resource)
        if namespace is not None:
            self._require_namespace(resource, namespace)
        items = [
            copy.deepcopy(obj)
            for (obj_namespace, _), obj in sorted(self._objects[resource].items())
            if (namespace is None or obj_namespace == namespace) and matches(obj)
        ]
        return items, self.resource_version

    def update(self, resource: str, namespace: str | None, name: str, mutate: Callable[[dict], None],
               expected_version: str | None = None, server_fields_fixed: bool = True) -> dict:
        """Apply ``mutate`` to a copy, store it under a new resourceVersion, emit MODIFIED."""
        current = self._objects[resource].get(self._key(resource, namespace, name)) if resource in RESOURCES else None
        if current is None:
            self._check_resource(resource)
            raise ApiError.not_found(resource, name)
        if expected_version and expected_version != current["metadata"]["resourceVersion"]:
            raise ApiError.conflict(resource, name)
        updated = copy.deepcopy(current)
        mutate(updated)
        # identity and bookkeeping fields are the server's, whatever the body said
        for field in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp"):
            if server_fields_fixed and field in current["metadata"]:
                updated["metadata"][field] = current["metadata"][field]
        if updated == current:
            return copy.deepcopy(current)
        self._bump(updated)
        self._objects[resource][self._key(resource, namespace, name)] = updated
        self._record("MODIFIED", resource, updated, copy.deepcopy(current))
        return copy.deepcopy(updated)

    def mark_deleting(self, resource: str, namespace: str | None, name: str, grace_seconds: int) -> dict:
        """Set deletionTimestamp (graceful delete); the kubelet removes the object once it is stopped."""

        def stamp(obj: dict) -> None:
            obj["metadata"]["deletionTimestamp"] = utc_timestamp()
            obj["metadata"]["deletionGracePeriodSeconds"] = grace_seconds

        current = self.get(resource, namespace, name)
        if "deletionTimestamp" in current["metadata"]:
            return current
        return self.update(resource, namespace, name, stamp, server_fields_fixed=False)

    def remove(self, resource: str, namespace: str | None, name: str) -> dict:
        """Delete the object now and emit DELETED with the final state."""
        self._check_resource(resource)
        obj = self._objects[resource].pop(self._key(resource, namespace, name), None)
        if obj is None:
            raise ApiError.not_found(resource, name)
        previous = copy.deepcopy(obj)
        self._bump(obj)
        self._record("DELETED", resource, obj, previous)
        return copy.deepcopy(obj)

    # -- watch --------------------------------------------------------------------------------

    def watch(self, resource: str, namespace: str | None, matches: Predicate,
              since: int | None) -> Watcher:
        """Open a watch. ``since=None`` (or 0) first replays the current objects as ADDED."""
        self._check_resource(resource)
        watcher = Watcher(resource, namespace, matches)
        if not since:
            items, _ = self.list(resource, namespace, matches)
            for item in items:
                watcher.queue.put_nowait({"type": "ADDED", "object": item})
        else:
            if since < self._compacted_through:
                raise ApiError.gone(since)
            for change in self._history:
                if change.resource_version > since:
                    watcher.offer(change)
        self._watchers.add(watcher)
        return watcher

    def close_watch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def objects(self, resource: str) -> list[dict]:
        """Copies of every object of one resource (for the controllers)."""
        return [copy.deepcopy(obj) for _, obj in sorted(self._objects[resource].items())]
