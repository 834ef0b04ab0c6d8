"""The foreground CLI: prints its URL, writes a kubeconfig, and SIGTERM leaves no pod process behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from devcluster_helpers import pod_manifest
from test_kubelet import FAMILY, process_alive

from jhub_gpubooking.devcluster import KubeconfigAccess

pytestmark = pytest.mark.timeout(60)


def test_cli_serves_writes_kubeconfig_and_cleans_up_on_sigterm(tmp_path):
    kubeconfig_path = tmp_path / "kubeconfig"
    cli = subprocess.Popen(
        [sys.executable, "-m", "jhub_gpubooking.devcluster", "--port", "0", "--state", str(tmp_path / "state"),
         "--write-kubeconfig", str(kubeconfig_path), "--namespace", "jhub"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = [cli.stdout.readline(), cli.stdout.readline()]
        url = lines[1].split(" at ")[1].split()[0]
        access = KubeconfigAccess.read(kubeconfig_path)
        assert url.startswith("https://127.0.0.1:") and access.server == url
        assert access.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
        assert "namespace: jhub" in kubeconfig_path.read_text()
        request = urllib.request.Request(f"{url}/api/v1/namespaces/jhub/pods", method="POST",
                                         headers={**access.headers, "Content-Type": "application/json"},
                                         data=json.dumps(pod_manifest("cli-pod", FAMILY)).encode())
        # only the kubeconfig's CA makes the server's certificate trusted
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(request, timeout=10)
        urllib.request.urlopen(request, timeout=10, context=access.ssl_context()).close()
        pids_file = tmp_path / "state" / "pods"
        for _ in range(200):
            found = list(pids_file.glob("jhub_cli-pod_*/pids"))
            if found:
                break
            time.sleep(0.05)
        pids = [int(pid) for pid in found[0].read_text().split()]
        assert all(process_alive(pid) for pid in pids)
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=30) == 0
        assert not any(process_alive(pid) for pid in pids)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cli.stdout.close()
