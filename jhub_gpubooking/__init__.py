"""jhub-gpubooking: book GPUs for time slots and gate JupyterHub GPU servers on the booking."""

from ._version import __version__

__all__ = ["__version__", "configure"]


def __getattr__(name: str):
    # jhub_gpubooking.configure imports jupyterhub: load it on first use, in the Hub's config,
    # not in every process that imports the package (the service, the CLI, the core)
    if name == "configure":
        from .hub_config import configure

        return configure
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
