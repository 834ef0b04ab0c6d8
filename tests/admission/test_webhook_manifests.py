"""helm-values/webhook/: core and admissionregistration manifests validate strictly against
Kubernetes' schema, cert-manager objects reference each other, and the z2jh values load into the
service's traits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version, major_minor
from traitlets.config.loader import PyFileConfigLoader
from z2jh_values import chart_defaults_and_schema, merged_values, run_hub_config

from jhub_gpubooking.cluster.webhook import AdmissionWebhook
from jhub_gpubooking.hub_config import SERVICE_SCOPES
from jhub_gpubooking.inventory import pools_from_nodes
from jhub_gpubooking.service.app import COMPONENTS, RENAMED_OPTIONS, GPUBookingService
from jhub_gpubooking.service.config_sections import moved_options

REPO = Path(__file__).parents[2]
WEBHOOK = REPO / "helm-values" / "webhook"
MANIFEST_FILES = ["cert-manager.yaml", "service.yaml", "webhook-configurations.yaml",
                  "network-policy.yaml", "pod-claims-rbac.yaml"]
STRICT_GROUPS = ("v1", "admissionregistration.k8s.io/v1", "networking.k8s.io/v1",
                 "rbac.authorization.k8s.io/v1")


def manifests() -> list[dict]:
    return [doc for name in MANIFEST_FILES
            for doc in yaml.safe_load_all((WEBHOOK / name).read_text()) if doc]


def kustomized(tmp_path: Path, namespace: str) -> list[dict]:
    """``kubectl kustomize`` of the folder after the one edit its README asks for."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders kustomization.yaml)")
    folder = tmp_path / "webhook"
    shutil.copytree(WEBHOOK, folder)
    kustomization = folder / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count("\nnamespace: jhub\n") == 1
    kustomization.write_text(text.replace("\nnamespace: jhub\n", f"\nnamespace: {namespace}\n"))
    rendered = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True,
                              text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def by_kind(kind: str, documents: list[dict] | None = None) -> list[dict]:
    return [doc for doc in documents or manifests() if doc["kind"] == kind]


@pytest.mark.parametrize("manifest", [m for m in manifests() if m["apiVersion"] in STRICT_GROUPS],
                         ids=lambda m: f"{m['kind']}/{m['metadata']['name']}")
def test_kubernetes_manifests_validate_strictly(manifest):
    version = latest_version()
    assert kubernetes_validate.validate(manifest, version, strict=True) == major_minor(version)


def check_webhooks_reach_the_service(documents: list[dict]) -> None:
    certificate = by_kind("Certificate", documents)[0]
    service = by_kind("Service", documents)[0]
    ca_source = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    configurations = by_kind("MutatingWebhookConfiguration", documents) + \
        by_kind("ValidatingWebhookConfiguration", documents)
    paths = set()
    for configuration in configurations:
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            ca_source
        (webhook,) = configuration["webhooks"]
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["namespaceSelector"]["matchLabels"] == {"gpubooking.jupyter.org/gated": "true"}
        target = webhook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == (service["metadata"]["name"],
                                                         service["metadata"]["namespace"])
        paths.add(target["path"])
    assert paths == {"/mutate", "/validate"}
    assert f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc" in \
        certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == \
        by_kind("Issuer", documents)[0]["metadata"]["name"]
    [binding] = by_kind("ClusterRoleBinding", documents)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hub", "namespace": service["metadata"]["namespace"]}
    ]


def test_webhooks_fail_closed_reach_the_service_and_get_the_certificate_ca():
    check_webhooks_reach_the_service(manifests())


def test_one_line_of_kustomization_moves_everything_to_another_namespace(tmp_path):
    documents = kustomized(tmp_path, "mylab")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in documents) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in manifests()
    )
    check_webhooks_reach_the_service(documents)
    assert by_kind("Service", documents)[0]["metadata"]["namespace"] == "mylab"
    assert "jhub" not in yaml.safe_dump_all(documents)


def test_hub_pod_is_selected_by_labels_that_outlive_z2jh_4():
    """z2jh 4 added app.kubernetes.io/* labels beside app/release/component, which z2jh 5 drops;
    a selector must not name the release either (nothing else in the folder does)."""
    for document in by_kind("Service") + by_kind("NetworkPolicy"):
        spec = document["spec"]
        selector = spec.get("selector") or spec["podSelector"]["matchLabels"]
        assert selector == {"app.kubernetes.io/name": "jupyterhub",
                            "app.kubernetes.io/component": "hub"}


def test_values_validate_against_the_chart_and_configure_the_service(tmp_path, monkeypatch):
    defaults, validator = chart_defaults_and_schema()
    values = merged_values(defaults, "values.yaml", "webhook/values-webhook.yaml")
    assert not list(validator.iter_errors(values))
    # group owners need the group's members: configure keeps read:groups and adds its own
    hub_config = run_hub_config(values, monkeypatch, {"POD_NAMESPACE": "mylab"})
    [role] = [r for r in hub_config.JupyterHub.load_roles if r["name"] == "gpu-booking-service"]
    assert role["scopes"] == ["read:groups", *SERVICE_SCOPES]
    assert role["services"] == ["gpu-booking"]
    [hub_entry] = [s for s in hub_config.JupyterHub.services if s["name"] == "gpu-booking"]
    monkeypatch.setenv("GPUBOOKING_DB_URL", "sqlite://")  # set by the database variant
    monkeypatch.setenv("POD_NAMESPACE", hub_entry["environment"]["POD_NAMESPACE"])

    mount = Path(values["hub"]["extraVolumeMounts"][-1]["mountPath"])
    files = values["hub"]["extraFiles"]
    for entry in ("gpubooking-config", "gpubooking-webhook-config"):
        (tmp_path / Path(files[entry]["mountPath"]).name).write_text(files[entry]["stringData"])
    command = values["hub"]["services"]["gpu-booking"]["command"]
    config_name = Path(command[command.index("--config") + 1]).name
    config = PyFileConfigLoader(config_name, path=str(tmp_path)).load_config()
    service = GPUBookingService(config=config)
    # the values use the components' own sections (no deprecated flat names)
    moved = moved_options("GPUBookingService", COMPONENTS, RENAMED_OPTIONS)
    assert not [place for place in moved if place[1] in config.get(place[0], {})]
    webhook = AdmissionWebhook(parent=service)
    assert webhook.webhook_certfile == str(mount / "tls.crt")
    assert webhook.webhook_port == 8443 and config.NodeInventory.inventory_from_nodes
    assert service.pools  # the base config was loaded too
    assert set(pools_from_nodes([], config.NodeInventory.inventory_pool_templates)) == set()
    # the hub's own pods name their owner: its service account, in the namespace it runs in
    assert webhook.webhook_hub_service_accounts == ["system:serviceaccount:mylab:hub"]


def test_only_the_api_server_may_reach_the_webhook_port():
    """Every NetworkPolicy rule opening 8443 names its sources, and only by address (the API
    server is not a pod); none opens the port to everyone."""
    rules = [rule for policy in by_kind("NetworkPolicy")
             for rule in policy["spec"].get("ingress", [])
             if any(port.get("port") == 8443 for port in rule.get("ports", []))]
    assert rules
    for rule in rules:
        assert rule.get("from"), "a rule without 'from' admits every source"
        assert all(set(peer) == {"ipBlock"} for peer in rule["from"])


def test_claims_are_declared_side_effects_and_ephemeral_containers_are_checked():
    (mutating,) = by_kind("MutatingWebhookConfiguration")[0]["webhooks"]
    assert mutating["sideEffects"] == "NoneOnDryRun"
    (validating,) = by_kind("ValidatingWebhookConfiguration")[0]["webhooks"]
    assert {"resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"]}.items() <= \
        next(rule for rule in validating["rules"]
             if rule["resources"] == ["pods/ephemeralcontainers"]).items()
    (role,) = [r for r in by_kind("ClusterRole") if r["metadata"]["name"] ==
               "gpubooking-pod-claims"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "delete"]}]
