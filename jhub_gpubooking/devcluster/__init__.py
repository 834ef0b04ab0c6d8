"""A simulated Kubernetes API for tests and the demo: a *contract test of the Kubernetes API calls
KubeSpawner makes*, not a cluster.

It serves the core/v1 REST paths kubernetes_asyncio calls (CRUD, selectors, watch with resourceVersions),
schedules pods onto configured (GPU) nodes, and runs each pod's container command as a local process on
its own loopback pod IP, so KubeSpawner's real code path runs end to end without Kubernetes.
"""

try:  # the package's "devcluster" extra; a hub install does not need them
    import jsonpatch  # noqa: F401
    import yaml  # noqa: F401
except ImportError as error:
    raise ImportError(
        f"The simulated cluster needs {error.name}: pip install 'jhub-gpubooking[devcluster]'."
    ) from error

from .cluster import DevCluster, KubeconfigAccess, kubeconfig, load_nodes_file, write_kubeconfig
from .errors import ApiError
from .scheduler import gpu_node, node_from_config, node_manifest

__all__ = [
    "ApiError",
    "DevCluster",
    "KubeconfigAccess",
    "gpu_node",
    "kubeconfig",
    "load_nodes_file",
    "node_from_config",
    "node_manifest",
    "write_kubeconfig",
]
