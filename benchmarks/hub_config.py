# The demo's Hub (demo/jupyterhub_config.py) for api_throughput.py, with the booking service on
# the database named by $BENCH_BOOKING_DB_URL (SQLite or PostgreSQL).
import os

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
here = os.path.dirname(os.path.abspath(__file__))
load_subconfig(os.path.join(here, "..", "demo", "jupyterhub_config.py"))  # noqa: F821

booking_service = c.JupyterHub.services[0]
# the command line wins over the service's config file
booking_service["command"] = [
    *booking_service["command"], "--db-url", os.environ["BENCH_BOOKING_DB_URL"],
]
