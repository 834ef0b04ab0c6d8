"""Validating/mutating admission webhooks for pod creation (AdmissionReview v1), kept small.

Part of the devcluster, a *contract test of the Kubernetes API calls KubeSpawner makes*. Every
configured URL is called in order with failurePolicy Fail: an unreachable webhook refuses the pod.
"""

from __future__ import annotations

import base64
import json
import uuid

import jsonpatch
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from .errors import ApiError
from .store import RESOURCES


def admission_review(resource: str, namespace: str | None, obj: dict, operation: str = "CREATE") -> dict:
    """The AdmissionReview request the API server POSTs to a webhook."""
    kind = {"group": "", "version": "v1", "kind": RESOURCES[resource][0]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": {"group": "", "version": "v1", "resource": resource},
            "requestKind": kind,
            "requestResource": {"group": "", "version": "v1", "resource": resource},
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "devcluster-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def apply_review_response(url: str, request_uid: str, obj: dict, answer: dict) -> dict:
    """The object after one webhook's answer; a denial becomes the webhook's Status (403 by default)."""
    response = answer.get("response") or {}
    if response.get("uid") != request_uid:
        raise ApiError(500, "InternalError", f'failed calling webhook "{url}": response uid does not match')
    if not response.get("allowed"):
        status = response.get("status") or {}
        message = f'admission webhook "{url}" denied the request: {status.get("message", "")}'.rstrip(": ")
        raise ApiError(status.get("code", 403), status.get("reason", "Forbidden"), message)
    if response.get("patch"):
        if response.get("patchType") != "JSONPatch":
            raise ApiError(500, "InternalError", f'webhook "{url}" returned an unsupported patchType')
        patch = json.loads(base64.b64decode(response["patch"]))
        obj = jsonpatch.apply_patch(obj, patch)
    return obj


async def run_webhooks(urls: list[str], resource: str, namespace: str | None, obj: dict,
                       timeout: float = 10.0) -> dict:
    """Call each webhook in turn; return the (possibly patched) object or raise the refusal."""
    http = AsyncHTTPClient()
    for url in urls:
        review = admission_review(resource, namespace, obj)
        try:
            reply = await http.fetch(url, method="POST", body=json.dumps(review), request_timeout=timeout,
                                     headers={"Content-Type": "application/json"})
            answer = json.loads(reply.body)
        except (OSError, HTTPClientError, ValueError) as error:
            raise ApiError(500, "InternalError",
                           f'Internal error occurred: failed calling webhook "{url}": {error}') from error
        obj = apply_review_response(url, review["request"]["uid"], obj, answer)
    return obj
