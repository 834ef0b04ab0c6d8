"""One booking service process on a fast clock, for the several-processes lifecycle test.

    python lifecycle_process.py ORIGIN_ISO START_FILE FACTOR -- <service arguments>

Until START_FILE exists the clock stands an hour before ORIGIN (nothing is due yet), so slow
process starts cannot skip a rule; the test writes the real start time into START_FILE once
every process listens. Then the clock reads ``ORIGIN + (time.time() - start) * FACTOR``: all
processes agree on "now", and an hour of bookings passes in a minute or less.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from jhub_gpubooking.core.clock import Clock
from jhub_gpubooking.service.app import GPUBookingService


class FastClock(Clock):
    def __init__(self, origin: datetime, start_file: Path, factor: float):
        self.origin, self.start_file, self.factor = origin, start_file, factor
        self.real_origin: float | None = None

    def now(self) -> datetime:
        if self.real_origin is None:
            try:
                self.real_origin = float(self.start_file.read_text())
            except (FileNotFoundError, ValueError):
                return self.origin - timedelta(hours=1)
        return self.origin + timedelta(seconds=(time.time() - self.real_origin) * self.factor)


def main() -> None:
    origin, start_file, factor, separator, *service_args = sys.argv[1:]
    assert separator == "--", "usage: lifecycle_process.py ORIGIN START_FILE FACTOR -- ARGS"
    clock = FastClock(datetime.fromisoformat(origin), Path(start_file), float(factor))
    GPUBookingService.launch_instance(service_args, clock=clock)


if __name__ == "__main__":
    main()
