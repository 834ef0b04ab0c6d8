"""``python -m jhub_gpubooking.devcluster``: run the simulated Kubernetes API in the foreground.

A dev tool (a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster). It prints
the server URL, optionally writes a kubeconfig, and stops every pod process on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .cluster import DevCluster, load_nodes_file
from .scheduler import DEFAULT_SCHEDULER, gpu_node, node_from_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jhub_gpubooking.devcluster", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--state", type=Path, required=True, help="directory for pod working dirs and logs")
    parser.add_argument("--nodes", type=Path, help="YAML list of nodes (default: one node with 4 A100 GPUs)")
    parser.add_argument("--write-kubeconfig", type=Path, help="write a kubeconfig for this server here")
    parser.add_argument("--namespace", action="append", default=None,
                        help="namespace to create at start (repeatable; default: default)")
    parser.add_argument("--scheduler-name", action="append", default=None,
                        help=f"schedulerName this scheduler serves (repeatable; default: {DEFAULT_SCHEDULER})")
    parser.add_argument("--admission-webhook", action="append", default=[],
                        help="URL called with an AdmissionReview on every pod create (repeatable)")
    parser.add_argument("--token", default=None, help="bearer token clients must send (default: random)")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def serve(options: argparse.Namespace) -> None:
    nodes = ([node_from_config(entry) for entry in load_nodes_file(options.nodes)] if options.nodes
             else [gpu_node("gpu-node-1")])
    cluster = DevCluster(options.state, nodes, port=options.port, token=options.token,
                         namespaces=tuple(options.namespace or ["default"]),
                         scheduler_names=tuple(options.scheduler_name or [DEFAULT_SCHEDULER]),
                         admission_webhooks=options.admission_webhook)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await cluster.start()
    try:
        if options.write_kubeconfig:
            cluster.write_kubeconfig(options.write_kubeconfig, namespace=(options.namespace or ['default'])[0])
            print(f"kubeconfig written to {options.write_kubeconfig}", flush=True)
        print(f"devcluster serving the Kubernetes API at {cluster.url} (Ctrl-C to stop)", flush=True)
        await stopping.wait()
    finally:
        await cluster.stop()


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
