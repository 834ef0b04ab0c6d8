"""The machine's kubectl, the real client, against a running devcluster through its kubeconfig only.

kubectl (client-go) sends the bearer token only over HTTPS and checks the server certificate against
the kubeconfig's ``certificate-authority-data``; ``get`` prints the server's Tables and ``describe pod``
lists events through a field selector, so these commands check the whole contract kubectl relies on.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys

import pytest
import yaml
from devcluster_helpers import pod_manifest
from pod_commands import SLEEPER
from test_kubelet import wait_for

pytestmark = [pytest.mark.kubectl, pytest.mark.timeout(120)]


@pytest.fixture
def run_kubectl(kubectl, cluster, tmp_path):
    """``await run_kubectl(*args)`` -> (exit code, stdout, stderr), with a private HOME and cache."""
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    env = dict(os.environ, HOME=str(tmp_path), KUBECONFIG=str(kubeconfig))

    async def run(*args: str, config=kubeconfig) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            kubectl, "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "cache"), *args,
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode, out.decode(), err.decode()

    return run


async def ok(run_kubectl, *args: str) -> str:
    code, out, err = await run_kubectl(*args)
    assert code == 0, f"kubectl {' '.join(args)} failed: {err}"
    return out


def table(text: str) -> list[dict[str, str]]:
    """kubectl's column output as one dict per row (columns are separated by 3+ spaces or by
    2+ spaces before the next header's start, so parse by the header's column offsets)."""
    lines = text.rstrip("\n").splitlines()
    header = lines[0]
    starts = [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[start:end].strip() for start, end in zip(starts, [*starts[1:], None])]
    return [
        {name: line[start:end].strip() for name, start, end in zip(names, starts, [*starts[1:], None])}
        for line in lines[1:]
    ]


@pytest.fixture
async def workload(cluster, core):
    """A running pod on the GPU node and one that cannot be scheduled (a FailedScheduling warning)."""
    running = pod_manifest("trainer", container={"resources": {"limits": {"nvidia.com/gpu": "1"}}})
    await core.create_namespaced_pod("default", running)
    stuck = pod_manifest("too-big", container={"resources": {"limits": {"nvidia.com/gpu": "9"}}})
    await core.create_namespaced_pod("default", stuck)

    def trainer_ready():
        pod = cluster.store.get("pods", "default", "trainer")
        return pod["status"].get("phase") == "Running" and all(
            status.get("ready") for status in pod["status"].get("containerStatuses") or [{}])

    await wait_for(trainer_ready, "trainer running and ready")
    await wait_for(lambda: any(event["reason"] == "FailedScheduling" for event in cluster.store.objects("events")),
                   "FailedScheduling event")
    return cluster.store.get("pods", "default", "trainer")


async def test_get_nodes(run_kubectl):
    rows = table(await ok(run_kubectl, "get", "nodes"))
    assert [(row["NAME"], row["STATUS"], row["ROLES"], row["VERSION"]) for row in rows] == [
        ("cpu-only", "Ready", "<none>", "v1.31.0-devcluster"),
        ("gpu-a100", "Ready", "<none>", "v1.31.0-devcluster"),
    ]
    assert all(re.fullmatch(r"\d+s", row["AGE"]) for row in rows)
    wide = table(await ok(run_kubectl, "get", "nodes", "-o", "wide"))
    assert {row["INTERNAL-IP"] for row in wide} == {"127.0.0.1"}


async def test_get_pods_in_all_namespaces(run_kubectl, workload):
    rows = table(await ok(run_kubectl, "get", "pods", "-A"))
    assert [{key: row[key] for key in ("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS")} for row in rows] == [
        {"NAMESPACE": "default", "NAME": "too-big", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0"},
        {"NAMESPACE": "default", "NAME": "trainer", "READY": "1/1", "STATUS": "Running", "RESTARTS": "0"},
    ]
    wide = {row["NAME"]: row for row in table(await ok(run_kubectl, "get", "pods", "-o", "wide"))}
    assert (wide["trainer"]["IP"], wide["trainer"]["NODE"]) == (workload["status"]["podIP"], "gpu-a100")
    assert (wide["too-big"]["IP"], wide["too-big"]["NODE"]) == ("<none>", "<none>")
    # one object, by its short name, and plain JSON when asked for it
    assert [row["NAME"] for row in table(await ok(run_kubectl, "get", "po", "trainer"))] == ["trainer"]
    as_yaml = yaml.safe_load(await ok(run_kubectl, "get", "pod", "trainer", "-o", "yaml"))
    assert as_yaml["metadata"]["uid"] == workload["metadata"]["uid"]


async def test_describe_pod_shows_its_node_and_events(run_kubectl, workload):
    out = await ok(run_kubectl, "describe", "pod", "trainer")
    fields = dict(re.findall(r"^(\w[\w ]*?):\s+(.*)$", out, re.MULTILINE))
    assert fields["Name"] == "trainer" and fields["Namespace"] == "default"
    assert fields["Node"] == "gpu-a100/127.0.0.1"
    assert fields["Status"] == "Running"
    assert fields["IP"] == workload["status"]["podIP"]
    events = out.split("\nEvents:\n", 1)[1]
    assert "Successfully assigned default/trainer to gpu-a100" in events
    assert {"Scheduled", "Pulled", "Created", "Started"} <= set(re.findall(r"Normal\s+(\w+)", events))
    assert "too-big" not in events  # only this pod's events (the field selector)

    stuck = await ok(run_kubectl, "describe", "pod", "too-big")
    assert re.search(r"Warning\s+FailedScheduling\s+.*Insufficient nvidia.com/gpu", stuck)


async def test_get_events(run_kubectl, workload):
    rows = table(await ok(run_kubectl, "get", "events"))
    seen = {(row["TYPE"], row["REASON"], row["OBJECT"]) for row in rows}
    assert {("Normal", "Scheduled", "pod/trainer"), ("Normal", "Started", "pod/trainer"),
            ("Warning", "FailedScheduling", "pod/too-big")} <= seen
    everywhere = table(await ok(run_kubectl, "get", "events", "-A", "--field-selector", "type=Warning"))
    assert [(row["NAMESPACE"], row["REASON"], row["OBJECT"]) for row in everywhere] == [
        ("default", "FailedScheduling", "pod/too-big")]


async def test_a_wrong_token_or_an_untrusted_server_is_refused(run_kubectl, cluster, tmp_path):
    config = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    config["users"][0]["user"]["token"] = "not-the-token"
    wrong_token = tmp_path / "wrong-token"
    wrong_token.write_text(yaml.safe_dump(config))
    code, _, err = await run_kubectl("get", "pods", config=wrong_token)
    assert code != 0 and "You must be logged in to the server" in err

    del config["clusters"][0]["cluster"]["certificate-authority-data"]
    untrusted = tmp_path / "untrusted"
    untrusted.write_text(yaml.safe_dump(config))
    code, _, err = await run_kubectl("get", "pods", config=untrusted)
    assert code != 0 and "certificate signed by unknown authority" in err


async def test_kubectl_runs_a_pod_the_kubelet_starts(run_kubectl, cluster):
    """``kubectl run`` goes through the same POST as KubeSpawner; the pod really runs."""
    await ok(run_kubectl, "run", "shell", "--image=python:3.12", "--command", "--", *SLEEPER)
    await wait_for(lambda: cluster.store.get("pods", "default", "shell")["status"].get("phase") == "Running",
                   "the kubectl-created pod running")
    assert cluster.store.get("pods", "default", "shell")["spec"]["containers"][0]["command"][0] == sys.executable


async def test_logs_show_what_the_container_wrote(run_kubectl, cluster, core):
    talker = [sys.executable, "-c", "import time; print('one'); print('two', flush=True); time.sleep(600)"]
    await core.create_namespaced_pod("default", pod_manifest("talker", talker))
    await core.create_namespaced_pod("default", pod_manifest(
        "waiting", container={"resources": {"limits": {"nvidia.com/gpu": "9"}}}))

    async def logged():
        code, out, _ = await run_kubectl("logs", "talker")
        return out if code == 0 and out == "one\ntwo\n" else None

    for _ in range(100):
        if await logged():
            break
        await asyncio.sleep(0.1)
    assert await ok(run_kubectl, "logs", "talker") == "one\ntwo\n"
    assert await ok(run_kubectl, "logs", "talker", "--tail=1") == "two\n"
    code, _, err = await run_kubectl("logs", "waiting")
    assert code != 0 and 'container "notebook" in pod "waiting" is waiting to start' in err


async def test_the_restores_delete_line_deletes_the_pods_of_the_bookings_it_names(run_kubectl, cluster, core):
    """The line `jhub-gpubooking db restore` prints for pods the Hub forgot (tests/db/test_db_restore.py
    checks it is printed): a set-based selector over every namespace, which the API server parses."""
    for name, booking_id in (("jupyter-carol", "3"), ("train", "4"), ("jupyter-dan", "5")):
        pod = pod_manifest(name)
        pod["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] = booking_id
        await core.create_namespaced_pod("default", pod)
    await core.create_namespaced_pod("default", pod_manifest("unlabelled"))
    out = await ok(run_kubectl, "delete", "pods", "--all-namespaces", "-l",
                   "gpubooking.jupyter.org/booking-id in (3,4)", "--wait=false")
    assert sorted(out.splitlines()) == ['pod "jupyter-carol" deleted',
                                        'pod "train" deleted']
    left = {pod["metadata"]["name"] for pod in cluster.store.objects("pods")
            if not pod["metadata"].get("deletionTimestamp")}
    assert left == {"jupyter-dan", "unlabelled"}
