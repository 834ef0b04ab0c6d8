# The demo's booking service config on a 1-minute grid, so bookings can start and end inside a test.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.environ["E2E_DEMO_DIR"], "gpubooking_config.py"))  # noqa: F821
c.GPUBookingService.slot_minutes = 1
if os.environ.get("E2E_DB_URL"):
    c.GPUBookingService.db_url = os.environ["E2E_DB_URL"]
    c.Lifecycle.lifecycle_interval_seconds = 1
c.GPUBookingService.default_policy = {"max_minutes": 8 * 60, "max_bookings": 10, "max_gpus": 4}

if os.environ.get("E2E_PROFILE") in ("lifecycle", "soak"):
    # the lifecycle rules on a clock fast enough for a test: a tick a second, minutes not hours
    c.Lifecycle.lifecycle_interval_seconds = 1
    c.Lifecycle.end_grace_seconds = 0
    c.Lifecycle.warn_before_minutes = 1
    c.Lifecycle.no_show_minutes = 1
    c.Lifecycle.stopped_release_minutes = 1
    c.Opportunistic.opportunistic_enabled = True
    c.Opportunistic.opportunistic_horizon_minutes = 30

if os.environ.get("E2E_PROFILE") == "soak":
    # the lifecycle soak (tests/e2e/soak.py): a script writes far faster than a person clicks,
    # and pods made outside the Hub in gated namespaces go through the service's webhook
    c.GPUBookingService.write_rate_per_minute = 0
    c.AdmissionWebhook.webhook_port = int(os.environ["E2E_WEBHOOK_PORT"])
    c.AdmissionWebhook.webhook_address = "127.0.0.1"
    owners = dict(item.split("=") for item in os.environ["E2E_GATED_NAMESPACES"].split(","))
    c.AdmissionWebhook.webhook_namespaces = list(owners)
    c.AdmissionWebhook.namespace_owners = owners
    c.ClusterAccess.kubeconfig = os.path.join(os.environ["DEMO_STATE_DIR"], "kubeconfig")
    # a start pending when the walk restarts the Hub leaves a pod the Hub forgets: the sweep
    # deletes it at the first tick, before claims are taken (jhub_gpubooking.cluster.orphans);
    # a pod of a server the Hub stopped late goes once its booking is over, well within the
    # soak's slack (the Hub's own stops take a few seconds here)
    # the service's own backups, one a minute (checked by soak_backup.py)
    c.ScheduledBackups.directory = os.path.join(os.environ["DEMO_STATE_DIR"], "scheduled-backups")
    c.ScheduledBackups.interval_hours = 1 / 60
    c.ScheduledBackups.keep = 3
    c.ScheduledBackups.check_seconds = 5
    c.ScheduledBackups.retry_minutes = 0.5
    # the Hub's servers against their bookings every 6 s, through restarts and pending starts
    # ("servers stop only when their booking ends" fails on a wrongful stop)
    c.HubServers.check_interval_minutes = 0.1
    c.OrphanPods.hub_namespace = "jhub-demo"
    c.OrphanPods.orphan_pod_seconds = 15
