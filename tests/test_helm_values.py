"""The Zero-to-JupyterHub values in helm-values/ are valid for the chart and configure what they claim.

Each file is merged onto the chart's default values the way helm does, validated against the
chart's schema, and its Python (hub.extraConfig, the service config file) is executed against
traitlets config objects with a stand-in for the hub image's ``z2jh`` module.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator
from kubernetes_asyncio.config import kube_config
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader
from z2jh_values import (
    HELM_VALUES,
    SERVICE_NAME,
    chart_defaults_and_schema,
    helm_merge,
    load_yaml,
    merged_values,
    run_hub_config,
)

from jhub_gpubooking import spawner
from jhub_gpubooking.core.model import KNOWN_BACKENDS, Pool
from jhub_gpubooking.core.timegrid import format_time, parse_time
from jhub_gpubooking.hub_config import HUB_CULLS_USERS_ENV, SERVICE_SCOPES

VARIANTS = ["values-postgresql.yaml", "values-sqlite-pvc.yaml"]
POSTGRES_URL = "postgresql+psycopg://gpubooking:secret@postgres.db.svc:5432/gpubooking"


@pytest.fixture(scope="module")
def chart() -> tuple[dict, Draft7Validator]:
    return chart_defaults_and_schema()


def test_helm_merge_follows_helm_rules():
    defaults = {"a": {"b": 1, "c": [1, 2], "d": "x"}, "e": 5}
    override = {"a": {"c": [3], "d": None, "f": True}, "g": {}}
    assert helm_merge(defaults, override) == {"a": {"b": 1, "c": [3], "f": True}, "e": 5, "g": {}}


COMBINATIONS = [("values.yaml",), *[(name,) for name in VARIANTS], *[("values.yaml", v) for v in VARIANTS]]


@pytest.mark.parametrize("files", COMBINATIONS, ids="+".join)
def test_values_validate_against_the_chart_schema(chart, files):
    defaults, validator = chart
    errors = [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(merged_values(defaults, *files))
    ]
    assert errors == []


def test_every_values_file_is_tested():
    assert sorted(p.name for p in HELM_VALUES.glob("*.yaml")) == sorted(["values.yaml", *VARIANTS])


def test_service_port_is_reachable_from_the_proxy(chart):
    values = merged_values(chart[0], "values.yaml")
    hub = values["hub"]
    port = int(hub["services"][SERVICE_NAME]["url"].rsplit(":", 1)[1])
    assert hub["service"]["extraPorts"] == [
        {"name": SERVICE_NAME, "port": port, "targetPort": port}
    ]
    # z2jh 4 labels pods with app.kubernetes.io/* beside app/release/component, which z2jh 5
    # drops; no selector names the release
    proxy_pods = {"app.kubernetes.io/name": "jupyterhub", "app.kubernetes.io/component": "proxy"}
    hub_pods = {"app.kubernetes.io/name": "jupyterhub", "app.kubernetes.io/component": "hub"}
    # into the hub pod, from the proxy...
    assert {
        "from": [{"podSelector": {"matchLabels": proxy_pods}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    } in hub["networkPolicy"]["ingress"]
    # ...and out of the proxy pod (Cilium / GKE Dataplane v2 enforce both ends per port)
    assert {
        "to": [{"podSelector": {"matchLabels": hub_pods}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    } in values["proxy"]["chp"]["networkPolicy"]["egress"]
    # JupyterLab on booked GPU servers reaches the service the same way, with the server's token
    user_pods = {"app.kubernetes.io/name": "jupyterhub",
                 "app.kubernetes.io/component": "singleuser-server"}
    assert {
        "from": [{"podSelector": {"matchLabels": user_pods}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    } in hub["networkPolicy"]["ingress"]
    assert {
        "to": [{"podSelector": {"matchLabels": hub_pods}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    } in values["singleuser"]["networkPolicy"]["egress"]


# --- hub.extraConfig, run the way the hub image's jupyterhub_config.py runs it --------------

#: what Kubernetes and the chart set in the hub pod, for the Hub's process only
HUB_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "POD_NAMESPACE": "jhub"}


def booking_service(c: Config) -> dict:
    [service] = [s for s in c.JupyterHub.services if s["name"] == SERVICE_NAME]
    return service


def test_extra_config_points_the_spawner_at_the_service(chart, monkeypatch):
    values = merged_values(chart[0], "values.yaml", "values-sqlite-pvc.yaml")
    c = run_hub_config(values, monkeypatch, HUB_POD)
    service = booking_service(c)
    assert c.JupyterHub.spawner_class == "gpubooking"
    assert c.GPUBookingSpawner.booking_api_url == "http://127.0.0.1:10101/services/gpu-booking/"
    assert c.GPUBookingSpawner.booking_api_token == service["api_token"]
    assert c.GPUBookingSpawner.booking_service_name == SERVICE_NAME
    # the node watch's in-cluster config and the webhook's namespace reach the service
    assert service["environment"] == {
        **HUB_POD, "GPUBOOKING_DB_URL": "sqlite:////srv/jupyterhub/gpubooking.sqlite"
    }
    assert service["command"] == [
        "jhub-gpubooking-service", "--config", "/usr/local/etc/jupyterhub/gpubooking_config.py",
    ]
    assert (service["display"], service["oauth_no_confirm"]) == (True, True)


@pytest.mark.parametrize("cull_users", [False, True])
def test_a_chart_that_culls_users_turns_the_removed_users_check_off(chart, monkeypatch,
                                                                    cull_users):
    values = helm_merge(merged_values(chart[0], "values.yaml", "values-sqlite-pvc.yaml"),
                        {"cull": {"users": cull_users}})
    environment = booking_service(run_hub_config(values, monkeypatch, HUB_POD))["environment"]
    assert environment.get(HUB_CULLS_USERS_ENV) == ("1" if cull_users else None)


def test_roles_are_least_privilege_and_merged_into_the_admins(chart, monkeypatch):
    values = helm_merge(merged_values(chart[0], "values.yaml", "values-sqlite-pvc.yaml"), {
        "hub": {"loadRoles": {"user": {"scopes": ["self", "shares!user"]}}}
    })
    roles = {role["name"]: role for role in run_hub_config(values, monkeypatch, {}).JupyterHub.load_roles}
    assert roles["gpu-booking-service"]["services"] == [SERVICE_NAME]
    assert roles["gpu-booking-service"]["scopes"] == list(SERVICE_SCOPES)
    assert roles["user"] == {
        "name": "user",
        "scopes": ["self", "shares!user", f"access:services!service={SERVICE_NAME}"],
    }


def test_extra_config_follows_the_hub_base_url(chart, monkeypatch):
    values = helm_merge(merged_values(chart[0], "values.yaml"), {"hub": {"baseUrl": "/jupyter/"}})
    c = run_hub_config(values, monkeypatch, {})
    assert c.GPUBookingSpawner.booking_api_url == (
        "http://127.0.0.1:10101/jupyter/services/gpu-booking/"
    )


def test_postgresql_url_reaches_only_the_service(chart, monkeypatch):
    values = merged_values(chart[0], "values.yaml", "values-postgresql.yaml")
    assert values["hub"]["extraEnv"]["GPUBOOKING_DB_URL"] == {
        "valueFrom": {"secretKeyRef": {"name": "gpubooking-db", "key": "url"}}
    }
    # the hub pod gets the variable from the Secret; the Hub itself must hand it to the service
    c = run_hub_config(values, monkeypatch, {"GPUBOOKING_DB_URL": POSTGRES_URL})
    assert booking_service(c)["environment"] == {"GPUBOOKING_DB_URL": POSTGRES_URL}


# --- the service config file (hub.extraFiles) and singleuser.profileList -----------------------


def load_service_config(monkeypatch, tmp_path: Path) -> Config:
    extra_file = load_yaml(HELM_VALUES / "values.yaml")["hub"]["extraFiles"]["gpubooking-config"]
    assert extra_file["mountPath"] == "/usr/local/etc/jupyterhub/gpubooking_config.py"
    config_path = tmp_path / "gpubooking_config.py"
    config_path.write_text(extra_file["stringData"])
    monkeypatch.setenv("GPUBOOKING_DB_URL", POSTGRES_URL)
    return PyFileConfigLoader(config_path.name, path=str(tmp_path)).load_config()


def profile_list() -> list[dict]:
    return load_yaml(HELM_VALUES / "values.yaml")["singleuser"]["profileList"]


def test_service_config_pools_build(monkeypatch, tmp_path):
    config = load_service_config(monkeypatch, tmp_path).GPUBookingService
    pools = [Pool.from_config(entry) for entry in config.pools]
    assert config.db_url == POSTGRES_URL
    assert {pool.backend for pool in pools} >= {"hami", "mig", "time-slicing"}
    assert {pool.backend for pool in pools} <= set(KNOWN_BACKENDS)
    assert len({pool.name for pool in pools}) == len(pools)


def test_service_config_policies_load(monkeypatch, tmp_path):
    from jhub_gpubooking.core import policy

    config = load_service_config(monkeypatch, tmp_path).GPUBookingService
    policy.Policy.from_config(config.default_policy)
    pool_names = {entry["name"] for entry in config.pools}
    for group, overrides in config.group_policies.items():
        merged = policy.Policy.from_config({**config.default_policy, **overrides})
        assert set(merged.allowed_pools or pool_names) <= pool_names, group


def test_every_gpu_profile_names_a_configured_pool(monkeypatch, tmp_path):
    config = load_service_config(monkeypatch, tmp_path).GPUBookingService
    pools = {entry["name"]: entry.get("backend", "whole") for entry in config.pools}
    gpu_profiles = [p for p in profile_list() if "gpu_pool" in p]
    assert {p["gpu_pool"] for p in gpu_profiles} == set(pools)
    assert [p["slug"] for p in profile_list() if "gpu_pool" not in p] == ["cpu"]


def test_service_app_accepts_the_config(monkeypatch, tmp_path):
    from jhub_gpubooking.service.app import GPUBookingService

    # what the Hub sets for a managed service, under a non-root base URL
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", "http://hub:10101")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/jupyter/")
    config = load_service_config(monkeypatch, tmp_path)
    service = GPUBookingService(config=config)
    assert service.db_url == POSTGRES_URL
    assert service.upgrade_db is True
    assert service.service_url == "http://0.0.0.0:10101"
    assert service.hub_api_url == "http://localhost:8081/jupyter/hub/api"
    assert [pool["name"] for pool in service.pools] == [p["name"] for p in config.GPUBookingService.pools]
    assert service.admin_groups == ["gpu-admins"]


def test_pools_translate_into_pod_resources(monkeypatch, tmp_path):
    from jhub_gpubooking import gpu

    config = load_service_config(monkeypatch, tmp_path).GPUBookingService
    pools = {entry["name"]: Pool.from_config(entry) for entry in config.pools}
    for pool in pools.values():
        gpu.check_pool_backend(pool)
    smallest = {name: gpu.gpu_request(pool, 1 / pool.slices_per_gpu, None).resources for name, pool in pools.items()}
    assert smallest == {
        "a100-hami": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10240, "nvidia.com/gpucores": 25},
        "h100-mig": {"nvidia.com/mig-3g.40gb": 1},
        "t4-shared": {"nvidia.com/gpu.shared": 1},
        "l40s": {"nvidia.com/gpu": 1},
    }


UNUSED_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "unused", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "unused", "user": {"token": "unused"}}],
    "contexts": [{"name": "unused", "context": {"cluster": "unused", "user": "unused"}}],
    "current-context": "unused",
}


def test_spawner_entry_point_is_gpubooking():
    from importlib.metadata import entry_points

    [entry_point] = entry_points(group="jupyterhub.spawners", name="gpubooking")
    assert entry_point.load() is spawner.GPUBookingSpawner


async def test_spawner_recognises_the_gpu_profiles(chart, monkeypatch, tmp_path):
    values = merged_values(chart[0], "values.yaml", "values-sqlite-pvc.yaml")
    hub_config = run_hub_config(values, monkeypatch, {})
    # KubeSpawner loads a kube config when built; this test never talks to Kubernetes
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNUSED_KUBECONFIG))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    gpu_spawner = spawner.GPUBookingSpawner(_mock=True, config=hub_config)
    assert gpu_spawner.booking_api_url == "http://127.0.0.1:10101/services/gpu-booking/"
    assert gpu_spawner.booking_api_token == booking_service(hub_config)["api_token"]

    profiles = await gpu_spawner._initialized_profiles()
    pools = {p["name"]: p for p in load_service_config(monkeypatch, tmp_path).GPUBookingService.pools}
    now = parse_time("2026-03-02T10:05:00Z", "now")
    quarter_a100 = {
        "id": 7, "user": "ada", "pool": "a100-hami", "slices": 1, "state": "active",
        "start": "2026-03-02T10:00:00Z", "end": "2026-03-02T12:00:00Z",
    }
    shown = spawner.chooser_profiles(
        profiles, pools=pools, active=[quarter_a100], upcoming=[],
        booking_page_url="/services/gpu-booking/", now=now,
    )
    assert sorted(shown) == ["a100-hami", "h100-mig", "l40s", "t4-shared"]
    assert {slug: entry["enabled"] for slug, entry in shown.items()} == {
        "a100-hami": True, "h100-mig": False, "l40s": False, "t4-shared": False,
    }
    assert shown["a100-hami"]["booking"] == {
        "share": "0.25 × NVIDIA A100-SXM4-40GB", "end": format_time(parse_time("2026-03-02T12:00:00Z", "end")),
    }


def test_the_backup_volume_of_the_how_to_validates_and_is_the_configured_folder(chart):
    """docs/howto/backup.md: its hub.extraVolumes snippet, on top of the lab's values, is valid
    for the chart, and mounts the folder its c.ScheduledBackups.directory names."""
    import re

    text = (Path(__file__).parents[1] / "docs/howto/backup.md").read_text()
    [snippet] = [block for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
                 if "extraVolumes" in block]
    [folder] = re.findall(r'c\.ScheduledBackups\.directory = "([^"]+)"', text)
    defaults, validator = chart
    values = helm_merge(merged_values(defaults, "values.yaml", "values-sqlite-pvc.yaml"),
                        yaml.safe_load(snippet))
    assert [error.message for error in validator.iter_errors(values)] == []
    [mount] = values["hub"]["extraVolumeMounts"]
    assert mount["mountPath"] == folder
    # the hub pod's fsGroup makes a new volume writable by the service's user
    assert values["hub"]["podSecurityContext"]["fsGroup"] == 1000
