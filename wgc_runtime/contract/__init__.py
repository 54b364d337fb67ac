"""Rung 1 of the runtime: the contract between the compiler and the runtime.

`spec` holds the records generated modules construct (torch-free, so a generated module imports
in milliseconds on any machine); `messages` every message that crosses a socket; `node` the node
API; `route` what a routed request id carries (torch-free: the door reads it). Nothing here
imports the cores (`wgc_runtime.core`) or the host layer (`wgc_runtime.host`).
"""
