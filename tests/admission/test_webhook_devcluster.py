"""The webhook over TLS, called by the simulated Kubernetes API on pod create, as a real API
server calls it: a kubectl-like create of a GPU pod is denied or pinned to its booking."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest
from admission_fixtures import running_gpu_pod
from certs import write_test_certificates
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from tornado.httpclient import AsyncHTTPClient

from jhub_gpubooking.admission.review import AdmissionSettings
from jhub_gpubooking.admission.server import start_webhook_server, webhook_app
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore
from jhub_gpubooking.devcluster import DevCluster, gpu_node

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
POOL = Pool(name="a100", nodes={"gpu-a100": 2}, backend="whole")


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'bookings.sqlite'}"
    upgrade(url)
    booking_store = BookingStore(make_session_factory(make_engine(url)), {"a100": POOL},
                                 clock=ManualClock(NOW))
    booking_store.sync_pools()
    return booking_store


@pytest.fixture
def trusted_ca(tmp_path):
    """The API server trusts the webhook's CA (caBundle): here, tornado's client defaults."""
    ca, cert, key = write_test_certificates(tmp_path)
    saved = AsyncHTTPClient._save_configuration()
    AsyncHTTPClient.configure(None, defaults={"ca_certs": str(ca)})
    yield cert, key
    AsyncHTTPClient._restore_configuration(saved)


@pytest.fixture
async def webhook(store, trusted_ca):
    cert, key = trusted_ca
    settings = AdmissionSettings(pools=store.pools, namespace_owners={"alice-jobs": "alice"},
                                 grace_seconds=30)

    async def no_groups(group: str) -> set[str]:
        return set()

    executor = ThreadPoolExecutor(1)
    app = webhook_app(store=store, executor=executor, clock=store.clock,
                      admission_settings=lambda: settings, group_members=no_groups)
    server, port, _certificate = start_webhook_server(app, 0, "127.0.0.1", str(cert), str(key))
    yield f"https://127.0.0.1:{port}"
    server.stop()
    await server.close_all_connections()
    executor.shutdown()


@pytest.fixture
async def core(tmp_path, webhook):
    nodes = [gpu_node("gpu-a100", count=2)]
    async with DevCluster(tmp_path / "cluster", nodes, namespaces=("default", "alice-jobs"),
                          admission_webhooks=[f"{webhook}/mutate", f"{webhook}/validate"],
                          max_grace_seconds=1) as cluster, client.ApiClient(cluster.client_configuration()) as api:
        yield client.CoreV1Api(api)


def vision_pod() -> dict:
    return running_gpu_pod("train", annotations={"team": "vision"})


async def test_gpu_pod_without_booking_is_denied_with_a_clear_reason(core, webhook):
    with pytest.raises(ApiException) as refusal:
        await core.create_namespaced_pod("alice-jobs", vision_pod())
    assert refusal.value.status == 403
    status = json.loads(refusal.value.body)
    assert status["kind"] == "Status"
    assert status["message"] == (
        f'admission webhook "{webhook}/mutate" denied the request: GPU pods need an active GPU '
        "booking and user alice has none now; book GPUs first."
    )


async def test_malformed_request_is_denied_with_the_rule(core):
    pod = vision_pod()
    pod["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "2"}
    with pytest.raises(ApiException) as refusal:
        await core.create_namespaced_pod("alice-jobs", pod)
    assert refusal.value.status == 403
    assert json.loads(refusal.value.body)["message"].endswith(
        "Container main requests 2 but limits 1 of nvidia.com/gpu; GPU requests must equal "
        "their limits.")


async def test_booked_gpu_pod_is_created_pinned_to_its_booking(core, store):
    held = store.create("alice", "a100", 1, datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc),
                        datetime(2030, 5, 6, 11, 0, tzinfo=timezone.utc))
    created = await core.create_namespaced_pod("alice-jobs", vision_pod())
    assert created.metadata.annotations == {
        "team": "vision",
        "gpubooking.jupyter.org/booking-id": str(held.id),
        "gpubooking.jupyter.org/pool": "a100",
        "gpubooking.jupyter.org/gpus": "1",
        "gpubooking.jupyter.org/end": "2030-05-06T11:00:00Z",
        "gpubooking.jupyter.org/gpu-indices": "0",
    }
    assert created.spec.node_selector == {"kubernetes.io/hostname": held.placement.node}
    assert created.spec.active_deadline_seconds == 55 * 60 + 30


async def test_pods_without_gpus_are_not_gated(core):
    pod = vision_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    created = await core.create_namespaced_pod("default", pod)
    assert created.metadata.annotations == {"team": "vision"}
