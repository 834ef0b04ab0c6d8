# The demo's own jupyterhub_config.py, with the clocks of the end-to-end tests turned up:
# a 1-minute slot grid (so a booking can end within the test), short timeouts, fast polling.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.environ["E2E_DEMO_DIR"], "jupyterhub_config.py"))  # noqa: F821

c.Spawner.poll_interval = 3  # the Hub notices a pod that ended within seconds
c.GPUBookingSpawner.booking_request_timeout = 2
c.GPUBookingSpawner.booking_connect_timeout = 1
if os.environ.get("E2E_PROFILE") != "soak":
    # a GPU start asks a booking service that cannot answer (restarting, database down) again
    # for 20 s, not 45: the outage test holds the database down past it to meet the refusal.
    # The soak profile (crashes, restarts of a busy machine's service) keeps the default.
    c.GPUBookingSpawner.booking_request_retry_timeout = 20
c.GPUBookingLabAccess.poll_seconds = 2  # booked servers' JupyterLab follows booking changes within seconds

service = c.JupyterHub.services[0]
command = list(service["command"])
command[command.index("--config") + 1] = os.path.join(os.path.dirname(__file__), "gpubooking_config.py")
service["command"] = command
service["environment"] = {**service.get("environment", {}), "E2E_DEMO_DIR": os.environ["E2E_DEMO_DIR"]}
if os.environ.get("E2E_DB_URL"):
    service["environment"]["E2E_DB_URL"] = os.environ["E2E_DB_URL"]

if os.environ.get("E2E_PROFILE") in ("lifecycle", "soak"):
    # a far pod deadline (the backstop), so only the service can stop a server at the end;
    # opportunistic pods get a recognisable low priority class
    c.GPUBookingSpawner.pod_deadline_seconds = 24 * 3600
    c.GPUBookingSpawner.opportunistic_priority_class_name = "gpu-opportunistic"
    service["environment"]["E2E_PROFILE"] = os.environ["E2E_PROFILE"]

if os.environ.get("E2E_PROFILE") == "soak":
    # servers outlive a Hub restart (as on z2jh)
    c.JupyterHub.cleanup_servers = False
    # a start and a stop answer at once (202): the soak watches each outcome through the Hub's
    # API instead of waiting on the request
    c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0, "slow_stop_timeout": 0}
    # after a restart the Hub serves while it checks the servers it left running (a start cut
    # short by the restart waits up to Spawner.http_timeout for a server that never answers)
    c.JupyterHub.init_spawners_timeout = 1
    # The Hub notices that a managed service exited (and starts it again) when it polls the
    # service's process, every poll_interval of the spawner it runs services with. That spawner
    # takes no config, so its 30 s are set here: the soak's service restart takes seconds, not
    # up to half a minute of waiting on the poll.
    from jupyterhub.services import service as hub_services
    from traitlets import Integer

    class PolledServiceSpawner(hub_services._ServiceSpawner):
        poll_interval = Integer(1)

    hub_services._ServiceSpawner = PolledServiceSpawner
    for name in ("E2E_WEBHOOK_PORT", "E2E_GATED_NAMESPACES"):
        service["environment"][name] = os.environ[name]
