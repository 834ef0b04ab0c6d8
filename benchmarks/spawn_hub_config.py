# The demo's Hub (demo/jupyterhub_config.py) for spawn_overhead.py. $BENCH_SPAWNER chooses the
# spawner: "gated" keeps GPUBookingSpawner; "plain" is KubeSpawner whose A100 profile carries, as
# static overrides, the pod settings a quarter-A100 booking gives, so both start the same pod and
# only the booking check differs. Both Hubs keep the booking service, so they carry the same load.
import copy
import os
from datetime import datetime, timedelta, timezone
from fractions import Fraction

from traitlets.config.loader import PyFileConfigLoader

from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.gpu import booking_pod_settings

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
demo_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo")
load_subconfig(os.path.join(demo_dir, "jupyterhub_config.py"))  # noqa: F821

if os.environ["BENCH_SPAWNER"] == "plain":
    service_config = PyFileConfigLoader("gpubooking_config.py", path=demo_dir).load_config()
    a100 = Pool.from_config(
        next(pool for pool in service_config.GPUBookingService.pools if pool["name"] == "a100")
    )
    now = datetime.now(timezone.utc)
    # the booking spawn_overhead.py makes for the gated user: a quarter A100 for 8 hours,
    # placed (best fit, empty pool) on the first GPU of the first node
    quarter = Booking(
        user="bench-plain", pool="a100", amount=Fraction(1, 4), id=1, start=now,
        end=now + timedelta(hours=8), placement=Placement("gpu-a100-1", (0,), 1),
    )
    booked = booking_pod_settings(
        a100, quarter, now=now, grace_seconds=None,
        deadline_seconds=c.GPUBookingSpawner.pod_deadline_seconds,
    ).merged_into({})
    profiles = copy.deepcopy(c.KubeSpawner.profile_list)
    for profile in profiles:
        if profile.pop("gpu_pool", None) == "a100":
            profile["kubespawner_override"] = {**profile["kubespawner_override"], **booked}
    c.KubeSpawner.profile_list = profiles
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
