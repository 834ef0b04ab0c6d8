"""One booking admits one pod: the webhook's claim decisions, the holder names, and the rule that
releases a pod's claim or removes the pod (pure; the I/O is tested against the devcluster)."""

from __future__ import annotations

from datetime import timedelta

import jsonpatch
import pytest
from admission_fixtures import BOOKING_END, NOW, booking, gpu_pod

from jhub_gpubooking.admission.claims import POD_CREATE_WINDOW, ClaimAction, PodFacts, decide_claim
from jhub_gpubooking.admission.review import (
    AdmissionSettings,
    describe_holder,
    holder_pod,
    pod_holder,
    review_pod,
)

QUARTER_HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240", "nvidia.com/gpucores": "25"}
GRACE = timedelta(seconds=60)


@pytest.fixture
def settings(pools) -> AdmissionSettings:
    return AdmissionSettings(pools=pools, namespace_owners={"alice-jobs": "alice"},
                             hub_service_accounts=["system:serviceaccount:jhub:hub"])


def review(pod, bookings, settings):
    return review_pod(pod, "alice-jobs", "alice", settings, list(bookings), NOW)


def test_an_admitted_pod_claims_its_booking_under_its_pod_holder_name(settings):
    verdict = review(gpu_pod(QUARTER_HAMI, name="train-0"), [booking()], settings)
    assert verdict.allowed
    assert (verdict.booking.id, verdict.claim) == (7, "pod:alice-jobs/train-0")


def test_a_second_pod_is_refused_while_the_first_holds_the_booking(settings):
    held = booking(server="pod:alice-jobs/train-0")
    verdict = review(gpu_pod(QUARTER_HAMI, name="train-1"), [held], settings)
    assert not verdict.allowed
    assert verdict.message == (
        "No active booking of user alice covers this pod's GPUs (nvidia.com/gpu: 1, "
        "nvidia.com/gpucores: 25, nvidia.com/gpumem: 10240): a booking of 0.25 GPU in pool "
        "a100-hami is in use by pod alice-jobs/train-0, and one booking admits one pod at a time."
    )


def test_the_holding_pod_is_admitted_again_on_reinvocation_and_validation(settings):
    held = booking(server="pod:alice-jobs/train-0")
    verdict = review(gpu_pod(QUARTER_HAMI, name="train-0"), [held], settings)
    assert verdict.allowed and verdict.claim == "pod:alice-jobs/train-0"


def test_a_free_booking_is_preferred_to_one_held_by_another_pod(settings):
    held = booking(booking_id=7, server="pod:alice-jobs/train-0")
    free = booking(booking_id=8, gpus=(0,))
    verdict = review(gpu_pod(QUARTER_HAMI, name="train-1"), [held, free], settings)
    assert (verdict.booking.id, verdict.claim) == (8, "pod:alice-jobs/train-1")


def test_a_generate_name_pod_is_named_by_the_webhook_so_its_claim_can_be_found(settings):
    pod = gpu_pod(QUARTER_HAMI, name="")
    pod["metadata"] = {"generateName": "job-"}
    verdict = review(pod, [booking()], settings)
    named = jsonpatch.apply_patch(pod, verdict.patch)["metadata"]["name"]
    assert named.startswith("job-") and len(named) == len("job-") + 5
    assert verdict.claim == f"pod:alice-jobs/{named}"
    # the validating webhook (and a re-invoked mutating one) see the name and the claim
    again = review(jsonpatch.apply_patch(pod, verdict.patch),
                   [booking(server=verdict.claim)], settings)
    assert again.allowed and again.claim == verdict.claim
    assert not any(op["path"] == "/metadata/name" for op in again.patch)


def test_holder_names_round_trip_and_hub_servers_are_not_pods():
    assert holder_pod(pod_holder("ns", "p")) == ("ns", "p")
    assert [holder_pod(h) for h in ("", "gpu-lab", None, "pod:", "pod:ns/")] == [None] * 5
    assert describe_holder("pod:ns/p") == "pod ns/p"
    assert describe_holder("gpu-lab") == "a notebook server"


@pytest.mark.parametrize(
    ("pod", "claimed_ago", "now", "action"),
    [
        (None, timedelta(seconds=10), NOW, None),  # the pod may still be on its way
        (None, POD_CREATE_WINDOW, NOW, ClaimAction.RELEASE),
        (PodFacts("Pending"), timedelta(hours=1), NOW, None),
        (PodFacts("Running"), timedelta(hours=1), NOW, None),
        (PodFacts("Succeeded"), timedelta(0), NOW, ClaimAction.RELEASE),
        (PodFacts("Failed"), timedelta(0), NOW, ClaimAction.RELEASE),
        (PodFacts("Running", deleting=True), timedelta(0), NOW, ClaimAction.RELEASE),
        (PodFacts("Running"), timedelta(hours=2), BOOKING_END + GRACE - timedelta(seconds=1),
         None),
        (PodFacts("Running"), timedelta(hours=2), BOOKING_END + GRACE, ClaimAction.DELETE_POD),
        (None, timedelta(hours=2), BOOKING_END + GRACE, ClaimAction.RELEASE),
    ],
)
def test_decide_claim(pod, claimed_ago, now, action):
    assert decide_claim(booking(), now - claimed_ago, pod, now, GRACE) is action


def test_a_claim_older_than_the_process_names_a_pod_stored_long_since():
    """A claim made before the service started (a restore's, from the backup) whose pod is
    missing is released at once: the create window is for admissions still on their way."""
    just = NOW - timedelta(seconds=10)
    assert decide_claim(booking(), just, None, NOW, GRACE, settled=True) is ClaimAction.RELEASE
    assert decide_claim(booking(), just, PodFacts("Running"), NOW, GRACE, settled=True) is None


def test_the_pod_of_a_cancelled_booking_is_deleted_at_once():
    cancelled = booking().with_changes(status="cancelled")
    claimed = NOW - timedelta(minutes=1)
    assert decide_claim(cancelled, claimed, PodFacts("Running"), NOW, GRACE) is \
        ClaimAction.DELETE_POD
    assert decide_claim(cancelled, claimed, PodFacts("Succeeded"), NOW, GRACE) is \
        ClaimAction.RELEASE
