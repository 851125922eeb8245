"""The core layer: handles, timers, clock, waker, the run loop, errors, debug.

Layer: core, above the pollers. Knows nothing of sockets or transports.
"""
