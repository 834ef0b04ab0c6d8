"""jhub-gpubooking: book GPUs for time slots and gate JupyterHub GPU servers on the booking."""

from ._version import __version__

__all__ = ["__version__"]
