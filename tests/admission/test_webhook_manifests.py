"""helm-values/webhook/: core and admissionregistration manifests validate strictly against
Kubernetes' schema, cert-manager objects reference each other, and the z2jh values load into the
service's traits."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft7Validator
from kubernetes_validate.utils import latest_version, major_minor
from traitlets.config.loader import PyFileConfigLoader

from jhub_gpubooking.inventory import pools_from_nodes
from jhub_gpubooking.service.app import GPUBookingService

REPO = Path(__file__).parents[2]
WEBHOOK = REPO / "helm-values" / "webhook"
Z2JH = REPO.parent / "shared" / "z2jh"
MANIFEST_FILES = ["cert-manager.yaml", "service.yaml", "webhook-configurations.yaml",
                  "network-policy.yaml", "pod-claims-rbac.yaml"]
STRICT_GROUPS = ("v1", "admissionregistration.k8s.io/v1", "networking.k8s.io/v1",
                 "rbac.authorization.k8s.io/v1")


def manifests() -> list[dict]:
    return [doc for name in MANIFEST_FILES
            for doc in yaml.safe_load_all((WEBHOOK / name).read_text()) if doc]


def by_kind(kind: str) -> list[dict]:
    return [doc for doc in manifests() if doc["kind"] == kind]


@pytest.mark.parametrize("manifest", [m for m in manifests() if m["apiVersion"] in STRICT_GROUPS],
                         ids=lambda m: f"{m['kind']}/{m['metadata']['name']}")
def test_kubernetes_manifests_validate_strictly(manifest):
    version = latest_version()
    assert kubernetes_validate.validate(manifest, version, strict=True) == major_minor(version)


def test_webhooks_fail_closed_reach_the_service_and_get_the_certificate_ca():
    certificate = by_kind("Certificate")[0]
    service = by_kind("Service")[0]
    ca_source = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    configurations = by_kind("MutatingWebhookConfiguration") + \
        by_kind("ValidatingWebhookConfiguration")
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
    assert certificate["spec"]["issuerRef"]["name"] == by_kind("Issuer")[0]["metadata"]["name"]


def merged(defaults, override):
    if not (isinstance(defaults, dict) and isinstance(override, dict)):
        return override
    return {**defaults, **{k: merged(defaults.get(k), v) for k, v in override.items()}}


def test_values_validate_against_the_chart_and_configure_the_service(tmp_path, monkeypatch):
    # set by the database variant's values in a real install
    monkeypatch.setenv("GPUBOOKING_DB_URL", "sqlite://")
    base = yaml.safe_load((REPO / "helm-values" / "values.yaml").read_text())
    extra = yaml.safe_load((WEBHOOK / "values-webhook.yaml").read_text())
    values = merged(merged(yaml.safe_load((Z2JH / "values.yaml").read_text()), base), extra)
    schema = yaml.safe_load((Z2JH / "values.schema.yaml").read_text())
    assert not list(Draft7Validator(schema).iter_errors(values))
    # group owners need the group's members; the base scopes survive the list replacement
    scopes = values["hub"]["loadRoles"]["gpu-booking-service"]["scopes"]
    assert set(scopes) == {
        "list:users", "read:users:groups", "read:servers", "delete:servers", "read:groups"
    }

    mount = Path(values["hub"]["extraVolumeMounts"][-1]["mountPath"])
    files = values["hub"]["extraFiles"]
    for entry in ("gpubooking-config", "gpubooking-webhook-config"):
        (tmp_path / Path(files[entry]["mountPath"]).name).write_text(files[entry]["stringData"])
    command = values["hub"]["services"]["gpu-booking"]["command"]
    config_name = Path(command[command.index("--config") + 1]).name
    config = PyFileConfigLoader(config_name, path=str(tmp_path)).load_config()
    service = GPUBookingService(config=config)
    assert service.webhook_certfile == str(mount / "tls.crt")
    assert service.webhook_port == 8443 and service.inventory_from_nodes
    assert service.pools  # the base config was loaded too
    assert set(pools_from_nodes([], service.inventory_pool_templates)) == set()


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
                              "verbs": ["get", "delete"]}]
