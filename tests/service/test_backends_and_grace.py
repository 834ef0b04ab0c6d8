"""Issue 12 part 4: the service owns the GPU translation settings its webhook needs (custom
backends included), checks every pool at start in one line, and has one grace."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import timedelta
from fractions import Fraction

import pytest
from test_service_components import NOW, make_service
from traitlets.config import Config

from jhub_gpubooking.admission.review import review_pod
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Booking, Placement
from jhub_gpubooking.gpu import BACKENDS, GpuRequest
from jhub_gpubooking.service.app import GPUBookingService

LAB_POOL = {"name": "lab", "nodes": {"node-l": 2}, "backend": "lab-vgpu", "slices_per_gpu": 2}


def lab_vgpu(pool, amount, placement) -> GpuRequest:
    """A lab's own backend: a whole device, the booked share told to the lab's runtime."""
    return GpuRequest(resources={"nvidia.com/gpu": 1},
                      annotations={"lab.example/gpu-share": str(amount)})


def broken_backend(pool, amount, placement) -> GpuRequest:
    raise KeyError("vgpu_profile")


def gpu_pod(resources: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
            "spec": {"containers": [{"name": "main", "image": "python:3.12",
                                     "resources": {"limits": resources}}]}}


@pytest.fixture
def lab_service(tmp_path):
    service = make_service(
        tmp_path,
        Config({"AdmissionWebhook": {"namespace_owners": {"ada-jobs": "ada"}}}),
        pools=[LAB_POOL], gpu_backends={"lab-vgpu": lab_vgpu},
    )
    yield service
    service.executor.shutdown(wait=True)


def test_the_webhook_translates_a_pool_with_the_services_custom_backend(lab_service):
    booking = Booking("ada", "lab", Fraction(1, 2), NOW - timedelta(minutes=5),
                      NOW + timedelta(hours=1), placement=Placement("node-l", (0,), 1), id=3)
    settings = lab_service.webhook.admission_settings()
    verdict = review_pod(gpu_pod({"nvidia.com/gpu": "1"}), "ada-jobs", "ada@example.org",
                         settings, [booking], NOW)
    assert verdict.allowed, verdict.message
    assert verdict.booking == booking
    [annotations] = [op["value"] for op in verdict.patch
                     if op["path"] == "/metadata/annotations"]
    assert annotations["lab.example/gpu-share"] == "1/2"


def run_service(tmp_path, config_text: str) -> subprocess.CompletedProcess:
    (tmp_path / "config.py").write_text(config_text)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB_")}
    return subprocess.run(
        [sys.executable, "-m", "jhub_gpubooking.service", "--config", str(tmp_path / "config.py"),
         "--upgrade-db", "--db-url", f"sqlite:///{tmp_path / 'db.sqlite'}",
         "--url", "http://127.0.0.1:1/"],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60, check=False,
    )


def test_a_pool_with_an_unknown_backend_stops_the_service_at_start_in_one_line(tmp_path):
    result = run_service(tmp_path, f"c.GPUBookingService.pools = [{LAB_POOL!r}]\n")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if "Configuration error" in line]
    assert line.endswith(
        "Configuration error: Pool lab uses GPU backend 'lab-vgpu', which is not known "
        f"(known: {', '.join(sorted(BACKENDS))})."
    )
    assert "Traceback" not in result.stderr


def test_a_backend_that_fails_on_a_pool_is_named_with_the_pool(tmp_path):
    with pytest.raises(ValueError) as refused:
        make_service(tmp_path, Config(), pools=[LAB_POOL],
                     gpu_backends={"lab-vgpu": broken_backend})
    assert str(refused.value) == "Pool lab (GPU backend 'lab-vgpu'): 'vgpu_profile'"


def test_an_unimportable_backend_is_refused_at_start(tmp_path):
    with pytest.raises(ValueError, match="GPU backend 'lab-vgpu': cannot import 'no_such_mod:f'"):
        make_service(tmp_path, Config(), pools=[LAB_POOL],
                     gpu_backends={"lab-vgpu": "no_such_mod:f"})


def test_one_grace_reaches_the_servers_the_pod_deadlines_and_the_pod_claims(tmp_path):
    service = make_service(tmp_path, Config({
        "Lifecycle": {"end_grace_seconds": 90},
        "AdmissionWebhook": {"webhook_port": 1},  # on (never started here): its claims exist
    }))
    try:
        assert service.lifecycle.rules.end_grace == timedelta(seconds=90)
        assert service.webhook.admission_settings().grace_seconds == 90
        assert service.webhook.pod_claims.grace == timedelta(seconds=90)
    finally:
        service.executor.shutdown(wait=True)


@pytest.mark.parametrize("section", ["GPUBookingService", "AdmissionWebhook"])
def test_the_old_webhook_grace_sets_the_one_grace_and_warns(tmp_path, caplog, section):
    config = Config({section: {"webhook_deadline_grace_seconds": 30}})
    with caplog.at_level(logging.WARNING):
        service = make_service(tmp_path, config, log=logging.getLogger(f"grace-{section}"))
    try:
        assert service.lifecycle.end_grace_seconds == 30
        assert service.webhook.admission_settings().grace_seconds == 30
    finally:
        service.executor.shutdown(wait=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"c.{section}.webhook_deadline_grace_seconds is deprecated: set "
        "c.Lifecycle.end_grace_seconds instead"
    ]


def test_when_both_graces_are_set_the_new_one_wins_and_the_log_says_so(tmp_path, caplog):
    config = Config({"GPUBookingService": {"webhook_deadline_grace_seconds": 300},
                     "Lifecycle": {"end_grace_seconds": 60}})
    with caplog.at_level(logging.WARNING):
        service = GPUBookingService(config=config, clock=ManualClock(NOW),
                                    log=logging.getLogger("grace-both"))
    assert service.config.Lifecycle.end_grace_seconds == 60
    assert [r.getMessage() for r in caplog.records] == [
        "c.GPUBookingService.webhook_deadline_grace_seconds is deprecated and ignored here: "
        "c.Lifecycle.end_grace_seconds is set too and wins"
    ]
