# Configuration of the GPU booking service for the demo (loaded with --config).
# In a real installation this file lives next to jupyterhub_config.py (z2jh: hub.extraFiles).
import os

c = get_config()  # noqa: F821 (provided by traitlets when the file is loaded)

state_dir = os.environ.get("DEMO_STATE_DIR", ".demo")

c.GPUBookingService.db_url = f"sqlite:///{os.path.join(state_dir, 'gpubooking.sqlite')}"
c.GPUBookingService.upgrade_db = True  # create or migrate the demo's database at start
c.GPUBookingService.slot_minutes = 15
c.ReservationPage.page_days = 3

# A fractional pool (HAMi: each A100 shared in quarters) on two nodes of 4 GPUs,
# and a pool of whole L4 GPUs. The node names match the simulated cluster's nodes.
c.GPUBookingService.pools = [
    {
        "name": "a100",
        "display_name": "A100 (shared in quarters)",
        "gpu_model": "NVIDIA A100-SXM4-40GB",
        "gpu_memory_mib": 40960,
        "slices_per_gpu": 4,
        "backend": "hami",
        "nodes": {"gpu-a100-1": 4, "gpu-a100-2": 4},
        # each GPU's UUID (`nvidia-smi -L`), so a booked share is pinned to the booked GPU
        # (HAMi's nvidia.com/use-gpuuuid); the simulated cluster's GPUs are made up
        "gpu_uuids": {
            node: [f"GPU-{node[-1]}{index}a10000-0000-4000-8000-000000000000" for index in range(4)]
            for node in ("gpu-a100-1", "gpu-a100-2")
        },
    },
    {
        "name": "l4",
        "display_name": "L4 (whole GPUs)",
        "gpu_model": "NVIDIA L4",
        "gpu_memory_mib": 23034,
        "slices_per_gpu": 1,
        "backend": "whole",
        "nodes": {"gpu-l4-1": 2},
    },
]

# Everyone may book up to 8 hours, up to a week ahead, two bookings at a time;
# members of the "course" group get longer bookings.
c.GPUBookingService.default_policy = {
    "max_minutes": 8 * 60,
    "max_days_ahead": 7,
    "max_bookings": 2,
    "max_gpus": 2,
}
c.GPUBookingService.group_policies = {
    "course": {"max_minutes": 12 * 60},
}
