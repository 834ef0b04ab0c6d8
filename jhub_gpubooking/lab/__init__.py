"""JupyterLab side of GPU booking: what a booked GPU server shows its user.

- :mod:`.environment`: the ``GPU_BOOKING_*`` variables the spawner gives a booked GPU server
  for its JupyterLab (the service URL, warning times, poll interval), built and read in one place;
- :mod:`.access`: the Hub side (``c.GPUBookingLabAccess``), which lets a booked server's own
  token reach the booking service;
- :mod:`.status`: the status JSON of the contract with the labextension, from the service's
  answers (pure);
- :mod:`.handlers`: the Jupyter server extension serving ``gpu-booking/status`` and
  ``gpu-booking/extend`` to the labextension.

Importing this package loads neither jupyter_server nor JupyterHub: the Hub imports
:mod:`.environment` and :mod:`.access`, the single-user server :mod:`.handlers`.
"""

from __future__ import annotations


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "jhub_gpubooking.lab.handlers"}]
