"""The GPU translation table: every backend's output, its refusals, and the trait merge."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking import gpu
from jhub_gpubooking.core.model import KNOWN_BACKENDS, Booking, Placement, Pool
from jhub_gpubooking.gpu import (
    BACKENDS,
    GpuRequest,
    PodSettings,
    booking_pod_settings,
    check_pool_backend,
    gpu_request,
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)

WHOLE = Pool(name="v100", nodes={"gpu-a": 4}, backend="whole")
HAMI = Pool(
    name="a100-hami",
    nodes={"gpu-b": 2, "gpu-c": 2},
    slices_per_gpu=4,
    gpu_memory_mib=81920,
    backend="hami",
    gpu_uuids={"gpu-b": ("GPU-b0", "GPU-b1")},
)
MIG = Pool(
    name="a100-mig-1g",
    nodes={"gpu-d": 2},
    slices_per_gpu=7,
    backend="mig",
    resource_name="nvidia.com/mig-1g.10gb",
)
TIME_SLICING = Pool(name="t4-shared", nodes={"gpu-e": 4}, slices_per_gpu=4, backend="time-slicing")
MPS = Pool(
    name="l4-mps",
    nodes={"gpu-f": 2},
    slices_per_gpu=2,
    backend="mps",
    resource_name="nvidia.com/gpu.shared",
)
GPU_MANAGER = Pool(
    name="p100-vcuda", nodes={"gpu-g": 2}, slices_per_gpu=4, gpu_memory_mib=16384,
    backend="gpu-manager",
)
VOLCANO = Pool(
    name="a10-vgpu", nodes={"gpu-h": 4}, slices_per_gpu=2, gpu_memory_mib=24576,
    backend="volcano",
)

# a lab's own backend (tests/test_gpu_custom_backends.py registers one under this name)
CUSTOM = Pool(name="custom", nodes={"n": 1}, slices_per_gpu=2, backend="lab")


def on(node: str, *gpus: int, slices: int = 1) -> Placement:
    return Placement(node=node, gpus=tuple(gpus), slices=slices)


# (pool, amount, placement) -> expected GpuRequest: each backend × fraction, whole, multi-GPU
TRANSLATIONS = {
    "whole-1": (WHOLE, Fraction(1), on("gpu-a", 2), GpuRequest({"nvidia.com/gpu": 1})),
    "whole-3": (WHOLE, Fraction(3), on("gpu-a", 0, 1, 3), GpuRequest({"nvidia.com/gpu": 3})),
    "hami-quarter-pinned": (
        HAMI, Fraction(1, 4), on("gpu-b", 1),
        GpuRequest(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20480, "nvidia.com/gpucores": 25},
            annotations={"nvidia.com/use-gpuuuid": "GPU-b1"},
        ),
    ),
    "hami-three-quarters-unpinned": (
        HAMI, Fraction(3, 4), on("gpu-c", 0, slices=3),
        GpuRequest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 61440, "nvidia.com/gpucores": 75}),
    ),
    "hami-whole": (
        HAMI, Fraction(1), on("gpu-b", 0, slices=4),
        GpuRequest(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 81920, "nvidia.com/gpucores": 100},
            annotations={"nvidia.com/use-gpuuuid": "GPU-b0"},
        ),
    ),
    "hami-two-pinned": (
        HAMI, Fraction(2), on("gpu-b", 0, 1, slices=4),
        GpuRequest(
            {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 81920, "nvidia.com/gpucores": 100},
            annotations={"nvidia.com/use-gpuuuid": "GPU-b0,GPU-b1"},
        ),
    ),
    "mig-one-slice": (
        MIG, Fraction(1, 7), on("gpu-d", 0), GpuRequest({"nvidia.com/mig-1g.10gb": 1}),
    ),
    "mig-three-slices": (
        MIG, Fraction(3, 7), on("gpu-d", 1, slices=3), GpuRequest({"nvidia.com/mig-1g.10gb": 3}),
    ),
    "mig-whole": (
        MIG, Fraction(1), on("gpu-d", 0, slices=7), GpuRequest({"nvidia.com/mig-1g.10gb": 7}),
    ),
    "mig-two": (
        MIG, Fraction(2), on("gpu-d", 0, 1, slices=7), GpuRequest({"nvidia.com/mig-1g.10gb": 14}),
    ),
    "time-slicing-half": (
        TIME_SLICING, Fraction(1, 2), on("gpu-e", 3, slices=2), GpuRequest({"nvidia.com/gpu": 2}),
    ),
    "time-slicing-whole": (
        TIME_SLICING, Fraction(1), on("gpu-e", 0, slices=4), GpuRequest({"nvidia.com/gpu": 4}),
    ),
    "time-slicing-two": (
        TIME_SLICING, Fraction(2), on("gpu-e", 0, 1, slices=4), GpuRequest({"nvidia.com/gpu": 8}),
    ),
    "mps-half-renamed": (
        MPS, Fraction(1, 2), on("gpu-f", 1), GpuRequest({"nvidia.com/gpu.shared": 1}),
    ),
    "mps-whole": (
        MPS, Fraction(1), on("gpu-f", 0, slices=2), GpuRequest({"nvidia.com/gpu.shared": 2}),
    ),
    "mps-two": (
        MPS, Fraction(2), on("gpu-f", 0, 1, slices=2), GpuRequest({"nvidia.com/gpu.shared": 4}),
    ),
    "gpu-manager-quarter": (
        GPU_MANAGER, Fraction(1, 4), on("gpu-g", 0),
        GpuRequest(
            {"tencent.com/vcuda-core": 25, "tencent.com/vcuda-memory": 16},
            annotations={"tencent.com/vcuda-core-limit": "25"},
        ),
    ),
    "gpu-manager-whole": (
        GPU_MANAGER, Fraction(1), on("gpu-g", 1, slices=4),
        GpuRequest(
            {"tencent.com/vcuda-core": 100, "tencent.com/vcuda-memory": 64},
            annotations={"tencent.com/vcuda-core-limit": "100"},
        ),
    ),
    "gpu-manager-two": (
        GPU_MANAGER, Fraction(2), on("gpu-g", 0, 1, slices=4),
        GpuRequest(
            {"tencent.com/vcuda-core": 200, "tencent.com/vcuda-memory": 128},
            annotations={"tencent.com/vcuda-core-limit": "200"},
        ),
    ),
    "volcano-half": (
        VOLCANO, Fraction(1, 2), on("gpu-h", 2),
        GpuRequest(
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 12288,
             "volcano.sh/vgpu-cores": 50},
            scheduler_name="volcano",
        ),
    ),
    "volcano-whole": (
        VOLCANO, Fraction(1), on("gpu-h", 0, slices=2),
        GpuRequest(
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 24576,
             "volcano.sh/vgpu-cores": 100},
            scheduler_name="volcano",
        ),
    ),
    "volcano-three": (
        VOLCANO, Fraction(3), on("gpu-h", 0, 1, 2, slices=2),
        GpuRequest(
            {"volcano.sh/vgpu-number": 3, "volcano.sh/vgpu-memory": 24576,
             "volcano.sh/vgpu-cores": 100},
            scheduler_name="volcano",
        ),
    ),
}


@pytest.mark.parametrize("case", TRANSLATIONS, ids=str)
def test_backend_translation(case):
    pool, amount, placement, expected = TRANSLATIONS[case]
    assert gpu_request(pool, amount, placement) == expected


def test_table_covers_every_backend_a_pool_may_name():
    assert set(BACKENDS) == set(KNOWN_BACKENDS)
    assert {TRANSLATIONS[case][0].backend for case in TRANSLATIONS} == set(KNOWN_BACKENDS)


def test_renamed_whole_gpu_resource():
    pool = Pool(name="h100", nodes={"n": 8}, resource_name="nvidia.com/h100")
    assert gpu_request(pool, Fraction(4), on("n", 0, 1, 2, 3)) == GpuRequest({"nvidia.com/h100": 4})


def test_hami_rounds_thirds_down():
    pool = Pool(
        name="thirds", nodes={"n": 1}, slices_per_gpu=3, gpu_memory_mib=40000, backend="hami"
    )
    assert gpu_request(pool, Fraction(1, 3), on("n", 0)) == GpuRequest(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 13333, "nvidia.com/gpucores": 33}
    )


def test_hami_without_placement_does_not_pin():
    assert gpu_request(HAMI, Fraction(1, 2), None).annotations == {}


def test_gpu_manager_memory_is_at_least_one_block():
    pool = Pool(name="tiny", nodes={"n": 1}, slices_per_gpu=4, gpu_memory_mib=300,
                backend="gpu-manager")
    assert gpu_request(pool, Fraction(1, 4), on("n", 0)).resources == {
        "tencent.com/vcuda-core": 25,
        "tencent.com/vcuda-memory": 1,
    }


@pytest.mark.parametrize(
    "pool, amount, placement, message",
    [
        (WHOLE, Fraction(1, 2), on("gpu-a", 0), "hands out whole GPUs only"),
        (WHOLE, Fraction(0), on("gpu-a", 0), "more than zero GPUs"),
        (HAMI, Fraction(-1, 4), on("gpu-b", 0), "more than zero GPUs"),
        (HAMI, Fraction(3, 2), on("gpu-b", 0, 1), "must be a whole number"),
        (MIG, Fraction(1, 2), on("gpu-d", 0), "is not bookable here"),
        (TIME_SLICING, Fraction(1, 3), on("gpu-e", 0), "is not bookable here"),
        (HAMI, Fraction(1, 4), on("gpu-b", 5), "has no GPU 5 on node gpu-b"),
        (Pool(name="m", nodes={"n": 1}, backend="mig"), Fraction(1), on("n", 0),
         "needs 'resource_name'"),
        (Pool(name="h", nodes={"n": 1}, backend="hami"), Fraction(1), on("n", 0),
         "set 'gpu_memory_mib'"),
        (Pool(name="g", nodes={"n": 1}, backend="gpu-manager"), Fraction(1), on("n", 0),
         "set 'gpu_memory_mib'"),
        (Pool(name="v", nodes={"n": 1}, backend="volcano"), Fraction(1), on("n", 0),
         "set 'gpu_memory_mib'"),
        (Pool(name="x", nodes={"n": 1}, backend="dra"), Fraction(1), on("n", 0),
         "backend 'dra', which is not known"),
    ],
)
def test_invalid_inputs_are_refused_with_a_sentence(pool, amount, placement, message):
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        gpu_request(pool, amount, placement)
    assert str(refused.value).endswith(".")


def test_check_pool_backend_catches_a_whole_pool_split_into_slices():
    check_pool_backend(HAMI)
    with pytest.raises(ValueError, match="whole GPUs only"):
        check_pool_backend(Pool(name="split", nodes={"n": 1}, slices_per_gpu=2))


# --- pod settings ------------------------------------------------------------------------


def booking(pool: Pool, amount: Fraction, placement: Placement | None, **changes) -> Booking:
    values = dict(
        user="ada", pool=pool.name, amount=amount, start=NOW,
        end=NOW + timedelta(hours=2), placement=placement, id=41,
    )
    values.update(changes)
    return Booking(**values)


def test_pod_settings_of_a_hami_quarter():
    pool = Pool(
        name="a100-hami", nodes={"gpu-b": 2}, slices_per_gpu=4, gpu_memory_mib=81920,
        backend="hami", gpu_uuids={"gpu-b": ("GPU-b0", "GPU-b1")},
        node_selector={"nvidia.com/gpu.product": "A100-SXM4-80GB"},
    )
    settings = booking_pod_settings(
        pool, booking(pool, Fraction(1, 4), on("gpu-b", 1)),
        grace_seconds=300, now=NOW + timedelta(minutes=30), priority_class_name="gpu-booked",
    )
    quantities = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "25"}
    assert settings == PodSettings(
        extra_resource_limits=quantities,
        extra_resource_guarantees=quantities,
        node_selector={
            "nvidia.com/gpu.product": "A100-SXM4-80GB",
            "kubernetes.io/hostname": "gpu-b",
        },
        extra_labels={
            "gpubooking.jupyter.org/booking-id": "41",
            "gpubooking.jupyter.org/pool": "a100-hami",
        },
        extra_annotations={
            "nvidia.com/use-gpuuuid": "GPU-b1",
            "gpubooking.jupyter.org/booking-id": "41",
            "gpubooking.jupyter.org/pool": "a100-hami",
            "gpubooking.jupyter.org/gpus": "0.25",
            "gpubooking.jupyter.org/end": "2026-03-02T11:00:00Z",
            "gpubooking.jupyter.org/gpu-indices": "1",
        },
        environment={
            "GPU_BOOKING_ID": "41",
            "GPU_BOOKING_END": "2026-03-02T11:00:00Z",
            "GPU_BOOKING_POOL": "a100-hami",
            "GPU_BOOKING_GPUS": "0.25",
        },
        # 1 h 30 min left plus 5 min grace
        extra_pod_config={"activeDeadlineSeconds": 5700},
        priority_class_name="gpu-booked",
    )


def test_pod_settings_of_volcano_name_the_scheduler():
    settings = booking_pod_settings(
        VOLCANO, booking(VOLCANO, Fraction(2), on("gpu-h", 0, 1, slices=2)),
        grace_seconds=0, now=NOW,
    )
    assert settings.extra_pod_config == {"activeDeadlineSeconds": 7200, "schedulerName": "volcano"}
    assert settings.extra_resource_limits == {
        "volcano.sh/vgpu-number": "2",
        "volcano.sh/vgpu-memory": "24576",
        "volcano.sh/vgpu-cores": "100",
    }
    assert settings.priority_class_name is None


def test_backend_env_reaches_the_server_but_cannot_fake_the_booking():
    def backend(pool, amount, placement):
        return GpuRequest({"example.org/gpu": 1}, env={"LAB": "x", "GPU_BOOKING_ID": "999"})

    settings = booking_pod_settings(
        CUSTOM, booking(CUSTOM, Fraction(1), on("n", 0, slices=2)),
        grace_seconds=0, now=NOW, backends={"lab": backend},
    )
    assert settings.environment["LAB"] == "x"
    assert settings.environment["GPU_BOOKING_ID"] == "41"


@pytest.mark.parametrize(
    "now, expected",
    [
        (NOW, 7260),
        (NOW + timedelta(hours=2, seconds=59), 1),
        (NOW + timedelta(hours=5), 1),  # already over: the pod stops at once, never "no deadline"
        (NOW + timedelta(microseconds=500_000), 7260),  # part seconds round up, never cut grace
    ],
)
def test_active_deadline_counts_from_the_given_now(now, expected):
    settings = booking_pod_settings(
        WHOLE, booking(WHOLE, Fraction(1), on("gpu-a", 0)), grace_seconds=60, now=now
    )
    assert settings.extra_pod_config == {"activeDeadlineSeconds": expected}


def test_a_far_end_never_gives_a_deadline_kubernetes_rejects():
    far = booking(WHOLE, Fraction(1), on("gpu-a", 0)).with_changes(end=NOW + timedelta(days=36500))
    settings = booking_pod_settings(WHOLE, far, grace_seconds=60, now=NOW)
    assert settings.extra_pod_config == {"activeDeadlineSeconds": 2**31 - 1}


@pytest.mark.parametrize(
    "deadline_seconds, expected",
    [(0, {}), (86400, {"activeDeadlineSeconds": 86400}),
     (2**40, {"activeDeadlineSeconds": 2**31 - 1})],
)
def test_the_spawners_backstop_deadline_ignores_the_booking_end(deadline_seconds, expected):
    settings = booking_pod_settings(
        WHOLE, booking(WHOLE, Fraction(1), on("gpu-a", 0)), grace_seconds=None, now=NOW,
        deadline_seconds=deadline_seconds,
    )
    assert settings.extra_pod_config == expected


def test_no_grace_and_no_backstop_means_no_deadline():
    settings = booking_pod_settings(
        WHOLE, booking(WHOLE, Fraction(1), on("gpu-a", 0)), grace_seconds=None, now=NOW
    )
    assert settings.extra_pod_config == {}


def test_label_values_are_valid_kubernetes_label_values():
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    long_pool = Pool(name="p" * 63, nodes={"n": 1})
    settings = booking_pod_settings(
        long_pool, booking(long_pool, Fraction(1), on("n", 0), id=2**40), grace_seconds=0, now=NOW
    )
    for value in settings.extra_labels.values():
        assert len(value) <= 63 and label_value.match(value)


@pytest.mark.parametrize(
    "changes, kwargs, message",
    [
        ({"pool": "other"}, {}, "is for pool other, not v100"),
        ({"id": None}, {}, "one with an id"),
        ({"placement": None}, {}, "no GPU placement"),
        ({}, {"grace_seconds": -1}, "whole seconds >= 0"),
        ({}, {"grace_seconds": 1.5}, "whole seconds >= 0"),
    ],
)
def test_pod_settings_refusals(changes, kwargs, message):
    arguments = {"grace_seconds": 0, "now": NOW, **kwargs}
    with pytest.raises(ValueError, match=message):
        booking_pod_settings(
            WHOLE, booking(WHOLE, Fraction(1), on("gpu-a", 0)).with_changes(**changes), **arguments
        )


def test_limits_and_guarantees_must_match():
    with pytest.raises(ValueError, match="must be equal"):
        PodSettings({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}, {}, {}, {}, {}, {})


# --- merging into what KubeSpawner already has -------------------------------------------


def hami_settings() -> PodSettings:
    return booking_pod_settings(
        HAMI, booking(HAMI, Fraction(1, 2), on("gpu-b", 0, slices=2)), grace_seconds=60, now=NOW
    )


PROFILE_TRAITS = {
    "extra_resource_limits": {"nvidia.com/gpu": "4", "hugepages-2Mi": "1Gi"},
    "extra_resource_guarantees": {"nvidia.com/gpu": "4", "hugepages-2Mi": "1Gi"},
    "node_selector": {"cloud.example.org/pool": "gpu", "kubernetes.io/hostname": "elsewhere"},
    "extra_labels": {"team": "ml", "gpubooking.jupyter.org/booking-id": "7"},
    "extra_annotations": {
        "owner": "{username}",
        "nvidia.com/use-gpuuuid": "GPU-c1",
        "gpubooking.jupyter.org/end": "2026-01-01T00:00:00Z",
    },
    "environment": {"OMP_NUM_THREADS": "4", "GPU_BOOKING_ID": "7", "GPU_BOOKING_OLD": "x"},
    "extra_pod_config": {"tolerations": [{"key": "gpu", "operator": "Exists"}],
                         "activeDeadlineSeconds": 10},
    "priority_class_name": "default-users",
}


def test_merge_keeps_the_spawners_keys_and_replaces_what_only_a_booking_decides():
    merged = hami_settings().merged_into(PROFILE_TRAITS)
    share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960", "nvidia.com/gpucores": "50"}
    assert merged == {
        # the profile's own GPU count is dropped: only the booking sets the share
        "extra_resource_limits": {"hugepages-2Mi": "1Gi", **share},
        "extra_resource_guarantees": {"hugepages-2Mi": "1Gi", **share},
        "node_selector": {"cloud.example.org/pool": "gpu", "kubernetes.io/hostname": "gpu-b"},
        "extra_labels": {
            "team": "ml",
            "gpubooking.jupyter.org/booking-id": "41",
            "gpubooking.jupyter.org/pool": "a100-hami",
        },
        "extra_annotations": {
            "owner": "{username}",
            "nvidia.com/use-gpuuuid": "GPU-b0",
            "gpubooking.jupyter.org/booking-id": "41",
            "gpubooking.jupyter.org/pool": "a100-hami",
            "gpubooking.jupyter.org/gpus": "0.5",
            "gpubooking.jupyter.org/end": "2026-03-02T11:00:00Z",
            "gpubooking.jupyter.org/gpu-indices": "0",
        },
        "environment": {
            "OMP_NUM_THREADS": "4",
            "GPU_BOOKING_ID": "41",
            "GPU_BOOKING_END": "2026-03-02T11:00:00Z",
            "GPU_BOOKING_POOL": "a100-hami",
            "GPU_BOOKING_GPUS": "0.5",
        },
        "extra_pod_config": {
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "activeDeadlineSeconds": 7260,
        },
        "priority_class_name": "default-users",
    }


def test_merge_does_not_change_its_input():
    before = {name: dict(value) if isinstance(value, dict) else value
              for name, value in PROFILE_TRAITS.items()}
    hami_settings().merged_into(PROFILE_TRAITS)
    assert before == PROFILE_TRAITS


def test_merge_into_empty_traits_is_the_settings_themselves():
    settings = hami_settings()
    merged = settings.merged_into({})
    assert merged == {
        "extra_resource_limits": settings.extra_resource_limits,
        "extra_resource_guarantees": settings.extra_resource_guarantees,
        "node_selector": settings.node_selector,
        "extra_labels": settings.extra_labels,
        "extra_annotations": settings.extra_annotations,
        "environment": settings.environment,
        "extra_pod_config": settings.extra_pod_config,
        "priority_class_name": "",
    }


def test_merge_unpinned_booking_drops_a_profiles_gpu_pin():
    settings = booking_pod_settings(
        HAMI, booking(HAMI, Fraction(1, 2), on("gpu-c", 0, slices=2)), grace_seconds=0, now=NOW
    )
    merged = settings.merged_into({"extra_annotations": {"nvidia.com/use-gpuuuid": "GPU-c1"}})
    assert "nvidia.com/use-gpuuuid" not in merged["extra_annotations"]


def test_merge_escapes_braces_kubespawner_would_expand():
    def backend(pool, amount, placement):
        return GpuRequest({"example.org/gpu": 1}, annotations={"example.org/spec": '{"mem": 1}'})

    settings = booking_pod_settings(
        CUSTOM, booking(CUSTOM, Fraction(1), on("n", 0, slices=2)),
        grace_seconds=0, now=NOW, backends={"lab": backend},
    )
    assert settings.extra_annotations["example.org/spec"] == '{"mem": 1}'
    merged = settings.merged_into({})
    assert merged["extra_annotations"]["example.org/spec"] == '{{"mem": 1}}'


def test_apply_to_sets_the_merged_traits():
    class SpawnerLike:
        pass

    spawner = SpawnerLike()
    for name, value in PROFILE_TRAITS.items():
        setattr(spawner, name, value)
    settings = hami_settings()
    settings.apply_to(spawner)
    expected = settings.merged_into(PROFILE_TRAITS)
    assert {name: getattr(spawner, name) for name in expected} == expected


@pytest.mark.parametrize(
    ("pool", "gap"),
    [
        (WHOLE, None),
        (MIG, None),
        (Pool(name="h", nodes={"gpu-b": 2}, slices_per_gpu=4, backend="hami",
              gpu_uuids={"gpu-b": ("GPU-b0", "GPU-b1")}), None),
        (Pool(name="h1", nodes={"gpu-b": 2}, slices_per_gpu=1, backend="hami"), None),
        (HAMI, ("Pool a100-hami (HAMi) has no GPU UUIDs for node(s) gpu-c, so HAMi may place a "
                "booked share on another GPU than the booking holds and a booked whole GPU may "
                "stay Pending; set the pool's gpu_uuids, or turn on inventory_from_nodes or "
                "gpu_uuids_from_nodes to read them from HAMi's node annotation.")),
        (Pool(name="ts", nodes={"n": 2}, slices_per_gpu=4, backend="time-slicing"),
         ("Pool ts (time-slicing) cannot pin a share to the GPU its booking holds, so shares "
          "may spread over a node's GPUs and a booked whole GPU may stay Pending; book whole "
          "GPUs from it only, or use HAMi with GPU UUIDs.")),
    ],
    ids=["whole", "mig", "hami-pinned", "hami-whole-only", "hami-unpinned", "time-slicing"],
)
def test_pinning_gap_names_pools_whose_shares_cannot_be_pinned(pool, gap):
    assert gpu.pinning_gap(pool) == gap


def test_hami_pins_a_whole_booked_gpu_and_each_share_to_its_uuid():
    quarter = gpu_request(HAMI, Fraction(1, 4), Placement("gpu-b", (1,), 1))
    whole = gpu_request(HAMI, Fraction(1), Placement("gpu-b", (0,), 4))
    assert quarter.annotations == {"nvidia.com/use-gpuuuid": "GPU-b1"}
    assert whole.annotations == {"nvidia.com/use-gpuuuid": "GPU-b0"}
    # a node without UUIDs is not pinned (and pinning_gap warns at start)
    assert gpu_request(HAMI, Fraction(1), Placement("gpu-c", (0,), 4)).annotations == {}


@pytest.mark.parametrize(("labels", "booking_id"), [
    ({gpu.BOOKING_ID_KEY: "42"}, 42),
    ({gpu.BOOKING_ID_KEY: 42}, 42),
    ({gpu.BOOKING_ID_KEY: ""}, None),
    ({gpu.BOOKING_ID_KEY: "-3"}, None),
    ({gpu.BOOKING_ID_KEY: "４２"}, None),  # full-width digits pass str.isdigit, not a label
    ({gpu.BOOKING_ID_KEY: "²"}, None),  # would pass str.isdigit and make int() raise
    ({"app": "jupyterhub"}, None),
    (None, None),
])
def test_labelled_booking_reads_only_a_decimal_booking_id(labels, booking_id):
    assert gpu.labelled_booking(labels) == booking_id
