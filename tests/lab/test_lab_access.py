"""The Hub side: a booked server's token reaches the booking service, and its JupyterLab learns
where the service is (GPUBookingLabAccess)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from jupyterhub import orm, roles
from jupyterhub.objects import Server
from traitlets.config import Config

from jhub_gpubooking.lab.access import GPUBookingLabAccess

SERVER_SCOPES = ["access:servers!server=ada/", "users:activity!user=ada"]


@pytest.fixture
def hub_db():
    db = orm.new_session_factory("sqlite://")()
    db.add(orm.OAuthClient(identifier="jupyterhub"))  # the Hub's own client owns its tokens
    for role in roles.get_default_roles():
        roles.create_role(db, role)
    db.commit()
    yield db
    db.close()


def starting_server(db, **spawner):
    """A spawner of ada's starting server, with the token the Hub made for it."""
    user = orm.User(name="ada")
    db.add(user)
    db.commit()
    roles.assign_default_roles(db, user)  # "user": the server's scopes are the user's own
    token = user.new_api_token(note="Server at /user/ada/", scopes=SERVER_SCOPES)
    return SimpleNamespace(
        user=SimpleNamespace(db=db, settings={}), api_token=token, _log_name="ada",
        booking_service_name="gpu-booking", booking_page_url="/services/gpu-booking/",
        **spawner,
    )


def test_the_started_servers_token_gets_the_service_scope_once(hub_db):
    spawner = starting_server(hub_db)
    access = GPUBookingLabAccess()
    access.grant_service_access(spawner)
    access.grant_service_access(spawner)  # a retried start adds nothing twice
    token = orm.APIToken.find(hub_db, spawner.api_token)
    assert token.scopes == sorted([*SERVER_SCOPES, "access:services!service=gpu-booking"])


def test_turned_off_it_grants_and_sets_nothing(hub_db):
    spawner = starting_server(hub_db)
    access = GPUBookingLabAccess(config=Config({"GPUBookingLabAccess": {"enabled": False}}))
    access.grant_service_access(spawner)
    assert orm.APIToken.find(hub_db, spawner.api_token).scopes == SERVER_SCOPES
    assert access.environment(spawner) == {}


def test_the_service_url_is_where_the_hub_routes_the_service():
    service = SimpleNamespace(server=Server(proto="http", ip="hub", port=10101,
                                            base_url="/jhub/services/gpu-booking/"))
    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={"services": {"gpu-booking": service}}),
        booking_service_name="gpu-booking", booking_page_url="/jhub/services/gpu-booking/",
        _log_name="ada",
    )
    assert GPUBookingLabAccess().environment(spawner) == {
        "GPU_BOOKING_SERVICE_URL": "http://hub:10101/jhub/services/gpu-booking/",
        "GPU_BOOKING_PAGE_URL": "/jhub/services/gpu-booking/",
        "GPU_BOOKING_WARN_MINUTES": "10,2",
        "GPU_BOOKING_POLL_SECONDS": "30",
    }
    configured = GPUBookingLabAccess(config=Config({"GPUBookingLabAccess": {
        "service_url": "http://proxy-public/jhub/services/gpu-booking/",
        "warn_minutes": [15, 5, 1], "poll_seconds": 10,
    }}))
    assert configured.environment(spawner) == {
        "GPU_BOOKING_SERVICE_URL": "http://proxy-public/jhub/services/gpu-booking/",
        "GPU_BOOKING_PAGE_URL": "/jhub/services/gpu-booking/",
        "GPU_BOOKING_WARN_MINUTES": "15,5,1",
        "GPU_BOOKING_POLL_SECONDS": "10",
    }
