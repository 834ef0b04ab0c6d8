"""Through a real Hub and proxy: the service backs its database up into the folder the admin
names as soon as it starts, the metric says when, and a restart of the Hub (and with it the
service, as a ``helm upgrade`` does) takes no second backup before the interval is over."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from hub_harness import start_booking_hub, wait_for

from jhub_gpubooking.core.backups import backup_time
from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time

pytestmark = pytest.mark.e2e


def backup_files(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("*") if backup_time(p.name)) if folder.is_dir() else []


def last_backup_metric(hub) -> float:
    with hub.api(hub.user_token("admin")) as admin:
        text = admin.get("metrics").text
    [line] = [line for line in text.splitlines()
              if line.startswith("gpubooking_last_backup_timestamp_seconds ")]
    return float(line.split()[1])


def test_the_service_backs_up_on_its_schedule_across_a_restart(tmp_path):
    folder = tmp_path / "backups"
    config = f"""
c.ScheduledBackups.directory = {str(folder)!r}
c.ScheduledBackups.check_seconds = 0.5
"""
    start = ceil_to_grid(datetime.now(timezone.utc) + timedelta(days=1), 60)
    with start_booking_hub(tmp_path / "hub", extra_service_config=config) as hub:
        wait_for(lambda: backup_files(folder), "the first backup", hub)
        [first] = backup_files(folder)
        assert last_backup_metric(hub) == backup_time(first).timestamp()
        assert "Backed up the booking database to" in hub.service_log()
        with hub.api(hub.user_token("ada")) as ada:
            booked = ada.post("api/bookings", json={
                "pool": "a100", "gpus": 1, "start": format_time(start),
                "end": format_time(start + timedelta(hours=1))})
            assert booked.status_code == 201, booked.text

    with start_booking_hub(tmp_path / "hub", extra_service_config=config) as hub:
        wait_for(lambda: last_backup_metric(hub) > 0, "the metric read from the folder", hub)
        assert last_backup_metric(hub) == backup_time(first).timestamp()
        assert backup_files(folder) == [first]  # the next one is due a day after the first
    with sqlite3.connect(folder / first) as backup:
        assert backup.execute("SELECT count(*) FROM bookings").fetchone() == (0,)
