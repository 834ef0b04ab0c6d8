"""jhub_gpubooking.configure(c): the service, merged roles, one shared token, the spawner."""

from __future__ import annotations

import sys
import textwrap

import pytest
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

import jhub_gpubooking
from jhub_gpubooking.hub_config import (
    HUB_CULLS_USERS_ENV,
    HUB_POD_ENVIRONMENT,
    HUB_TEMPLATES,
    OAUTH_SCOPES,
    SERVICE_SCOPES,
    configure,
)

ACCESS = "access:services!service=gpu-booking"


@pytest.fixture(autouse=True)
def no_hub_pod_environment(monkeypatch):
    for name in HUB_POD_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def test_a_bare_config_gets_everything(monkeypatch):
    c = Config()
    service = configure(c, config_file="/etc/gpubooking_config.py", api_token="t0ken")
    assert c.JupyterHub.services == [service]
    assert service == {
        "name": "gpu-booking",
        "url": "http://127.0.0.1:10101",
        "command": [sys.executable, "-m", "jhub_gpubooking.service",
                    "--config", "/etc/gpubooking_config.py"],
        "display": True,
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": list(OAUTH_SCOPES),
        "environment": {},
        "api_token": "t0ken",
    }
    assert c.JupyterHub.load_roles == [
        {
            "name": "gpu-booking-service",
            "description": "The GPU booking service: read users, their groups and servers; "
                           "stop servers whose booking ended.",
            "scopes": list(SERVICE_SCOPES),
            "services": ["gpu-booking"],
        },
        # the Hub's default user role ("self") plus the page
        {"name": "user", "scopes": ["self", ACCESS]},
    ]
    assert c.JupyterHub.spawner_class == "gpubooking"
    assert c.GPUBookingSpawner.booking_api_url == "http://127.0.0.1:10101/services/gpu-booking/"
    assert c.GPUBookingSpawner.booking_api_token == "t0ken"
    assert c.GPUBookingSpawner.booking_service_name == "gpu-booking"
    # the Hub's "server not running" page links to booking again
    assert c.JupyterHub.template_paths == [HUB_TEMPLATES]
    assert c.JupyterHub.template_vars == {"gpu_booking_page_url": "/services/gpu-booking/"}


def test_the_admins_templates_and_variables_stay_first():
    c = Config()
    c.JupyterHub.base_url = "/jhub/"
    c.JupyterHub.template_paths = ["/etc/jupyterhub/templates"]
    c.JupyterHub.template_vars.update({"announcement": "Maintenance on Friday"})
    configure(c, name="gpus")
    configure(c, name="gpus")  # twice changes nothing
    assert c.JupyterHub.template_paths == ["/etc/jupyterhub/templates", HUB_TEMPLATES]
    assert c.JupyterHub.template_vars == {
        "announcement": "Maintenance on Friday", "gpu_booking_page_url": "/jhub/services/gpus/",
    }


def test_the_package_offers_it():
    assert jhub_gpubooking.configure is configure


def test_a_config_that_customizes_the_user_role_loses_nothing(tmp_path):
    """An admin's jupyterhub_config.py already gives users more than "self" and has a role for
    its own service: configure only adds what is missing."""
    config_file = tmp_path / "jupyterhub_config.py"
    config_file.write_text(textwrap.dedent("""
        c.JupyterHub.load_roles = [
            {
                "name": "user",
                "description": "Users may also share their servers and read the hub's info",
                "scopes": ["self", "shares!user", "read:hub"],
            },
            {
                "name": "gpu-booking-service",
                "scopes": ["read:groups", "list:users"],
                "services": ["gpu-booking"],
                "groups": ["ops"],
            },
            {"name": "culler", "scopes": ["admin:servers"], "services": ["idle-culler"]},
        ]
        c.JupyterHub.services = [
            {"name": "idle-culler", "command": ["python3", "-m", "jupyterhub_idle_culler"]},
        ]
        c.JupyterHub.base_url = "/jupyter/"

        import jhub_gpubooking
        jhub_gpubooking.configure(c, config_file="gpubooking_config.py", api_token="t0ken")
    """))
    c = PyFileConfigLoader(config_file.name, path=str(tmp_path)).load_config()
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert roles["user"] == {
        "name": "user",
        "description": "Users may also share their servers and read the hub's info",
        "scopes": ["self", "shares!user", "read:hub", ACCESS],
    }
    assert roles["gpu-booking-service"] == {
        "name": "gpu-booking-service",
        "scopes": ["read:groups", "list:users",
                   *[s for s in SERVICE_SCOPES if s != "list:users"]],
        "services": ["gpu-booking"],
        "groups": ["ops"],
    }
    assert roles["culler"] == {
        "name": "culler", "scopes": ["admin:servers"], "services": ["idle-culler"]
    }
    assert [s["name"] for s in c.JupyterHub.services] == ["idle-culler", "gpu-booking"]
    assert c.JupyterHub.services[0] == {
        "name": "idle-culler", "command": ["python3", "-m", "jupyterhub_idle_culler"]
    }
    # under the Hub's base URL, like every service
    assert c.GPUBookingSpawner.booking_api_url == (
        "http://127.0.0.1:10101/jupyter/services/gpu-booking/"
    )


def test_an_existing_entry_is_completed_with_its_token(monkeypatch):
    """z2jh turns hub.services.gpu-booking into an entry with the chart's generated token."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("POD_NAMESPACE", "jhub")
    monkeypatch.setenv("HOSTNAME", "hub-5d9c")  # set for the Hub only: not passed on
    c = Config()
    c.JupyterHub.services = [{
        "name": "gpu-booking", "url": "http://hub:10101", "api_token": "from-the-chart",
        "command": ["jhub-gpubooking-service", "--config", "/etc/gpubooking.py"],
        "environment": {"GPUBOOKING_DB_URL": "sqlite:////srv/b.sqlite"},
        "oauth_client_allowed_scopes": ["read:users:name!user"],
        "display": False,
    }]
    service = configure(c, environment={"EXTRA": "1"})
    assert service == {
        "name": "gpu-booking", "url": "http://hub:10101", "api_token": "from-the-chart",
        "command": ["jhub-gpubooking-service", "--config", "/etc/gpubooking.py"],
        "environment": {
            "GPUBOOKING_DB_URL": "sqlite:////srv/b.sqlite", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443", "POD_NAMESPACE": "jhub", "EXTRA": "1",
        },
        "oauth_client_allowed_scopes": ["read:users:name!user", *OAUTH_SCOPES],
        "display": False,
        "oauth_no_confirm": True,
    }
    # the spawner reaches the service over loopback, on the service's port
    assert c.GPUBookingSpawner.booking_api_url == "http://127.0.0.1:10101/services/gpu-booking/"
    assert c.GPUBookingSpawner.booking_api_token == "from-the-chart"


def test_lazy_appends_survive_and_a_generated_token_is_shared():
    c = Config()
    c.JupyterHub.services.append({"name": "other", "api_token": "x"})
    c.JupyterHub.load_roles.append({"name": "other", "scopes": ["read:hub"], "services": ["other"]})
    service = configure(c, name="gpus", url="http://127.0.0.1:9999", spawner=True)
    assert [s["name"] for s in c.JupyterHub.services] == ["other", "gpus"]
    assert [r["name"] for r in c.JupyterHub.load_roles] == ["other", "gpus-service", "user"]
    assert len(service["api_token"]) == 64
    assert c.GPUBookingSpawner.booking_api_token == service["api_token"]
    assert c.GPUBookingSpawner.booking_api_url == "http://127.0.0.1:9999/services/gpus/"
    assert c.JupyterHub.load_roles[-1]["scopes"] == ["self", "access:services!service=gpus"]


def test_configuring_twice_changes_nothing():
    c = Config()
    configure(c, api_token="t0ken")
    first = (list(c.JupyterHub.services), list(c.JupyterHub.load_roles))
    configure(c)
    assert (c.JupyterHub.services, c.JupyterHub.load_roles) == first


def test_spawner_can_stay_as_configured():
    c = Config()
    c.JupyterHub.spawner_class = "mylab.MySpawner"
    configure(c, spawner=False)
    assert c.JupyterHub.spawner_class == "mylab.MySpawner"
    assert "booking_api_url" not in c.GPUBookingSpawner


def z2jh_culler(*flags: str) -> dict:
    """The idle culler's entry as z2jh's jupyterhub_config.py appends it for ``cull.enabled``."""
    return {"name": "jupyterhub-idle-culler", "command": [
        "python3", "-m", "jupyterhub_idle_culler", "--url=http://localhost:8081/hub/api",
        "--timeout=3600", "--cull-every=600", "--concurrency=10", *flags]}


@pytest.mark.parametrize(("flags", "culls"), [
    (("--cull-users",), True),  # z2jh cull.users: true
    (("--cull-users=True", "--cull-admin-users=false"), True),
    ((), False),  # z2jh's default: servers are culled, users stay
    (("--cull-users=false",), False),
])
def test_a_hub_whose_culler_deletes_users_tells_the_service(flags, culls):
    """A culled user comes back at their next login: the service must not take their bookings
    off as if they had left (c.RemovedUsers.check_interval_minutes then defaults to 0)."""
    c = Config()
    c.JupyterHub.services = [z2jh_culler(*flags)]
    service = configure(c, api_token="t0ken")
    assert service["environment"] == ({HUB_CULLS_USERS_ENV: "1"} if culls else {})
