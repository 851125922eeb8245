"""The fd I/O layer: the fd registry and, later, the sock_* methods.

Layer: fd I/O, above the core. Imports flow down only (core, pollers).
"""
