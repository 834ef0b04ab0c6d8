"""Pods the webhook admitted, after a restore of the booking database, through the simulated
API server: a real backup and ``db restore``, the service's own webhook and lifecycle tick, real
pods. The pod on a booking the restore took away is deleted (its GPUs are free in the restored
database); the pod on a booking the restore gave back unclaimed gets its claim recorded before
the no-show rule could release the booking under it, and so does one on a booking the restore
gave back held by a server that has stopped since; a pod without GPUs that carries the label is
left alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from admission_fixtures import gpu_pod, running_gpu_pod
from cluster_service import phase, wait_for_phase, webhook_cluster
from pod_commands import SLEEPER

from jhub_gpubooking.core.timegrid import floor_to_grid
from jhub_gpubooking.db.backup import backup_database
from jhub_gpubooking.db.restore import restore_database
from jhub_gpubooking.gpu import BOOKING_ID_KEY


async def test_a_restore_leaves_no_admitted_pod_on_a_booking_it_undid(tmp_path):
    # the service's clock at the real time: the check compares the pods' creation times (the
    # API server's clock) with the bookings'
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start, end = floor_to_grid(now, 15), floor_to_grid(now, 15) + timedelta(hours=2)
    async with webhook_cluster(tmp_path, now) as (core, service):
        store = service.store
        kept = store.create("alice", "a100", 1, start, end)
        backup = tmp_path / "backup.sqlite"
        backup_database(service.db_url, backup)
        # since the backup: a pod claims the kept booking, a new booking and a pod on it
        await core.create_namespaced_pod("alice-jobs", running_gpu_pod("claimed-since"))
        gone = store.create("alice", "a100", 1, start, end)
        await core.create_namespaced_pod("alice-jobs", running_gpu_pod("on-gone"))
        # a pod without GPUs holds nothing, whatever label its creator wrote
        await core.create_namespaced_pod("alice-jobs", gpu_pod(
            {"cpu": "1"}, name="cpu-labelled", labels={BOOKING_ID_KEY: str(gone.id)},
            command=SLEEPER, restartPolicy="Never"))
        for name in ("claimed-since", "on-gone", "cpu-labelled"):
            await wait_for_phase(core, name, {"Running"})
        assert store.get(kept.id).server == "pod:alice-jobs/claimed-since"
        assert store.get(gone.id).server == "pod:alice-jobs/on-gone"

        report = restore_database(backup, service.db_url, tmp_path / "replaced.sqlite")
        assert [line.id for line in report.taken_away] == [gone.id]
        assert [change.restored.id for change in report.taken_back] == [kept.id]
        assert store.get(kept.id).server is None

        # the first tick, past the no-show time of the kept booking
        await service.lifecycle.tick(now + timedelta(minutes=20))
        assert await wait_for_phase(core, "on-gone", {None}) is None
        assert store.get(kept.id).server == "pod:alice-jobs/claimed-since"
        assert store.get(kept.id).end == end  # not released as a no-show
        assert [e.kind for e in store.history(kept.id)] == ["created", "claimed"]
        assert await phase(core, "claimed-since") == "Running"
        assert await phase(core, "cpu-labelled") == "Running"
        metrics = service.metrics.registry
        assert [metrics.get_sample_value("gpubooking_admitted_pod_mismatches_total",
                                         {"finding": finding})
                for finding in ("gone", "unclaimed", "not_active", "other_booking")] == [
            1, 1, None, None]

        # the GPU the deleted pod held is free for the next booking; nothing more to put right
        assert store.create("alice", "a100", 1, start + timedelta(minutes=30), end).placement
        assert await service.webhook.admitted_pods.check(now + timedelta(minutes=21)) == []


async def test_a_pod_on_a_booking_the_backup_has_held_by_a_stopped_server_gets_its_claim(
        tmp_path):
    """alice's server held her booking at the backup; since, it stopped and a pod of hers
    claimed the booking. The restore gives it back held by the server: the first tick expires
    that claim and records the pod's, so the booking never looks free while the pod runs on
    it (CI's SQLite walk: the webhook admitted a second pod on it)."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start, end = floor_to_grid(now, 15), floor_to_grid(now, 15) + timedelta(hours=2)
    async with webhook_cluster(tmp_path, now) as (core, service):
        store = service.store
        booking = store.create("alice", "a100", 1, start, end)
        store.claim(booking.id, "")
        backup = tmp_path / "backup.sqlite"
        backup_database(service.db_url, backup)
        store.release(booking.id, "")
        await core.create_namespaced_pod("alice-jobs", running_gpu_pod("since"))
        await wait_for_phase(core, "since", {"Running"})
        assert store.get(booking.id).server == "pod:alice-jobs/since"

        restore_database(backup, service.db_url, tmp_path / "replaced.sqlite")
        assert store.get(booking.id).server == ""

        async def no_servers(user: str) -> dict:
            return {}  # the Hub: alice's server has stopped

        service.lifecycle.hub_user_servers = no_servers
        await service.lifecycle.tick(now + timedelta(minutes=1))
        assert store.get(booking.id).server == "pod:alice-jobs/since"
        assert [e.kind for e in store.history(booking.id)][-2:] == ["claim_expired", "claimed"]
        assert await phase(core, "since") == "Running"
