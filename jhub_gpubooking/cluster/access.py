"""How the service's cluster components reach the Kubernetes API (``c.ClusterAccess``)."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

from traitlets import Unicode
from traitlets.config import LoggingConfigurable

#: Set by Kubernetes in every container; the in-cluster config needs both.
IN_CLUSTER_VARIABLES = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


class ClusterAccess(LoggingConfigurable):
    """Credentials of the node watch, the admission webhook's pod claims and the sweep for
    pods the Hub forgot."""

    kubeconfig = Unicode(
        "", help="Kubeconfig file for the node watch, the webhook's pod claims and the sweep "
        "for pods the Hub forgot; empty: the pod's in-cluster service account (its role needs "
        "get, list and watch on nodes, get and delete on pods in the gated namespaces, and list "
        "and delete on pods in OrphanPods.hub_namespace)."
    ).tag(config=True)

    def connector(self, purpose: str) -> Callable[[], Awaitable[Any]]:
        """How a component opens its ``kubernetes_asyncio`` client. Checked now: refuses
        (``ValueError``, one sentence the service prints before exiting) when there is no way to
        reach the API. Run later, in the component's task: the client's modules take seconds to
        load, and the Hub gives a managed service ten seconds to answer."""
        path = self.kubeconfig
        if path and not os.path.isfile(path):
            raise ValueError(f"ClusterAccess.kubeconfig {path} does not exist.")
        missing = [name for name in IN_CLUSTER_VARIABLES if not os.environ.get(name)]
        if not path and missing:
            raise ValueError(
                f"{purpose} needs the Kubernetes API, but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set in the service's environment "
                "(the Hub starts a managed service with only env_keep and its own 'environment': "
                "jhub_gpubooking.configure(c) passes them on) and ClusterAccess.kubeconfig is "
                "empty."
            )

        async def connect() -> Any:
            # loaded in a thread, so the service keeps answering meanwhile
            await asyncio.to_thread(importlib.import_module, "kubernetes_asyncio.config")
            from kubernetes_asyncio import client, config

            if path:
                return await config.new_client_from_config(config_file=path)
            configuration = client.Configuration()
            # the pod's service account: token and CA mounted by Kubernetes
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)

        return connect
