"""The Kubernetes client's modules load in a thread, never on the service's event loop.

``kubernetes_asyncio`` takes 1-2 s to import on a quiet machine and several seconds on a busy
one (7.8 s measured here while CI ran). Imported on the event loop, it stops the service for
that long: on a restart, CI's walk saw the admission webhook's answer take over 10 s, past
the API server's timeout (5 s in helm-values), because the tick's sweep for pods the Hub
forgot imported the client on the loop before connecting. ``ClusterAccess.connector``
loads the modules in a thread; every component must only use them after connecting.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: Run in a fresh interpreter, so the client's modules are not loaded yet: records the thread
#: each ``kubernetes_asyncio`` module is first imported on, then runs one sweep for forgotten
#: pods and one check of admitted pods against an API server that is not there.
SCRIPT = textwrap.dedent("""
    import asyncio, importlib.abc, json, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    from datetime import datetime, timezone
    from types import SimpleNamespace

    on_loop = []

    class Recorder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.startswith("kubernetes_asyncio") and (
                    threading.current_thread() is threading.main_thread()):
                on_loop.append(name)
            return None  # the usual finders import it

    sys.meta_path.insert(0, Recorder())

    from jhub_gpubooking.admission.admitted_pods import AdmittedPods
    from jhub_gpubooking.cluster.access import ClusterAccess
    from jhub_gpubooking.cluster.orphans import OrphanPods

    class Store:
        def held_by_prefix(self, prefix):
            return []

    async def main():
        connector = ClusterAccess(kubeconfig=sys.argv[1]).connector("the test")
        executor = ThreadPoolExecutor(1)
        sweep = OrphanPods(hub_namespace="jhub", store=Store(), executor=executor,
                           connector=lambda purpose: connector)
        settings = SimpleNamespace(namespaces=("jobs",), namespace_owners={})
        admitted = AdmittedPods(Store(), connector, executor, grace=None,
                                settings=lambda: settings)
        now = datetime.now(timezone.utc)
        swept, checked = await sweep.sweep(now), await admitted.check(now)
        loaded = "kubernetes_asyncio.client" in sys.modules
        print(json.dumps({"swept": len(swept), "checked": len(checked), "loaded": loaded,
                          "on_loop": on_loop}))

    asyncio.run(main())
""")

#: A kubeconfig naming an API server on the discard port: nothing answers there.
KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
    "clusters": [{"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}],
    "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}],
    "users": [{"name": "nobody", "user": {"token": "none"}}],
}


def test_the_sweep_and_the_check_of_admitted_pods_load_the_client_only_in_a_thread(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(KUBECONFIG))  # JSON is YAML
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(kubeconfig)], capture_output=True,
                          text=True, timeout=120, check=True)
    # nothing could be listed; the client was loaded (by the connector, in its thread)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "swept": 0, "checked": 0, "loaded": True, "on_loop": []}
