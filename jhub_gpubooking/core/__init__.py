"""The booking core: pure Python, no I/O.

Everything here works on plain values (pools, bookings, times) so that placement and policy
rules can be tested exhaustively and reused by the database layer, the service and benchmarks.
"""
