"""Fixtures for the devcluster tests: a started ``DevCluster`` and kubernetes_asyncio clients for it.

The clients are the library KubeSpawner itself uses, so these tests check the wire contract.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from devcluster_helpers import cluster_nodes
from kubernetes_asyncio import client

from jhub_gpubooking.devcluster import DevCluster


@pytest.fixture
async def cluster(tmp_path: Path):
    async with DevCluster(tmp_path / "state", cluster_nodes(), watch_history=50,
                          max_grace_seconds=2, bookmark_seconds=0.5) as running:
        yield running


@pytest.fixture
async def api_client(cluster: DevCluster):
    configuration = cluster.client_configuration()
    async with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)

