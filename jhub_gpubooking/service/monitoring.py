"""GPU utilisation of held bookings, from DCGM exporter metrics in Prometheus.

:class:`GPUMonitoring` is a component of the service (``c.GPUMonitoring``). The admin holders
API asks it to add each active booking's utilisation over a window and an idle flag. Prometheus is optional
and may be down: then every value is ``None`` (the page shows "unknown"), never an error.
"""

from __future__ import annotations

import asyncio
import json
from statistics import mean

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httputil import url_concat
from traitlets import Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

#: ``monitoring`` values of the holders API.
MONITORING_OFF = "off"
MONITORING_OK = "ok"
MONITORING_UNAVAILABLE = "unavailable"

GpuKey = tuple[str, int]

#: What a failed, slow or malformed Prometheus answer raises.
UNREACHABLE = (OSError, HTTPClientError, ValueError, LookupError, TypeError, AttributeError)


def utilisation_query(metric: str, window_minutes: int, aggregate: str) -> str:
    """PromQL of one value per GPU over the window, e.g. ``avg_over_time(M[15m])``."""
    return f"{aggregate}_over_time({metric}[{window_minutes}m])"


def samples_by_gpu(answer: dict, node_label: str, gpu_label: str) -> dict[GpuKey, float]:
    """``(node, gpu index) -> value`` from a Prometheus instant-vector answer.

    Series without both labels, or with a non-numeric value, are skipped.
    """
    if answer.get("status") != "success" or answer["data"]["resultType"] != "vector":
        raise ValueError(f"not an instant vector: {json.dumps(answer)[:200]}")
    samples = {}
    for series in answer["data"]["result"]:
        labels = series.get("metric", {})
        try:
            key = (labels[node_label], int(labels[gpu_label]))
            samples[key] = float(series["value"][1])
        except (KeyError, ValueError, IndexError, TypeError):
            continue
    return samples


def booking_utilisation(
    holder: dict, averages: dict[GpuKey, float], peaks: dict[GpuKey, float], idle_below: float
) -> dict:
    """A holder's mean utilisation (percent) over its GPUs and whether it stayed idle.

    Unknown (None) unless every GPU of the booking has a value. A fractional booking shares its
    GPU, so its value is the whole GPU's.
    """
    keys = [(holder["node"], index) for index in holder["gpu_indices"]]
    if not keys or any(key not in averages or key not in peaks for key in keys):
        return {"gpu_utilisation": None, "idle": None}
    return {
        "gpu_utilisation": round(mean(averages[key] for key in keys), 1),
        "idle": max(peaks[key] for key in keys) < idle_below,
    }


class GPUMonitoring(LoggingConfigurable):
    """Options and the Prometheus queries of GPU-utilisation monitoring (off by default)."""

    prometheus_url = Unicode(
        "",
        help="Base URL of a Prometheus that scrapes the DCGM exporter (e.g. "
        "http://prometheus-server.monitoring/); its /api/v1/query is asked for each GPU's "
        "utilisation. Empty turns monitoring off.",
    ).tag(config=True)
    prometheus_timeout_seconds = Float(
        3.0,
        help="Seconds a Prometheus query may take; slower or failed answers show "
        "utilisation as unknown.",
    ).tag(config=True)
    prometheus_utilisation_metric = Unicode(
        "DCGM_FI_DEV_GPU_UTIL", help="Metric holding each GPU's utilisation in percent."
    ).tag(config=True)
    prometheus_node_label = Unicode(
        "Hostname",
        help="Label of the utilisation metric naming the Kubernetes node (the DCGM exporter's "
        "'Hostname'; some setups relabel it to 'node' or 'kubernetes_node').",
    ).tag(config=True)
    prometheus_gpu_label = Unicode(
        "gpu", help="Label of the utilisation metric holding the GPU's index on its node."
    ).tag(config=True)
    utilisation_window_minutes = Integer(
        15, help="Minutes over which utilisation is averaged and idleness is judged."
    ).tag(config=True)
    idle_utilisation_percent = Float(
        5.0,
        help="A held booking whose GPUs stayed below this utilisation (percent) for the whole "
        "window is flagged idle on the admin page.",
    ).tag(config=True)

    async def query_prometheus(self, query: str) -> dict[GpuKey, float]:
        url = url_concat(self.prometheus_url.rstrip("/") + "/api/v1/query", {"query": query})
        response = await AsyncHTTPClient().fetch(
            url,
            connect_timeout=self.prometheus_timeout_seconds,
            request_timeout=self.prometheus_timeout_seconds,
        )
        return samples_by_gpu(
            json.loads(response.body), self.prometheus_node_label, self.prometheus_gpu_label
        )

    async def add_gpu_utilisation(self, holders: list[dict]) -> str:
        """Add ``gpu_utilisation`` and ``idle`` to each holder; returns the monitoring state."""
        averages: dict[GpuKey, float] = {}
        peaks: dict[GpuKey, float] = {}
        state = MONITORING_OFF
        if self.prometheus_url:
            metric, window = self.prometheus_utilisation_metric, self.utilisation_window_minutes
            try:
                averages, peaks = await asyncio.gather(
                    self.query_prometheus(utilisation_query(metric, window, "avg")),
                    self.query_prometheus(utilisation_query(metric, window, "max")),
                )
                state = MONITORING_OK
            except UNREACHABLE as error:
                # answers of another shape (a wrong URL, a proxy page) count as unreachable
                self.log.warning("GPU utilisation unknown: Prometheus query failed: %s", error)
                state = MONITORING_UNAVAILABLE
        for holder in holders:
            holder.update(
                booking_utilisation(holder, averages, peaks, self.idle_utilisation_percent)
            )
        return state
