"""The z2jh chart as tests need it: its vendored defaults and schema, helm's way of merging
values, and what the hub image's jupyterhub_config.py does with cull, hub.services,
hub.loadRoles and hub.extraConfig (with a stand-in for its ``z2jh`` module)."""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator
from traitlets.config import Config

from jhub_gpubooking.hub_config import HUB_POD_ENVIRONMENT

REPO_ROOT = Path(__file__).parents[1]
HELM_VALUES = REPO_ROOT / "helm-values"
# the chart's defaults and schema, vendored with their source commit (vendor/z2jh/README.md)
Z2JH = REPO_ROOT / "vendor" / "z2jh"
SERVICE_NAME = "gpu-booking"


def helm_merge(defaults: Any, override: Any) -> Any:
    """Merge values like helm: maps merge recursively, lists and scalars replace, null deletes."""
    if not (isinstance(defaults, dict) and isinstance(override, dict)):
        return copy.deepcopy(override)
    merged = copy.deepcopy(defaults)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def chart_defaults_and_schema() -> tuple[dict, Draft7Validator]:
    """The chart's default values and a validator of its values schema."""
    schema = load_yaml(Z2JH / "values.schema.yaml")
    return load_yaml(Z2JH / "values.yaml"), Draft7Validator(schema)


def merged_values(chart_defaults: dict, *files: str) -> dict:
    """``chart_defaults`` with helm-values/``files`` merged on, in order, as ``helm -f``."""
    values = chart_defaults
    for name in files:
        values = helm_merge(values, load_yaml(HELM_VALUES / name))
    return values


# --- hub.extraConfig, run the way the hub image's jupyterhub_config.py runs it --------------


def fake_z2jh(values: dict, secrets: dict[str, str]) -> types.ModuleType:
    """The hub image's z2jh helpers, reading the merged values instead of the mounted Secret."""
    module = types.ModuleType("z2jh")

    def get_config(key: str, default: Any = None) -> Any:
        value: Any = values
        for level in key.split("."):
            if not isinstance(value, dict) or level not in value:
                return default
            value = value[level]
        return copy.deepcopy(value)

    def get_secret_value(key: str, default: Any = "never-explicitly-set") -> str:
        if key in secrets:
            return secrets[key]
        if default != "never-explicitly-set":
            return default
        raise KeyError(f"{key} not found in the hub Secret")

    module.get_config = get_config
    module.get_secret_value = get_secret_value
    module.get_name = lambda name: name
    return module


def run_hub_config(values: dict, monkeypatch, environ: dict[str, str]) -> Config:
    """What z2jh's jupyterhub_config.py does with hub.services, hub.loadRoles and hub.extraConfig,
    in a hub pod whose environment holds ``environ``."""
    token = "0123456789abcdef" * 4
    z2jh = fake_z2jh(values, {f"hub.services.{SERVICE_NAME}.apiToken": token})
    monkeypatch.setitem(sys.modules, "z2jh", z2jh)
    for name in HUB_POD_ENVIRONMENT:  # only what the test says the hub pod has
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    c = Config()
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    if z2jh.get_config("hub.baseUrl") is not None:
        c.JupyterHub.base_url = z2jh.get_config("hub.baseUrl")
    c.JupyterHub.services = []
    if z2jh.get_config("cull.enabled"):
        # the idle culler comes first; only its flags matter here (cull.users: --cull-users)
        command = ["python3", "-m", "jupyterhub_idle_culler",
                   f"--timeout={z2jh.get_config('cull.timeout')}"]
        if z2jh.get_config("cull.users"):
            command.append("--cull-users")
        c.JupyterHub.services.append({"name": "jupyterhub-idle-culler", "command": command})
    for key, service in z2jh.get_config("hub.services", {}).items():
        service.setdefault("name", key)
        service.pop("apiToken", None)
        service["api_token"] = z2jh.get_secret_value(f"hub.services.{key}.apiToken")
        c.JupyterHub.services.append(service)
    c.KubeSpawner.profile_list = z2jh.get_config("singleuser.profileList")
    c.JupyterHub.load_roles = [
        {"name": key, **role} for key, role in z2jh.get_config("hub.loadRoles", {}).items()
    ]
    for _key, snippet in sorted(z2jh.get_config("hub.extraConfig", {}).items()):
        exec(snippet, {"c": c})  # noqa: S102 (what the hub image does with hub.extraConfig)
    return c
