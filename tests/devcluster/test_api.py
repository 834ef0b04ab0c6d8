"""The REST contract, exercised through kubernetes_asyncio (the client KubeSpawner uses)."""

from __future__ import annotations

import base64
import json

import pytest
from devcluster_helpers import pod_manifest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException
from tornado.httpclient import AsyncHTTPClient

from jhub_gpubooking.devcluster.selectors import make_filter


def status_of(error: ApiException) -> dict:
    return json.loads(error.body)


async def test_create_get_list_delete_secret(core):
    created = await core.create_namespaced_secret("default", {
        "metadata": {"generateName": "token-", "labels": {"app": "jupyterhub"}},
        "data": {"token": base64.b64encode(b"s3cret").decode()}})
    name = created.metadata.name
    assert name.startswith("token-") and len(name) > len("token-")
    assert created.metadata.uid and created.metadata.creation_timestamp
    fetched = await core.read_namespaced_secret(name, "default")
    assert base64.b64decode(fetched.data["token"]) == b"s3cret"
    assert fetched.metadata.resource_version == created.metadata.resource_version
    listed = await core.list_namespaced_secret("default", label_selector="app=jupyterhub")
    assert [item.metadata.name for item in listed.items] == [name]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    await core.delete_namespaced_secret(name, "default")
    with pytest.raises(ApiException) as raised:
        await core.read_namespaced_secret(name, "default")
    assert raised.value.status == 404
    assert status_of(raised.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'secrets "{name}" not found', "reason": "NotFound", "code": 404,
        "details": {"name": name, "kind": "secrets"}}


async def test_duplicate_name_is_409_already_exists(core):
    body = {"metadata": {"name": "home"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}}
    await core.create_namespaced_persistent_volume_claim("default", body)
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_persistent_volume_claim("default", body)
    assert raised.value.status == 409
    assert status_of(raised.value)["reason"] == "AlreadyExists"


async def test_invalid_name_is_422_and_missing_namespace_404(core):
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_service("default", {"metadata": {"name": "Not_A_Name"}})
    assert (raised.value.status, status_of(raised.value)["reason"]) == (422, "Invalid")
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_service("nowhere", {"metadata": {"name": "svc"}})
    assert status_of(raised.value)["message"] == 'namespaces "nowhere" not found'


async def test_namespaces_and_nodes_are_cluster_scoped(core):
    await core.create_namespace({"metadata": {"name": "jhub-alice"}})
    names = {ns.metadata.name for ns in (await core.list_namespace()).items}
    assert {"default", "kube-system", "jhub-alice"} <= names
    node = await core.read_node("gpu-a100")
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert node.status.allocatable["nvidia.com/gpu"] == "2"
    gpu_nodes = await core.list_node(label_selector="nvidia.com/gpu.count")
    assert [n.metadata.name for n in gpu_nodes.items] == ["gpu-a100"]


async def test_patch_and_replace(core):
    await core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    merged = await core.patch_namespaced_config_map("cfg", "default", {"data": {"b": "2"}})
    assert merged.data == {"a": "1", "b": "2"}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1234"}
    patched = await core.patch_namespaced_config_map(
        "cfg", "default", [{"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}],
        _content_type="application/json-patch+json")
    assert patched.metadata.owner_references[0].uid == "1234"
    patched.data = {"c": "3"}
    replaced = await core.replace_namespaced_config_map("cfg", "default", patched)
    assert replaced.data == {"c": "3"}
    patched.data = {"stale": "write"}
    with pytest.raises(ApiException) as raised:  # patched carries an outdated resourceVersion
        await core.replace_namespaced_config_map("cfg", "default", patched)
    assert (raised.value.status, status_of(raised.value)["reason"]) == (409, "Conflict")


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier=gpu", {"a"}),
    ("tier==gpu", {"a"}),
    ("tier!=gpu", {"b", "c"}),
    ("tier in (gpu,cpu)", {"a", "b"}),
    ("tier notin (gpu)", {"b", "c"}),
    ("tier", {"a", "b"}),
    ("!tier", {"c"}),
    ("tier in (gpu, cpu),owner=ada", {"a"}),
])
def test_label_selectors(selector, expected):
    objects = [
        {"metadata": {"name": "a", "labels": {"tier": "gpu", "owner": "ada"}}},
        {"metadata": {"name": "b", "labels": {"tier": "cpu", "owner": "bob"}}},
        {"metadata": {"name": "c", "labels": {}}},
    ]
    matches = make_filter("pods", selector, None)
    assert {obj["metadata"]["name"] for obj in objects if matches(obj)} == expected


async def test_field_selectors_on_pods_and_events(core):
    await core.create_namespaced_pod("default", pod_manifest("gpu-pod", nodeSelector={"no": "such-node"}))
    await core.create_namespaced_pod("default", pod_manifest("cpu-pod", nodeName="cpu-only"))
    by_name = await core.list_namespaced_pod("default", field_selector="metadata.name=gpu-pod")
    assert [p.metadata.name for p in by_name.items] == ["gpu-pod"]
    on_cpu_node = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=cpu-only")
    assert [p.metadata.name for p in on_cpu_node.items] == ["cpu-pod"]
    pending = await core.list_namespaced_pod("default", field_selector="status.phase=Pending,metadata.name!=cpu-pod")
    assert [p.metadata.name for p in pending.items] == ["gpu-pod"]
    events = await core.list_namespaced_event(
        "default", field_selector="involvedObject.kind=Pod,involvedObject.name=gpu-pod")
    assert events.items and {e.involved_object.name for e in events.items} == {"gpu-pod"}
    with pytest.raises(ApiException) as raised:
        await core.list_namespaced_pod("default", field_selector="spec.hostname=x")
    assert raised.value.status == 400


async def test_watch_from_resource_version_sees_only_later_changes(core):
    await core.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    start = (await core.list_namespaced_config_map("default")).metadata.resource_version
    await core.create_namespaced_config_map("default", {"metadata": {"name": "after", "labels": {"w": "1"}}})
    await core.patch_namespaced_config_map("after", "default", {"data": {"k": "v"}})
    await core.delete_namespaced_config_map("after", "default")
    seen = []
    async with watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=start,
                                    label_selector="w=1", timeout_seconds=1) as stream:
        async for event in stream:
            seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


async def test_watch_turns_selector_transitions_into_added_and_deleted(core):
    await core.create_namespaced_config_map("default", {"metadata": {"name": "flip", "labels": {"w": "no"}}})
    start = (await core.list_namespaced_config_map("default")).metadata.resource_version
    await core.patch_namespaced_config_map("flip", "default", {"metadata": {"labels": {"w": "yes"}}})
    await core.patch_namespaced_config_map("flip", "default", {"metadata": {"labels": {"w": "no"}}})
    async with watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=start,
                                    label_selector="w=yes", timeout_seconds=1) as stream:
        types = [event["type"] async for event in stream]
    assert types == ["ADDED", "DELETED"]


async def test_watch_from_compacted_version_is_410_gone(cluster, core):
    first = await core.create_namespaced_config_map("default", {"metadata": {"name": "old"}})
    for index in range(60):  # more changes than the fixture's watch_history=50 keeps
        await core.patch_namespaced_config_map("old", "default", {"data": {"n": str(index)}})
    stream = watch.Watch().stream(core.list_namespaced_config_map, "default",
                                  resource_version=first.metadata.resource_version, timeout_seconds=1)
    with pytest.raises(ApiException) as raised:
        async with stream:
            async for _ in stream:
                pass
    assert raised.value.status == 410
    assert "too old resource version" in raised.value.reason


async def test_watch_sends_bookmarks_when_asked(cluster):
    url = (f"{cluster.url}/api/v1/namespaces/default/pods"
           "?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=1")
    response = await AsyncHTTPClient().fetch(url, headers={"Authorization": f"Bearer {cluster.token}"},
                                             ca_certs=str(cluster.ca_file))
    lines = [json.loads(line) for line in response.body.splitlines()]
    assert lines and {line["type"] for line in lines} == {"BOOKMARK"}
    assert lines[-1]["object"]["metadata"]["resourceVersion"] == str(cluster.store.resource_version)


async def test_requests_without_the_token_are_401_except_version(cluster):
    response = await AsyncHTTPClient().fetch(f"{cluster.url}/api/v1/namespaces", raise_error=False,
                                             ca_certs=str(cluster.ca_file))
    assert response.code == 401
    assert json.loads(response.body)["reason"] == "Unauthorized"
    version = await AsyncHTTPClient().fetch(f"{cluster.url}/version", ca_certs=str(cluster.ca_file))
    assert json.loads(version.body)["major"] == "1"


async def test_discovery_endpoints(cluster, api_client):
    version = await client.VersionApi(api_client).get_code()
    assert version.major == "1" and version.git_version.startswith("v1.")
    resources = await client.CoreV1Api(api_client).get_api_resources()
    assert {"pods", "events", "nodes", "secrets"} <= {r.name for r in resources.resources}
    assert (await client.CoreApi(api_client).get_api_versions()).versions == ["v1"]
    assert (await client.ApisApi(api_client).get_api_versions()).groups == []


async def test_official_client_reads_back_pods_created_with_numeric_quantities(cluster, core):
    """KubeSpawner sends cpu/memory as JSON numbers; the API answers canonical strings, which the
    official (strict) ``kubernetes`` client needs to read the pod at all."""
    import asyncio

    import kubernetes

    manifest = pod_manifest("numbers", container={
        "resources": {"limits": {"cpu": 2.0, "memory": 4294967296}, "requests": {"cpu": 0.5}},
    })
    await core.create_namespaced_pod("default", manifest)
    configuration = kubernetes.client.Configuration(host=cluster.url)
    configuration.ssl_ca_cert = str(cluster.ca_file)
    configuration.api_key = {"authorization": "Bearer " + cluster.token}
    official = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    pod = await asyncio.to_thread(official.read_namespaced_pod, "numbers", "default")
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"cpu": "2", "memory": "4294967296"}
    assert resources.requests == {"cpu": "500m"}
