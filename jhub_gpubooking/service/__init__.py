"""The hub-managed booking service: REST API, reservation page, iCal feeds and metrics.

Start it with ``jhub-gpubooking-service`` (see :class:`.app.GPUBookingService`).
"""
