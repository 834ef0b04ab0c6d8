"""Fixtures for the admission tests; plain helpers live in admission_fixtures.py."""

from admission_fixtures import pools  # noqa: F401 (a fixture, found by pytest by name)
