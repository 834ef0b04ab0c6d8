"""Tornado handlers speaking the core/v1 REST paths that kubernetes_asyncio (KubeSpawner 7) calls.

This is a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster: JSON only,
no protobuf, no server-side apply, no API groups beyond discovery stubs. For kubectl (``get``,
``describe``, ``get events``) it also serves legacy discovery (``/api``, ``/apis``, ``/api/v1``; kubectl
falls back to it from aggregated discovery, as with servers before 1.26) and Tables for ``get``
(see ``tables``), and a pod's log (``kubectl logs``; no ``follow``). ``/openapi/*`` is not served: none of
those commands needs it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import jsonpatch
from tornado import web
from tornado.iostream import StreamClosedError

from .admission import run_webhooks
from .errors import ApiError
from .selectors import make_filter
from .store import RESOURCES, SIMULATED_VERSION
from .tables import INCLUDE_OBJECT, requested_table_version, to_table

if TYPE_CHECKING:
    from .cluster import DevCluster

KUBERNETES_VERSION = {"major": "1", "minor": "31", "gitVersion": SIMULATED_VERSION, "gitCommit": "",
                      "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "gc",
                      "platform": "linux/amd64"}
# kubectl's abbreviations, as the real API server's discovery lists them
SHORT_NAMES = {"pods": ["po"], "events": ["ev"], "persistentvolumeclaims": ["pvc"], "services": ["svc"],
               "configmaps": ["cm"], "namespaces": ["ns"], "nodes": ["no"]}
DEFAULT_WATCH_SECONDS = 1800  # what a real API server caps an open-ended watch at (min-request-timeout)
_END_OF_WATCH = object()


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch (strategic merge patches are applied the same way here)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class KubeHandler(web.RequestHandler):
    """JSON in and out; failures are ``Status`` objects; a bearer token is required when configured."""

    def initialize(self, cluster: DevCluster) -> None:
        self.cluster = cluster

    def prepare(self) -> None:
        expected = self.cluster.token
        if expected and self.request.headers.get("Authorization", "") != f"Bearer {expected}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def write_json(self, body: dict, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def _handle_request_exception(self, error: BaseException) -> None:
        if isinstance(error, ApiError):
            if not self._finished:
                self.write_json(error.status(), error.code)
            return
        super()._handle_request_exception(error)

    def write_error(self, status_code: int, **kwargs) -> None:
        self.write_json(ApiError(status_code, "InternalError", self._reason).status(), status_code)

    def json_body(self) -> dict:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as error:
            raise ApiError.bad_request(f"the request body is not JSON: {error}") from error
        if not isinstance(body, (dict, list)):
            raise ApiError.bad_request("the request body must be a JSON object")
        return body

    def flag(self, name: str) -> bool:
        return self.get_query_argument(name, "false").lower() in ("true", "1")


class VersionHandler(KubeHandler):
    """``/version`` is public on real API servers too (system:public-info-viewer)."""

    def prepare(self) -> None:
        pass

    def get(self) -> None:
        self.write_json(KUBERNETES_VERSION)


class DiscoveryHandler(KubeHandler):
    """``/api``, ``/apis`` and ``/api/v1``: just enough discovery for kubectl."""

    def get(self, path: str) -> None:
        if path == "/api":
            self.write_json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.request.host}]})
        elif path == "/apis":
            self.write_json({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        else:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            resources = []
            for plural, (kind, namespaced) in RESOURCES.items():
                entry = {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                         "verbs": verbs}
                if plural in SHORT_NAMES:
                    entry["shortNames"] = SHORT_NAMES[plural]
                if plural in ("pods", "services"):
                    entry["categories"] = ["all"]  # what `kubectl get all` lists
                resources.append(entry)
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                              "verbs": ["get"]})
            self.write_json({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                             "resources": resources})


class ResourceHandler(KubeHandler):
    """Collections and objects, cluster-scoped (``/api/v1/{resource}[/{name}]``) or namespaced
    (``/api/v1/namespaces/{ns}/{resource}[/{name}]``); a namespaced resource listed without a namespace
    spans all namespaces."""

    def _scope(self, namespace: str | None, resource: str, name: str | None) -> tuple[str | None, str, str | None]:
        namespace = namespace or None  # cluster-scoped routes capture an empty namespace
        if resource not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespaced = RESOURCES[resource][1]
        if namespace is not None and not namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespace is None and namespaced and (name is not None or self.request.method != "GET"):
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {resource}")
        return namespace, resource, name

    @property
    def store(self):
        return self.cluster.store

    async def get(self, namespace: str | None, resource: str, name: str | None = None) -> None:
        namespace, resource, name = self._scope(namespace, resource, name)
        table_version = requested_table_version(self.request.headers.get("Accept"))
        if name is not None:
            obj = self.store.get(resource, namespace, name)
            if table_version:
                self.write_table(resource, [obj], obj["metadata"]["resourceVersion"], table_version)
            else:
                self.write_json(obj)
            return
        matches = make_filter(resource, self.get_query_argument("labelSelector", None),
                              self.get_query_argument("fieldSelector", None))
        if self.flag("watch"):
            await self._watch(resource, namespace, matches)
            return
        items, resource_version = self.store.list(resource, namespace, matches)
        if table_version:
            self.write_table(resource, items, resource_version, table_version)
            return
        self.write_json({"kind": f"{RESOURCES[resource][0]}List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(resource_version)}, "items": items})

    def write_table(self, resource: str, objects: list[dict], resource_version, version: str) -> None:
        """What ``kubectl get`` prints: a meta.k8s.io Table instead of the objects."""
        include_object = self.get_query_argument("includeObject", "Metadata")
        if include_object not in INCLUDE_OBJECT:
            raise ApiError.bad_request(f"includeObject must be one of {', '.join(INCLUDE_OBJECT)}")
        self.write_json(to_table(resource, objects, resource_version, datetime.now(timezone.utc),
                                 version=version, include_object=include_object))

    async def post(self, namespace: str | None, resource: str, name: str | None = None) -> None:
        namespace, resource, name = self._scope(namespace, resource, name)
        if name is not None:
            raise ApiError(405, "MethodNotAllowed", "POST is only allowed on collections")
        body = self.json_body()
        if resource == "pods" and self.cluster.admission_webhooks:
            body = await run_webhooks(self.cluster.admission_webhooks, resource, namespace, body)
        self.write_json(self.store.create(resource, namespace, body), 201)

    def put(self, namespace: str | None, resource: str, name: str | None = None) -> None:
        namespace, resource, name = self._scope(namespace, resource, name)
        body = self.json_body()

        def replace(obj: dict) -> None:
            status = obj.get("status")
            obj.clear()
            obj.update(body)
            if status is not None and "status" not in body:
                obj["status"] = status  # the main resource endpoint does not change status

        expected = (body.get("metadata") or {}).get("resourceVersion")
        self.write_json(self.store.update(resource, namespace, name, replace, expected_version=expected))

    def patch(self, namespace: str | None, resource: str, name: str | None = None) -> None:
        namespace, resource, name = self._scope(namespace, resource, name)
        content_type = self.request.headers.get("Content-Type", "").split(";")[0].strip()
        body = self.json_body()
        if content_type == "application/json-patch+json":
            def mutate(obj: dict) -> None:
                try:
                    patched = jsonpatch.apply_patch(obj, body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                    raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {error}") from error
                obj.clear()
                obj.update(patched)
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            def mutate(obj: dict) -> None:
                patched = merge_patch(obj, body)
                obj.clear()
                obj.update(patched)
        else:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format: "
                                                        "accepted media types include: application/json-patch+json, "
                                                        "application/merge-patch+json, "
                                                        "application/strategic-merge-patch+json")
        self.write_json(self.store.update(resource, namespace, name, mutate))

    def delete(self, namespace: str | None, resource: str, name: str | None = None) -> None:
        namespace, resource, name = self._scope(namespace, resource, name)
        if name is None:
            raise ApiError(405, "MethodNotAllowed", "deleting whole collections is not supported")
        options = json.loads(self.request.body) if self.request.body else {}
        grace = self.get_query_argument("gracePeriodSeconds", None)
        if grace is None:
            grace = options.get("gracePeriodSeconds")
        self.write_json(self.cluster.delete(resource, namespace, name, None if grace is None else int(grace),
                                            options.get("preconditions")))

    # -- watch --------------------------------------------------------------------------------

    async def _watch(self, resource: str, namespace: str | None, matches) -> None:
        """Stream JSON lines until ``timeoutSeconds``; a too-old resourceVersion gets an ERROR event
        carrying a 410 Status, as real API servers send it."""
        self.set_header("Content-Type", "application/json")
        raw_version = self.get_query_argument("resourceVersion", "") or "0"
        try:
            watcher = self.store.watch(resource, namespace, matches, int(raw_version))
        except ValueError as error:
            raise ApiError.bad_request(f"invalid resourceVersion {raw_version!r}") from error
        except ApiError as error:
            if error.code != 410:
                raise
            self.finish(json.dumps({"type": "ERROR", "object": error.status()}) + "\n")
            return
        self._watcher = watcher
        timeout = float(self.get_query_argument("timeoutSeconds", DEFAULT_WATCH_SECONDS))
        bookmarks = self.flag("allowWatchBookmarks")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await self.flush()  # headers out now, so clients see the watch is open
            while (remaining := deadline - loop.time()) > 0:
                try:
                    event = await asyncio.wait_for(watcher.queue.get(),
                                                   min(remaining, self.cluster.bookmark_seconds))
                except asyncio.TimeoutError:
                    if not bookmarks:
                        continue
                    event = {"type": "BOOKMARK", "object": {
                        "kind": RESOURCES[resource][0], "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(self.store.resource_version)}}}
                if event is _END_OF_WATCH:
                    return
                self.write(json.dumps(event) + "\n")
                await self.flush()
            self.finish()
        except StreamClosedError:
            pass
        finally:
            self.store.close_watch(watcher)

    def on_connection_close(self) -> None:
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            watcher.queue.put_nowait(_END_OF_WATCH)


class PodLogHandler(KubeHandler):
    """``GET /api/v1/namespaces/{ns}/pods/{name}/log``: what the container wrote, as plain text.

    ``container`` (the pod's only running container) and ``tailLines`` are honoured; ``follow`` is
    not (the answer is the log so far)."""

    def get(self, namespace: str, name: str) -> None:
        pod = self.cluster.store.get("pods", namespace, name)
        container = pod["spec"]["containers"][0]["name"]
        asked = self.get_query_argument("container", container)
        if asked != container:
            raise ApiError.bad_request(f"container {asked} is not valid for pod {name}")
        path = self.cluster.kubelet.log_path(pod)
        if not path.exists():
            raise ApiError.bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                       "ContainerCreating")
        text = path.read_bytes()
        tail = self.get_query_argument("tailLines", None)
        if tail is not None:
            try:
                lines = int(tail)
            except ValueError as error:
                raise ApiError.bad_request(f"tailLines must be a number, not {tail!r}") from error
            text = b"".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
        self.set_header("Content-Type", "text/plain")
        self.finish(text)


def make_app(cluster: DevCluster) -> web.Application:
    args = {"cluster": cluster}
    return web.Application([
        (r"/version/?", VersionHandler, args),
        (r"(/api|/apis|/api/v1)/?", DiscoveryHandler, args),
        (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log/?", PodLogHandler, args),
        (r"/api/v1/namespaces/([^/]+)/([^/]+)/([^/]+)/?", ResourceHandler, args),
        (r"/api/v1/namespaces/([^/]+)/([^/]+)/?", ResourceHandler, args),
        (r"/api/v1/()([^/]+)/([^/]+)/?", ResourceHandler, args),
        (r"/api/v1/()([^/]+)/?", ResourceHandler, args),
    ])
