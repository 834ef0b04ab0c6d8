"""The service is composed of components, each configured in its own section: every component
reads its section, the old flat ``c.GPUBookingService.<option>`` names still apply with a
deprecation warning, and the whole service opens one database engine."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from traitlets.config import Config

from jhub_gpubooking.cluster.access import ClusterAccess
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db import session as db_session
from jhub_gpubooking.service.app import COMPONENTS, GPUBookingService
from jhub_gpubooking.service.config_sections import move_options, moved_options

NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)
POOLS = [{"name": "a100", "nodes": {"node-a": 2}}]


def make_service(tmp_path, config: Config, **options) -> GPUBookingService:
    options = {"pools": POOLS, **options}
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}", upgrade_db=True,
        hub_api_url="http://127.0.0.1:9/hub/api", api_token="t", clock=ManualClock(NOW),
        config=config, **options,
    )
    service.setup()
    return service


@pytest.fixture
def service_with(tmp_path):
    services = []

    def start(**sections) -> GPUBookingService:
        services.append(make_service(tmp_path, Config(sections)))
        return services[-1]

    yield start
    for service in services:
        service.executor.shutdown(wait=True)


def test_lifecycle_section(service_with):
    service = service_with(Lifecycle={"end_grace_seconds": 90, "no_show_minutes": 0})
    rules = service.lifecycle.rules
    assert (rules.end_grace, rules.no_show_after) == (timedelta(seconds=90), None)


def test_email_warnings_section(service_with):
    assert not service_with().emails.enabled
    service = service_with(
        EmailWarnings={"smtp_host": "mail.example", "email_address_template": "{user}@x"}
    )
    assert service.emails.enabled and service.emails.smtp_host == "mail.example"


def test_opportunistic_section(service_with):
    service = service_with(Opportunistic={"opportunistic_horizon_minutes": 45})
    grant = service.opportunistic.bookings.grant(
        "ada", "a100", 1, service.opportunistic.opportunistic_horizon_minutes
    )
    assert grant.end - grant.start >= timedelta(minutes=45)


def test_budgets_section(service_with):
    service = service_with(
        Budgets={"group_budgets": {"lab": {"gpu_hours": 3, "period": "week"}},
                 "budget_charge": "used"}
    )
    book = service.budgets.budget_book()
    assert book.charge_mode == "used"
    assert (book.group_budgets["lab"].gpu_hours, book.group_budgets["lab"].period) == (3, "week")


def test_recurring_series_section(service_with):
    service = service_with(RecurringSeries={"series_max_occurrences": 4, "series_groups": ["x"]})
    assert (service.series.series_max_occurrences, service.series.series_groups) == (4, ["x"])


def test_monitoring_section(service_with):
    service = service_with(GPUMonitoring={"prometheus_url": "http://prom:9090/"})
    assert service.monitoring.prometheus_url == "http://prom:9090/"


def test_reservation_page_section(service_with):
    assert service_with(ReservationPage={"page_days": 3}).page.page_days == 3


def test_cluster_access_section_names_its_option_when_the_file_is_missing(tmp_path):
    access = ClusterAccess(config=Config({"ClusterAccess": {"kubeconfig": str(tmp_path / "no")}}))
    with pytest.raises(ValueError, match=r"ClusterAccess.kubeconfig .*/no does not exist"):
        access.connector("inventory_from_nodes")


def test_admission_webhook_section(service_with):
    service = service_with(
        AdmissionWebhook={"namespace_owners": {"jobs": "ada"}, "webhook_namespaces": ["jobs"]}
    )
    settings = service.webhook.admission_settings()
    assert (settings.namespace_owners, settings.namespaces) == ({"jobs": "ada"}, ("jobs",))
    assert set(settings.pools) == {"a100"} and service.webhook.pod_claims is None


def test_node_inventory_section(service_with, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    service = service_with(
        NodeInventory={"gpu_uuids_from_nodes": True, "inventory_node_selector": "gpu=yes"},
        ClusterAccess={"kubeconfig": str(kubeconfig)},
    )
    assert service.inventory.node_watcher.label_selector == "gpu=yes"
    assert service_with().inventory.node_watcher is None


def test_every_component_option_has_help_and_a_section_of_its_own():
    sections = [component.__name__ for component in COMPONENTS]
    assert len(set(sections)) == len(sections)
    for component in COMPONENTS:
        options = component.class_own_traits(config=True)
        assert options, component
        assert all(len(trait.help) > 20 for trait in options.values()), component
    # no option is both the service's own and a component's: the flat name would be ambiguous
    own = GPUBookingService.class_own_traits(config=True)
    assert not {("GPUBookingService", name) for name in own} & set(
        moved_options("GPUBookingService", COMPONENTS)
    )


def test_an_old_flat_name_still_applies_and_warns_naming_the_new_section(tmp_path, caplog):
    config = Config()
    config.GPUBookingService.end_grace_seconds = 7
    config.GPUBookingService.inventory_kubeconfig = "/etc/kube/config"
    config.GPUBookingService.slot_minutes = 5  # the service's own option stays where it is
    with caplog.at_level(logging.WARNING):
        service = make_service(tmp_path, config, log=logging.getLogger("flat-names"))
    try:
        assert service.slot_minutes == 5
        assert service.lifecycle.end_grace_seconds == 7
        assert service.cluster_access.kubeconfig == "/etc/kube/config"
    finally:
        service.executor.shutdown(wait=True)
    assert [r.getMessage() for r in caplog.records] == [
        "c.GPUBookingService.end_grace_seconds is deprecated: set c.Lifecycle.end_grace_seconds "
        "instead",
        "c.GPUBookingService.inventory_kubeconfig is deprecated: set c.ClusterAccess.kubeconfig "
        "instead",
    ]


def test_a_flat_name_in_a_config_file_reaches_the_running_component(tmp_path, caplog):
    config_file = tmp_path / "config.py"
    config_file.write_text("c.GPUBookingService.no_show_minutes = 0\n"
                           "c.GPUBookingService.opportunistic_enabled = True\n")
    service = GPUBookingService(log=logging.getLogger("flat-file"), api_token="t")
    with caplog.at_level(logging.WARNING):
        service.load_config_file(str(config_file))
    service.db_url = f"sqlite:///{tmp_path / 'bookings.sqlite'}"
    service.upgrade_db, service.pools, service.clock = True, POOLS, ManualClock(NOW)
    service.setup()
    try:
        assert service.lifecycle.rules.no_show_after is None
        assert service.opportunistic.opportunistic_enabled
    finally:
        service.executor.shutdown(wait=True)
    assert len([r for r in caplog.records if "is deprecated: set c." in r.getMessage()]) == 2


def test_the_new_name_wins_over_the_old_one():
    config = Config({"GPUBookingService": {"no_show_minutes": 5},
                     "Lifecycle": {"no_show_minutes": 10}})
    log = logging.getLogger("both-names")
    moved = move_options(config, moved_options("GPUBookingService", COMPONENTS), log)
    assert moved.Lifecycle.no_show_minutes == 10 and "no_show_minutes" not in moved.GPUBookingService
    assert config.GPUBookingService.no_show_minutes == 5  # the shared Config is left alone


def test_the_service_opens_exactly_one_database_engine(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'bookings.sqlite'}"
    db_session.upgrade(url)
    engines = []
    make_engine = db_session.make_engine

    def counting_make_engine(*args, **kwargs):
        engines.append(make_engine(*args, **kwargs))
        return engines[-1]

    monkeypatch.setattr(db_session, "make_engine", counting_make_engine)
    config = Config({"NodeInventory": {"inventory_from_nodes": False},
                     "AdmissionWebhook": {"webhook_port": 0}})
    service = GPUBookingService(db_url=url, pools=POOLS, clock=ManualClock(NOW), config=config,
                                hub_api_url="http://127.0.0.1:9/hub/api", api_token="t")
    service.setup()
    try:
        assert engines == [service.db_engine]
        # the flags of the inventory share the store's session factory, not a second one
        assert service.booking_flags.store is service.store
        assert service.inventory.flags is service.booking_flags
    finally:
        service.executor.shutdown(wait=True)


def test_generated_config_has_a_section_per_component(tmp_path):
    text = GPUBookingService().generate_config_file()
    for component in COMPONENTS:
        assert f"# {component.__name__}(" in text
    assert "#  c.Lifecycle.end_grace_seconds = 60" in text.replace("# c.", "#  c.")


def test_the_removed_users_check_is_off_on_a_hub_that_culls_users_unless_set(monkeypatch):
    from jhub_gpubooking.hub_config import HUB_CULLS_USERS_ENV
    from jhub_gpubooking.service.removed_users import RemovedUsers

    monkeypatch.delenv(HUB_CULLS_USERS_ENV, raising=False)
    assert RemovedUsers().check_interval_minutes == 60
    monkeypatch.setenv(HUB_CULLS_USERS_ENV, "1")  # set by configure(c): see test_hub_config
    assert RemovedUsers().check_interval_minutes == 0
    insisted = Config(RemovedUsers={"check_interval_minutes": 30.0})
    assert RemovedUsers(config=insisted).check_interval_minutes == 30


async def test_a_booking_for_a_user_is_checked_against_the_hub_only_while_rounds_run():
    """With the check of deleted users off (a Hub that culls idle users, who come back at their
    next login), an admin may book for a user the Hub does not have now: no Hub call is made.
    With it on, a Hub that cannot say is a 503 to retry, not an accepted booking."""
    from tornado import web

    from jhub_gpubooking.service.removed_users import RemovedUsers

    nowhere = "http://127.0.0.1:9/hub/api"  # the discard port: nothing answers there
    await RemovedUsers(check_interval_minutes=0, hub_api_url=nowhere).refuse_unknown("culled")
    with pytest.raises(web.HTTPError) as refused:
        await RemovedUsers(check_interval_minutes=60, hub_api_url=nowhere).refuse_unknown("bob")
    assert refused.value.status_code == 503
    assert "The Hub could not tell who bob is right now" in refused.value.log_message % refused.value.args
