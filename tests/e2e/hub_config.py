# The demo's own jupyterhub_config.py, with the clocks of the end-to-end tests turned up:
# a 1-minute slot grid (so a booking can end within the test), short timeouts, fast polling.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.environ["E2E_DEMO_DIR"], "jupyterhub_config.py"))  # noqa: F821

c.Spawner.poll_interval = 3  # the Hub notices a pod that ended within seconds
c.GPUBookingSpawner.booking_request_timeout = 2
c.GPUBookingSpawner.booking_connect_timeout = 1

service = c.JupyterHub.services[0]
command = list(service["command"])
command[command.index("--config") + 1] = os.path.join(os.path.dirname(__file__), "gpubooking_config.py")
service["command"] = command
service["environment"] = {**service.get("environment", {}), "E2E_DEMO_DIR": os.environ["E2E_DEMO_DIR"]}
if os.environ.get("E2E_DB_URL"):
    service["environment"]["E2E_DB_URL"] = os.environ["E2E_DB_URL"]

if os.environ.get("E2E_PROFILE") == "lifecycle":
    # a far pod deadline (the backstop), so only the service can stop a server at the end;
    # opportunistic pods get a recognisable low priority class
    c.GPUBookingSpawner.pod_deadline_seconds = 24 * 3600
    c.GPUBookingSpawner.opportunistic_priority_class_name = "gpu-opportunistic"
    service["environment"]["E2E_PROFILE"] = "lifecycle"
