"""Rung 2 of the runtime: the sans-I/O cores.

`conductor` (requests, flows, walks) and `executor` (one rank's pieces of walks) are state
machines that take messages and send through an ``outbox`` callable: no sockets, no threads, no
processes, so tests drive them directly. Each is composed of parts, objects that own their state
and are called through their methods, sending through one `post.Post`. `streams` holds the
stream buffers they share. They import only the contract (`wgc_runtime.contract`) and, for node
engines, `wgc_runtime.engines`.
"""
