"""Server-side printing (``tables``): pure builders checked by equality, then the negotiation over HTTP."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from devcluster_helpers import pod_manifest
from tornado.httpclient import AsyncHTTPClient

from jhub_gpubooking.devcluster import node_manifest
from jhub_gpubooking.devcluster.tables import human_duration, pod_status, requested_table_version, to_table

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TABLE_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
                "application/json")  # what kubectl get sends


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (200, "3m20s"), (600, "10m"),
    (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 300, "3h5m"), (8 * 3600 + 300, "8h"), (47 * 3600, "47h"),
    (48 * 3600, "2d"), (76 * 3600, "3d4h"), (8 * 86400, "8d"), (730 * 86400, "2y"), (740 * 86400, "2y10d"),
    (9 * 365 * 86400, "9y"),
])
def test_human_duration_matches_apimachinery(seconds, shown):
    assert human_duration(seconds) == shown


def pod(phase="Running", statuses=(), **metadata) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "creationTimestamp": stamp(30), **metadata},
            "spec": {"containers": [{"name": "c"}] * max(1, len(statuses))},
            "status": {"phase": phase, "containerStatuses": list(statuses)}}


RUNNING = {"ready": True, "restartCount": 0, "state": {"running": {"startedAt": stamp(20)}}}


@pytest.mark.parametrize(("obj", "expected"), [
    (pod("Pending"), ("Pending", 0, 0, None)),
    (pod(statuses=[RUNNING]), ("Running", 1, 0, None)),
    (pod(statuses=[{"ready": False, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": stamp(90)}}}]),
     ("CrashLoopBackOff", 0, 3, stamp(90))),
    (pod("Failed", [{"ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]),
     ("ExitCode:2", 0, 0, None)),
    (pod("Failed", [{"ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}]),
     ("Signal:9", 0, 0, None)),
    (pod("Succeeded", [{"ready": False, "restartCount": 0, "state": {"terminated": {"reason": "Completed"}}}]),
     ("Completed", 0, 0, None)),
    (pod(statuses=[RUNNING], deletionTimestamp=stamp(1)), ("Terminating", 1, 0, None)),
])
def test_pod_status_reads_like_kubectl(obj, expected):
    assert pod_status(obj) == expected


def test_pod_row_cells_and_restarts_age():
    crashing = pod(statuses=[{"ready": False, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                              "lastState": {"terminated": {"finishedAt": stamp(90)}}}])
    crashing["spec"]["nodeName"] = "gpu-1"
    crashing["status"]["podIP"] = "127.0.0.9"
    table = to_table("pods", [crashing], 42, NOW, include_object="None")
    assert table["rows"] == [{"cells": ["p", "0/1", "CrashLoopBackOff", "3 (90s ago)", "30s", "127.0.0.9", "gpu-1",
                                        "<none>", "<none>"]}]
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1),
        ("Nominated Node", 1), ("Readiness Gates", 1)]


def test_node_table_with_each_include_object():
    node = node_manifest("n1", {"node-role.kubernetes.io/gpu": ""}, {"cpu": "8"})
    node["metadata"]["creationTimestamp"] = stamp(7200)
    node["spec"]["unschedulable"] = True
    metadata_row = to_table("nodes", [node], "7", NOW)["rows"][0]
    assert metadata_row == {
        "cells": ["n1", "Ready,SchedulingDisabled", "gpu", "120m", "v1.31.0-devcluster", "127.0.0.1", "<none>",
                  "devcluster", "<unknown>", "devcluster://local-processes"],
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": node["metadata"]},
    }
    assert to_table("nodes", [node], "7", NOW, include_object="Object")["rows"][0]["object"] == node
    beta = to_table("nodes", [node], "7", NOW, version="v1beta1")
    assert (beta["apiVersion"], beta["rows"][0]["object"]["apiVersion"]) == ("meta.k8s.io/v1beta1",) * 2
    assert beta["metadata"] == {"resourceVersion": "7"}


def test_event_and_default_tables():
    event = {"metadata": {"name": "p.1", "namespace": "ns"}, "type": "Warning", "reason": "FailedScheduling",
             "message": " 0/1 nodes are available ", "involvedObject": {"kind": "Pod", "name": "p"},
             "source": {"component": "default-scheduler"}, "count": 2,
             "firstTimestamp": stamp(300), "lastTimestamp": stamp(60)}
    assert to_table("events", [event], 1, NOW, include_object="None")["rows"] == [{"cells": [
        "60s", "Warning", "FailedScheduling", "pod/p", "", "default-scheduler", "0/1 nodes are available", "5m", 2,
        "p.1"]}]
    secret = {"metadata": {"name": "s", "creationTimestamp": stamp(5)}}
    default = to_table("secrets", [secret], 1, NOW, include_object="None")
    assert [c["name"] for c in default["columnDefinitions"]] == ["Name", "Created At"]
    assert default["rows"] == [{"cells": ["s", stamp(5)]}]


@pytest.mark.parametrize(("accept", "version"), [
    (None, None), ("", None), ("application/json", None), ("*/*", None), (TABLE_ACCEPT, "v1"),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "v1beta1"),
    # an unsupported rendering is passed over for the next acceptable type
    ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
    ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json", None),
    ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io",
     "v1"),
])
def test_table_negotiation(accept, version):
    assert requested_table_version(accept) == version


async def test_api_answers_tables_only_when_asked(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("listed"))
    http = AsyncHTTPClient()

    async def get(path: str, accept: str | None, raise_error=True):
        headers = {"Authorization": f"Bearer {cluster.token}"}
        if accept:
            headers["Accept"] = accept
        response = await http.fetch(f"{cluster.url}{path}", headers=headers, ca_certs=str(cluster.ca_file),
                                    raise_error=raise_error)
        return response.code, json.loads(response.body)

    _, plain = await get("/api/v1/namespaces/default/pods", "application/json")
    assert plain["kind"] == "PodList"
    _, listed = await get("/api/v1/namespaces/default/pods", TABLE_ACCEPT)
    assert listed["kind"] == "Table" and [row["cells"][0] for row in listed["rows"]] == ["listed"]
    assert listed["rows"][0]["object"]["metadata"]["name"] == "listed"
    _, one = await get("/api/v1/namespaces/default/pods/listed?includeObject=Object", TABLE_ACCEPT)
    assert one["rows"][0]["object"]["kind"] == "Pod"
    code, refused = await get("/api/v1/pods?includeObject=Everything", TABLE_ACCEPT, raise_error=False)
    assert (code, refused["reason"]) == (400, "BadRequest")
    _, discovery = await get("/api/v1", None)
    by_name = {resource["name"]: resource for resource in discovery["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["categories"] == ["all"]
