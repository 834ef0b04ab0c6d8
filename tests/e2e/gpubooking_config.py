# The demo's booking service config on a 1-minute grid, so bookings can start and end inside a test.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.environ["E2E_DEMO_DIR"], "gpubooking_config.py"))  # noqa: F821
c.GPUBookingService.slot_minutes = 1
c.GPUBookingService.default_policy = {"max_minutes": 8 * 60, "max_bookings": 10, "max_gpus": 4}
