"""Admission decisions on AdmissionReview-shaped pods: who owns a pod, which booking covers it,
and the pod after the webhook's JSONPatch is applied."""

from __future__ import annotations

import base64
import copy
import json
from fractions import Fraction

import jsonpatch
import pytest
from admission_fixtures import NOW, booking, gpu_pod

from jhub_gpubooking.admission.review import (
    AdmissionSettings,
    Owner,
    Verdict,
    parse_review,
    pod_owner,
    review_pod,
    review_response,
)

HUB_ACCOUNT = "system:serviceaccount:jhub:hub"
QUARTER_HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240", "nvidia.com/gpucores": "25"}


@pytest.fixture
def settings(pools) -> AdmissionSettings:
    return AdmissionSettings(
        pools=pools,
        namespace_owners={"alice-jobs": "alice", "ml-team": "group:ml"},
        hub_service_accounts=["system:serviceaccount:*:hub"],
        grace_seconds=60,
        booking_page_url="https://hub.example.org/services/gpu-booking/",
    )


def review(pod, namespace="alice-jobs", creator="alice@example.org", bookings=(), settings=None):
    return review_pod(pod, namespace, creator, settings, list(bookings), NOW)


def test_pods_without_gpus_pass_untouched(settings):
    assert review(gpu_pod({"cpu": "1"}), namespace="anywhere", settings=settings) == \
        Verdict(allowed=True)


def test_gpu_pod_in_a_namespace_without_owner_is_denied(settings):
    verdict = review(gpu_pod({"nvidia.com/gpu": "1"}), namespace="default", settings=settings)
    assert verdict == Verdict(
        allowed=False,
        message="This pod asks for GPUs (nvidia.com/gpu: 1) but namespace default has no GPU "
        "owner configured, so no booking can cover it; ask an administrator.",
    )


def test_gpu_pod_without_booking_is_denied_with_the_booking_page(settings):
    verdict = review(gpu_pod(QUARTER_HAMI), settings=settings)
    assert not verdict.allowed
    assert verdict.message == (
        "GPU pods need an active GPU booking and user alice has none now; book GPUs at "
        "https://hub.example.org/services/gpu-booking/ first."
    )


def test_malformed_request_is_denied_before_any_booking_is_looked_at(settings):
    pod = gpu_pod({"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "2"})
    verdict = review(pod, bookings=[booking()], settings=settings)
    assert verdict.message == ("Container main requests 2 but limits 1 of nvidia.com/gpu; GPU "
                               "requests must equal their limits.")


def test_covered_pod_is_pinned_to_its_booking_keeping_its_own_metadata(settings):
    pod = gpu_pod(QUARTER_HAMI, annotations={"team/cost-centre": "42", "a~b/c": "x"},
                  labels={"app": "train"}, nodeSelector={"disk": "ssd"})
    verdict = review(pod, bookings=[booking()], settings=settings)
    assert verdict.allowed and verdict.booking.id == 7
    expected = copy.deepcopy(pod)
    expected["metadata"]["annotations"].update({
        "nvidia.com/use-gpuuuid": "GPU-bbb",
        "gpubooking.jupyter.org/booking-id": "7",
        "gpubooking.jupyter.org/pool": "a100-hami",
        "gpubooking.jupyter.org/gpus": "0.25",
        "gpubooking.jupyter.org/end": "2030-05-06T12:00:00Z",
        "gpubooking.jupyter.org/gpu-indices": "1",
    })
    expected["metadata"]["labels"].update({"gpubooking.jupyter.org/booking-id": "7",
                                           "gpubooking.jupyter.org/pool": "a100-hami"})
    expected["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "gpu-1"
    # 10:05 until the 12:00 end plus 60 s grace
    expected["spec"]["activeDeadlineSeconds"] = 115 * 60 + 60
    assert jsonpatch.apply_patch(pod, verdict.patch) == expected


def test_patch_creates_maps_only_when_absent_and_keeps_a_stricter_deadline(settings):
    pod = gpu_pod({"nvidia.com/gpu": "1"}, activeDeadlineSeconds=600)
    verdict = review(pod, bookings=[booking(pool="l40s", amount=1, node="gpu-2", gpus=(3,))],
                     settings=settings)
    patched = jsonpatch.apply_patch(pod, verdict.patch)
    assert patched["metadata"]["annotations"] == {
        "gpubooking.jupyter.org/booking-id": "7",
        "gpubooking.jupyter.org/pool": "l40s",
        "gpubooking.jupyter.org/gpus": "1",
        "gpubooking.jupyter.org/end": "2030-05-06T12:00:00Z",
        "gpubooking.jupyter.org/gpu-indices": "3",
    }
    assert patched["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-2"}
    assert patched["spec"]["activeDeadlineSeconds"] == 600
    assert [op["op"] for op in verdict.patch] == ["add", "add", "add"]


def test_pod_asking_more_than_booked_is_denied_with_each_bookings_reason(settings):
    pod = gpu_pod({"nvidia.com/gpu": "2"})
    bookings = [booking(pool="l40s", amount=1, node="gpu-2", gpus=(0,), booking_id=3),
                booking(booking_id=4)]
    verdict = review(pod, bookings=bookings, settings=settings)
    assert verdict.message == (
        "No active booking of user alice covers this pod's GPUs (nvidia.com/gpu: 2): "
        "a booking of 1 GPU in pool l40s: the pod asks for 2 nvidia.com/gpu but the booking "
        "gives 1; a booking of 0.25 GPU in pool a100-hami: the pod must also ask for "
        "nvidia.com/gpucores, nvidia.com/gpumem, or its share is not limited."
    )


def test_a_booking_on_gpus_the_pool_no_longer_has_does_not_cover(settings):
    # a pod pinned there would wait for GPUs that are gone; ids and nodes stay in the service
    pod = gpu_pod({"nvidia.com/gpu": "1"})
    gone_node = booking(pool="l40s", amount=1, node="gpu-9", gpus=(0,), booking_id=3)
    gone_gpu = booking(pool="l40s", amount=1, node="gpu-2", gpus=(4,), booking_id=4)
    verdict = review(pod, bookings=[gone_node, gone_gpu], settings=settings)
    assert verdict == Verdict(allowed=False, message=(
        "No active booking of user alice covers this pod's GPUs (nvidia.com/gpu: 1): "
        "a booking of 1 GPU in pool l40s is on GPUs the pool no longer has (end or cancel it "
        "and book other GPUs); a booking of 1 GPU in pool l40s is on GPUs the pool no longer "
        "has (end or cancel it and book other GPUs)."
    ))
    usable = booking(pool="l40s", amount=1, node="gpu-2", gpus=(3,), booking_id=5)
    verdict = review(pod, bookings=[gone_node, usable], settings=settings)
    assert verdict.allowed and verdict.booking == usable


def test_gpu_manager_pod_gets_the_hard_core_limit(settings):
    pod = gpu_pod({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "64"})
    held = booking(pool="v100-vcuda", amount=Fraction(1, 2), node="gpu-3", gpus=(0,))
    verdict = review(pod, bookings=[held], settings=settings)
    patched = jsonpatch.apply_patch(pod, verdict.patch)
    assert patched["metadata"]["annotations"]["tencent.com/vcuda-core-limit"] == "50"


def test_hub_spawn_on_its_claimed_booking_passes_without_a_second_patch(settings):
    pod = gpu_pod(QUARTER_HAMI, annotations={
        "hub.jupyter.org/username": "bob@lab", "hub.jupyter.org/servername": "gpu",
        "gpubooking.jupyter.org/booking-id": "9"})
    held = booking(user="bob@lab", booking_id=9, server="gpu")
    verdict = review(pod, namespace="jhub", creator=HUB_ACCOUNT, bookings=[held],
                     settings=settings)
    assert verdict == Verdict(allowed=True, booking=held)


def test_username_annotation_is_only_trusted_from_the_hub(settings):
    pod = gpu_pod(QUARTER_HAMI, annotations={"hub.jupyter.org/username": "bob@lab"},
                  labels={"hub.jupyter.org/username": "bob-40lab"})
    assert pod_owner(pod, "alice-jobs", "mallory", settings) == Owner(user="alice")
    assert pod_owner(pod, "jhub", "mallory", settings) is None
    assert pod_owner(pod, "jhub", HUB_ACCOUNT, settings) == Owner(user="bob@lab", from_hub=True)
    del pod["metadata"]["annotations"]
    # without the annotation only the escaped label is left
    assert pod_owner(pod, "jhub", HUB_ACCOUNT, settings) == Owner(user="bob-40lab",
                                                                  from_hub=True)
    assert pod_owner(pod, "ml-team", "carol", settings) == Owner(group="ml")


def test_outside_pod_cannot_use_a_booking_held_by_a_notebook_server(settings):
    verdict = review(gpu_pod(QUARTER_HAMI), bookings=[booking(server="")], settings=settings)
    assert verdict.message == (
        "No active booking of user alice covers this pod's GPUs (nvidia.com/gpu: 1, "
        "nvidia.com/gpucores: 25, nvidia.com/gpumem: 10240): a booking of 0.25 GPU in pool "
        "a100-hami is in use by a notebook server, and one booking admits one pod at a time."
    )


def test_named_booking_must_be_one_of_the_owners_active_bookings(settings):
    pod = gpu_pod(QUARTER_HAMI, annotations={"gpubooking.jupyter.org/booking-id": "99"})
    verdict = review(pod, bookings=[booking()], settings=settings)
    assert verdict.message == "Booking 99 named by this pod is not an active booking of user alice."
    pod["metadata"]["annotations"]["gpubooking.jupyter.org/booking-id"] = "seven"
    verdict = review(pod, bookings=[booking()], settings=settings)
    assert verdict.message == ("The annotation gpubooking.jupyter.org/booking-id='seven' is not "
                               "a booking id.")


def test_group_namespace_uses_a_members_booking(settings):
    verdict = review(gpu_pod(QUARTER_HAMI), namespace="ml-team", creator="carol",
                     bookings=[booking(user="dave")], settings=settings)
    assert verdict.allowed and verdict.booking.user == "dave"


def test_ended_booking_does_not_cover(settings):
    ended = booking().with_changes(end=NOW)
    verdict = review(gpu_pod(QUARTER_HAMI), bookings=[ended], settings=settings)
    assert not verdict.allowed


def test_review_response_carries_a_base64_jsonpatch_or_a_403_status():
    patch = [{"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 5}]
    allowed = review_response("u1", Verdict(allowed=True, patch=patch), with_patch=True)
    assert allowed == {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": True, "patchType": "JSONPatch",
                     "patch": base64.b64encode(json.dumps(patch).encode()).decode()},
    }
    assert review_response("u1", Verdict(allowed=True, patch=patch), with_patch=False) == {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": True},
    }
    denied = review_response("u2", Verdict(allowed=False, message="No."), with_patch=True)
    assert denied["response"] == {"uid": "u2", "allowed": False,
                                  "status": {"code": 403, "reason": "Forbidden", "message": "No."}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "The body is not JSON"),
        (b'{"apiVersion": "v1", "kind": "Pod"}',
         "The body is not an admission.k8s.io/v1 AdmissionReview."),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
         "The AdmissionReview has no request with a uid."),
    ],
)
def test_parse_review_refuses_what_is_not_an_admission_review(body, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_review(body)


def test_only_configured_namespaces_are_gated(pools):
    settings = AdmissionSettings(pools=pools, namespaces=("alice-jobs",))
    assert review(gpu_pod({"nvidia.com/gpu": "1"}), namespace="ops", settings=settings) == \
        Verdict(allowed=True)
    assert not review(gpu_pod({"nvidia.com/gpu": "1"}), settings=settings).allowed
