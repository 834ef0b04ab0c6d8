# The demo's booking service config on a 1-minute grid, so bookings can start and end inside a test.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.environ["E2E_DEMO_DIR"], "gpubooking_config.py"))  # noqa: F821
c.GPUBookingService.slot_minutes = 1
if os.environ.get("E2E_DB_URL"):
    c.GPUBookingService.db_url = os.environ["E2E_DB_URL"]
    c.GPUBookingService.lifecycle_interval_seconds = 1
c.GPUBookingService.default_policy = {"max_minutes": 8 * 60, "max_bookings": 10, "max_gpus": 4}

if os.environ.get("E2E_PROFILE") == "lifecycle":
    # the lifecycle rules on a clock fast enough for a test: a tick a second, minutes not hours
    c.GPUBookingService.lifecycle_interval_seconds = 1
    c.GPUBookingService.end_grace_seconds = 0
    c.GPUBookingService.warn_before_minutes = 1
    c.GPUBookingService.no_show_minutes = 1
    c.GPUBookingService.stopped_release_minutes = 1
    c.GPUBookingService.opportunistic_enabled = True
    c.GPUBookingService.opportunistic_horizon_minutes = 30
