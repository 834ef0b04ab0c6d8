"""The webhook's HTTP side against a real store: claims on admission, the caller checks (client
certificate), the body limit, bounded review work and replies that reveal nothing but the
verdict, a sentence and the patch."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import datetime, timezone

import pytest
from certs import write_client_certificate, write_test_certificates
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from webhook_server_fixtures import RunningWebhook, gpu_pod, make_store, review_body

from jhub_gpubooking.admission import server as webhook_server
from jhub_gpubooking.admission.server import BUSY, MAX_REVIEW_BYTES
from jhub_gpubooking.core.model import Placement

START, END = (datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc),
              datetime(2030, 5, 6, 11, 0, tzinfo=timezone.utc))


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path)


@pytest.fixture
async def webhook(store):
    running = await RunningWebhook(store).start()
    yield running
    await running.stop()


async def post(url: str, body: bytes, **options) -> dict:
    reply = await AsyncHTTPClient().fetch(url, method="POST", body=body, **options)
    return json.loads(reply.body)["response"]


async def test_first_pod_claims_the_booking_and_a_second_is_refused(webhook, store):
    booking = store.create("alice", "a100", 1, START, END)
    first = await post(f"{webhook.url}/mutate", review_body(gpu_pod("train-0")))
    assert first["allowed"]
    assert store.get(booking.id).server == "pod:alice-jobs/train-0"
    assert [e.kind for e in store.history(booking.id)] == ["created", "claimed"]
    # the validating webhook and a re-invocation see the pod's own claim
    assert (await post(f"{webhook.url}/validate", review_body(gpu_pod("train-0"))))["allowed"]
    assert (await post(f"{webhook.url}/mutate", review_body(gpu_pod("train-0"))))["allowed"]
    second = await post(f"{webhook.url}/mutate", review_body(gpu_pod("train-1")))
    assert second == {
        "uid": second["uid"], "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": (
            "No active booking of user alice covers this pod's GPUs (nvidia.com/gpu: 1): a "
            "booking of 1 GPU in pool a100 is in use by pod alice-jobs/train-0, and one booking "
            "admits one pod at a time.")},
    }
    assert store.get(booking.id).server == "pod:alice-jobs/train-0"


async def test_eight_pods_at_once_get_one_admission_per_booking(webhook, store):
    booking = store.create("alice", "a100", 1, START, END)
    answers = await asyncio.gather(*(
        post(f"{webhook.url}/mutate", review_body(gpu_pod(f"train-{i}"))) for i in range(8)))
    admitted = [i for i, answer in enumerate(answers) if answer["allowed"]]
    assert len(admitted) == 1
    assert store.get(booking.id).server == f"pod:alice-jobs/train-{admitted[0]}"
    assert all("one booking admits one pod at a time" in answer["status"]["message"]
               for answer in answers if not answer["allowed"])


async def test_a_booking_moved_between_the_read_and_the_claim_is_pinned_where_it_went(
        webhook, store, monkeypatch):
    """A booking moved just before its start (to let another request in) is read by the
    review at its old GPUs; the claim sees the final placement, so the webhook gives the
    claim back and reviews again instead of pinning the pod to the old GPUs."""
    booking = store.create("alice", "a100", 1, START, END)
    fresh = store.active_for_users
    stale_reads = []

    def read_before_the_move(users):
        found = fresh(users)
        if not stale_reads:
            stale_reads.append(found)
            old = booking.placement
            return [b.with_changes(placement=Placement(old.node, (1 - old.gpus[0],), old.slices))
                    for b in found]
        return found

    monkeypatch.setattr(store, "active_for_users", read_before_the_move)
    answer = await post(f"{webhook.url}/mutate", review_body(gpu_pod("train-0")))
    assert answer["allowed"]
    assert stale_reads, "the first review read the stale placement"
    assert [e.kind for e in store.history(booking.id)] == ["created", "claimed", "released",
                                                            "claimed"]
    assert store.get(booking.id).server == "pod:alice-jobs/train-0"
    assert store.get(booking.id).placement == booking.placement


async def test_dry_run_and_validation_claim_nothing(webhook, store):
    booking = store.create("alice", "a100", 1, START, END)
    assert (await post(f"{webhook.url}/mutate", review_body(gpu_pod(), dryRun=True)))["allowed"]
    assert (await post(f"{webhook.url}/validate", review_body(gpu_pod())))["allowed"]
    assert store.get(booking.id).server is None


async def test_replies_reveal_no_booking_of_anyone(webhook, store):
    """A crafted review naming the Hub's account and a victim learns nothing about the victim's
    bookings from a refusal: no id, node or end."""
    victim = store.create("victim", "a100", 2, START, END)
    crafted = gpu_pod("steal", gpus="1", annotations={"hub.jupyter.org/username": "victim",
                                                      "hub.jupyter.org/servername": "x"})
    crafted["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    answer = await post(f"{webhook.url}/mutate",
                        review_body(crafted, creator="system:serviceaccount:jhub:hub"))
    assert not answer["allowed"]
    text = json.dumps(answer)
    for secret in (f"booking {victim.id}", f"#{victim.id}", "booking-id",
                   victim.placement.node, "2030-05-06T11", "11:00"):
        assert secret not in text
    assert set(answer) == {"uid", "allowed", "status"}


async def test_a_pod_refused_by_busy_slots_is_told_to_try_again(store, monkeypatch):
    monkeypatch.setattr(webhook_server, "REVIEW_QUEUE_SECONDS", 0.2)
    slots = asyncio.Semaphore(1)
    running = await RunningWebhook(store, slots=slots).start()
    try:
        store.create("alice", "a100", 1, START, END)
        await slots.acquire()  # every slot taken, as by a flood of reviews
        answer = await post(f"{running.url}/mutate", review_body(gpu_pod()))
        assert answer["status"]["message"] == BUSY
        # pods without GPUs need no slot
        cpu_pod = {"metadata": {"name": "cpu"}, "spec": {"containers": [{"name": "c"}]}}
        assert (await post(f"{running.url}/mutate", review_body(cpu_pod)))["allowed"]
        slots.release()
        assert (await post(f"{running.url}/mutate", review_body(gpu_pod())))["allowed"]
    finally:
        await running.stop()


async def test_a_body_over_the_api_servers_limit_is_not_read(webhook):
    pod = gpu_pod(annotations={"filler": "x" * MAX_REVIEW_BYTES})
    with pytest.raises((HTTPClientError, OSError)):
        await post(f"{webhook.url}/mutate", review_body(pod))
    # the server still answers
    assert (await post(f"{webhook.url}/mutate", review_body(gpu_pod())))["allowed"] is False


async def test_the_patch_reaches_the_caller_base64_encoded(webhook, store):
    store.create("alice", "a100", 1, START, END)
    answer = await post(f"{webhook.url}/mutate", review_body(gpu_pod()))
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 55 * 60 + 30} in patch


@pytest.fixture
def tls_files(tmp_path):
    ca, cert, key = write_test_certificates(tmp_path)
    api_ca, api_cert, api_key = write_client_certificate(tmp_path, "kube-apiserver")
    _, other_cert, other_key = write_client_certificate(tmp_path, "intruder")
    return {"ca": ca, "cert": cert, "key": key, "api_ca": api_ca, "api_cert": api_cert,
            "api_key": api_key, "other_cert": other_cert, "other_key": other_key}


async def test_client_certificates_keep_other_callers_out(store, tls_files):
    files = tls_files
    running = await RunningWebhook(store, certfile=str(files["cert"]), keyfile=str(files["key"]),
                                   client_ca_file=str(files["api_ca"])).start()
    try:
        body = review_body(gpu_pod())
        with pytest.raises((HTTPClientError, OSError)):  # no certificate: no TLS session
            await post(f"{running.url}/mutate", body, ca_certs=str(files["ca"]))
        with pytest.raises((HTTPClientError, OSError)):  # another CA's certificate
            await post(f"{running.url}/mutate", body, ca_certs=str(files["ca"]),
                       client_cert=str(files["other_cert"]), client_key=str(files["other_key"]))
        answer = await post(f"{running.url}/mutate", body, ca_certs=str(files["ca"]),
                            client_cert=str(files["api_cert"]), client_key=str(files["api_key"]))
        assert answer["allowed"] is False  # judged: alice has no booking
    finally:
        await running.stop()


async def test_client_names_narrow_the_accepted_certificates(store, tls_files):
    files = tls_files
    running = await RunningWebhook(store, certfile=str(files["cert"]), keyfile=str(files["key"]),
                                   client_ca_file=str(files["api_ca"]),
                                   client_names=("apiserver-webhook-client",)).start()
    try:
        with pytest.raises(HTTPClientError) as refused:
            await post(f"{running.url}/mutate", review_body(gpu_pod()), ca_certs=str(files["ca"]),
                       client_cert=str(files["api_cert"]), client_key=str(files["api_key"]))
        assert refused.value.code == 403
    finally:
        await running.stop()
