"""Fuzz of the admission endpoint: whatever arrives, the webhook answers a 400 or a well-formed
AdmissionReview (never a 500), its patch applies to the pod, and no reply names a booking's id,
node or end.

The webhook runs in its own thread and event loop; hypothesis drives a plain HTTP client."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from datetime import datetime, timezone

import httpx
import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_server_fixtures import RunningWebhook, make_store

from jhub_gpubooking.core.model import Pool

SECRET_NODE = "node-7f3c"
START, END = (datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc),
              datetime(2030, 5, 6, 11, 45, tzinfo=timezone.utc))
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    """The webhook over a store holding bookings of alice and of a victim."""
    store = make_store(tmp_path_factory.mktemp("fuzz"))
    store.pools = {"a100": Pool(name="a100", nodes={SECRET_NODE: 4}, backend="whole")}
    store.sync_pools()
    bookings = [store.create(user, "a100", 1, START, END) for user in ("alice", "victim")]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    def serve():
        asyncio.set_event_loop(loop)
        holder["webhook"] = loop.run_until_complete(RunningWebhook(store).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(10)
    running = holder["webhook"]
    with httpx.Client(base_url=running.url, timeout=10) as client:
        yield client, store, bookings
    asyncio.run_coroutine_threadsafe(running.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)
quantities = st.sampled_from(["1", "2", "0", "-1", "1.5", "500m", "1Gi", "x", "", "1e3"]) | \
    json_values
gpu_resources = st.dictionaries(
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "cpu",
                     "nvidia.com/gpumem-percentage", "tencent.com/vcuda-core", "amd.com/gpu"]),
    quantities, max_size=3)
containers = st.lists(st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=6) | json_values,
    "resources": st.fixed_dictionaries({}, optional={"limits": gpu_resources,
                                                     "requests": gpu_resources}) | json_values,
    "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(
        ["NVIDIA_VISIBLE_DEVICES", "OTHER"])}, optional={"value": st.text(max_size=12),
                                                          "valueFrom": json_values})) | json_values,
    "securityContext": st.fixed_dictionaries({}, optional={"privileged": json_values}),
    "volumeMounts": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["dev", "x"])})),
}), max_size=3) | json_values
pods = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "name": st.sampled_from(["p", "", "a" * 300]) | json_values,
        "generateName": st.text(max_size=6) | json_values,
        "annotations": st.dictionaries(st.sampled_from([
            "hub.jupyter.org/username", "hub.jupyter.org/servername",
            "gpubooking.jupyter.org/booking-id", "cdi.k8s.io/x", "other"]),
            st.sampled_from(["alice", "victim", "1", "2", "", "x"]) | json_values,
            max_size=3) | json_values,
        "labels": st.dictionaries(st.text(max_size=6), st.text(max_size=6)) | json_values,
    }) | json_values,
    "spec": st.fixed_dictionaries({}, optional={
        "containers": containers, "initContainers": containers,
        "ephemeralContainers": containers,
        "volumes": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["dev", "x"]),
                                                   "hostPath": st.fixed_dictionaries(
                                                       {"path": st.sampled_from(
                                                           ["/dev/nvidia0", "/tmp", "/"])})}))
        | json_values,
        "resourceClaims": json_values,
        "nodeSelector": st.dictionaries(st.text(max_size=6), st.text(max_size=6)) | json_values,
        "activeDeadlineSeconds": json_values,
    }) | json_values,
}) | json_values
requests = st.fixed_dictionaries(
    {"uid": st.text(min_size=1, max_size=8)},
    optional={
        "kind": st.just({"group": "", "version": "v1", "kind": "Pod"}) | json_values,
        "namespace": st.sampled_from(["alice-jobs", "default", ""]) | json_values,
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE"]) | json_values,
        "subResource": st.sampled_from(["ephemeralcontainers", ""]) | json_values,
        "userInfo": st.fixed_dictionaries({}, optional={"username": st.sampled_from(
            ["alice", "system:serviceaccount:jhub:hub"]) | json_values}) | json_values,
        "object": pods,
        "dryRun": json_values,
    },
)


def check_reply(reply: httpx.Response, request: dict | None, bookings) -> None:
    assert reply.status_code in (200, 400), reply.text
    text = reply.text
    for booking in bookings:
        for secret in (f"booking {booking.id}", SECRET_NODE, "2030-05-06T11", "11:45"):
            # a patch may pin the pod to its own booking; refusals name none
            if not (reply.status_code == 200 and reply.json()["response"]["allowed"]):
                assert secret not in text
    if reply.status_code == 400:
        return
    response = reply.json()["response"]
    assert response["uid"] == request["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert set(response) == {"uid", "allowed", "status"}
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]
    elif "patch" in response:
        patch = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.apply_patch(request["object"], patch)


@FUZZ
@given(body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_body_gets_a_400_or_a_review(webhook, body):
    client, _store, bookings = webhook
    for path in ("/mutate", "/validate"):
        check_reply(client.post(path, content=body), None, bookings)


@FUZZ
@given(request=requests)
def test_any_review_gets_a_well_formed_answer(webhook, request):
    client, store, bookings = webhook
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    for path in ("/mutate", "/validate"):
        check_reply(client.post(path, json=body), request, bookings)
    # whatever was admitted, a booking has one holder at most and the store stays readable
    for booking in bookings:
        holder = store.get(booking.id).server
        assert holder is None or holder.startswith("pod:")
        if holder is not None:
            store.release(booking.id, holder)
