"""GPU utilisation of held bookings from a tiny in-process fake Prometheus (canned vectors)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.lifecycle_api import holders_json
from jhub_gpubooking.service.monitoring import (
    booking_utilisation,
    samples_by_gpu,
    utilisation_query,
)

NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)
AT_TEN, AT_ELEVEN = NOW.replace(minute=0), NOW.replace(hour=11, minute=0)


def vector(*series: tuple[dict, str]) -> dict:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": labels, "value": [1893924300, value]} for labels, value in series
            ],
        },
    }


def dcgm(node: str, gpu: int, value: str) -> tuple[dict, str]:
    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": node, "gpu": str(gpu)}
    return labels, value


#: Canned answers by PromQL: node-a GPU 0 busy, GPU 1 idle; node-b absent.
CANNED = {
    "avg_over_time(DCGM_FI_DEV_GPU_UTIL[15m])": vector(
        dcgm("node-a", 0, "71.25"), dcgm("node-a", 1, "0.4")
    ),
    "max_over_time(DCGM_FI_DEV_GPU_UTIL[15m])": vector(
        dcgm("node-a", 0, "99"), dcgm("node-a", 1, "2")
    ),
}


class FakePrometheusQuery(web.RequestHandler):
    async def get(self) -> None:
        query = self.get_argument("query")
        self.application.settings["queries"].append(query)
        mode = self.application.settings["mode"]
        if mode == "slow":
            await asyncio.sleep(5)
        if mode == "error":
            self.set_status(400)
            self.finish({"status": "error", "errorType": "bad_data", "error": "parse error"})
            return
        self.finish(CANNED.get(query, vector()))


@pytest.fixture
async def prometheus():
    settings = {"queries": [], "mode": "ok"}
    app = web.Application([(r"/prom/api/v1/query", FakePrometheusQuery)], **settings)
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app)
    server.add_sockets(sockets)
    port = sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/prom/", app.settings
    server.stop()
    await server.close_all_connections()


def make_service(tmp_path, prometheus_url: str) -> GPUBookingService:
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}",
        upgrade_db=True,
        pools=[{"name": "a100", "nodes": {"node-a": 2, "node-b": 1}}],
        clock=ManualClock(NOW),
        api_token="service-token",
        config=Config(
            GPUMonitoring={"prometheus_url": prometheus_url, "prometheus_timeout_seconds": 0.5}
        ),
    )
    service.setup()
    return service


async def holders_with_utilisation(service) -> tuple[list[dict], str]:
    store = service.store
    for user in ("ada", "bob", "carol"):
        booking = store.create(user, "a100", 1, AT_TEN, AT_ELEVEN)
        store.claim(booking.id, "")
    holders = holders_json(store.list(), {}, NOW)
    state = await service.monitoring.add_gpu_utilisation(holders)
    return holders, state


def by_place(holders: list[dict]) -> dict:
    return {
        (h["node"], tuple(h["gpu_indices"])): (h["gpu_utilisation"], h["idle"]) for h in holders
    }


async def test_each_held_booking_gets_its_gpus_utilisation_and_idle_flag(tmp_path, prometheus):
    url, fake = prometheus
    service = make_service(tmp_path, url)
    holders, state = await holders_with_utilisation(service)
    assert state == "ok"
    assert by_place(holders) == {
        ("node-a", (0,)): (71.2, False),
        ("node-a", (1,)): (0.4, True),
        ("node-b", (0,)): (None, None),  # the exporter has no series for node-b
    }
    assert sorted(fake["queries"]) == sorted(CANNED)
    service.executor.shutdown(wait=True)


@pytest.mark.parametrize("mode", ["error", "slow"])
async def test_a_failing_or_slow_prometheus_leaves_utilisation_unknown(tmp_path, prometheus, mode):
    url, fake = prometheus
    fake["mode"] = mode
    service = make_service(tmp_path, url)
    holders, state = await holders_with_utilisation(service)
    assert state == "unavailable"
    assert set(by_place(holders).values()) == {(None, None)}
    service.executor.shutdown(wait=True)


async def test_an_unreachable_prometheus_leaves_utilisation_unknown(tmp_path):
    sockets = bind_sockets(0, "127.0.0.1")  # a port nobody answers on once closed
    port = sockets[0].getsockname()[1]
    sockets[0].close()
    service = make_service(tmp_path, f"http://127.0.0.1:{port}")
    holders, state = await holders_with_utilisation(service)
    assert state == "unavailable"
    assert set(by_place(holders).values()) == {(None, None)}
    service.executor.shutdown(wait=True)


async def test_without_a_prometheus_url_monitoring_is_off(tmp_path):
    service = make_service(tmp_path, "")
    holders, state = await holders_with_utilisation(service)
    assert state == "off"
    assert set(by_place(holders).values()) == {(None, None)}
    service.executor.shutdown(wait=True)


def test_query_and_sample_parsing():
    assert utilisation_query("DCGM_FI_DEV_GPU_UTIL", 10, "avg") == (
        "avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m])"
    )
    answer = vector(
        ({"node": "n1", "gpu": "3"}, "12.5"),
        ({"node": "n1"}, "50"),  # no gpu label: skipped
        ({"node": "n2", "gpu": "0"}, "NaN-ish"),  # not a number: skipped
    )
    assert samples_by_gpu(answer, "node", "gpu") == {("n1", 3): 12.5}
    with pytest.raises(ValueError):
        samples_by_gpu({"status": "error"}, "node", "gpu")


def test_a_booking_on_several_gpus_is_idle_only_if_all_of_them_are():
    holder = {"node": "n1", "gpu_indices": [0, 1]}
    averages = {("n1", 0): 1.0, ("n1", 1): 3.0}
    assert booking_utilisation(holder, averages, {("n1", 0): 2.0, ("n1", 1): 4.0}, 5.0) == {
        "gpu_utilisation": 2.0,
        "idle": True,
    }
    assert booking_utilisation(holder, averages, {("n1", 0): 2.0, ("n1", 1): 40.0}, 5.0) == {
        "gpu_utilisation": 2.0,
        "idle": False,
    }
    assert booking_utilisation(holder, {("n1", 0): 1.0}, {("n1", 0): 1.0}, 5.0) == {
        "gpu_utilisation": None,
        "idle": None,
    }
