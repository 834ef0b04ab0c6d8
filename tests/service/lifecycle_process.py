"""One booking service process on a fast clock, for the several-processes lifecycle test.

    python lifecycle_process.py ORIGIN_ISO REAL_ORIGIN FACTOR -- <service arguments>

The clock reads ``ORIGIN + (time.time() - REAL_ORIGIN) * FACTOR``: every process started with
the same three values agrees on "now", and an hour of bookings passes in a minute or less.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta

from jhub_gpubooking.core.clock import Clock
from jhub_gpubooking.service.app import GPUBookingService


class FastClock(Clock):
    def __init__(self, origin: datetime, real_origin: float, factor: float):
        self.origin, self.real_origin, self.factor = origin, real_origin, factor

    def now(self) -> datetime:
        return self.origin + timedelta(seconds=(time.time() - self.real_origin) * self.factor)


def main() -> None:
    origin, real_origin, factor, separator, *service_args = sys.argv[1:]
    assert separator == "--", "usage: lifecycle_process.py ORIGIN REAL_ORIGIN FACTOR -- ARGS"
    clock = FastClock(datetime.fromisoformat(origin), float(real_origin), float(factor))
    GPUBookingService.launch_instance(service_args, clock=clock)


if __name__ == "__main__":
    main()
