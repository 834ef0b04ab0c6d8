"""Benchmarks and the lab-trace simulator of jhub-gpubooking (run from the repository root,
e.g. ``python -m benchmarks.lab_trace --help``). Not part of the installed package."""
