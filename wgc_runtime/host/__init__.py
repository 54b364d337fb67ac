"""Rung 3 of the runtime: what hosts the cores.

`processes` (the launcher, the conductor process, one worker process per rank), `transport`
(ZeroMQ sockets, the msgpack codec, the shared-memory arena), `local` (every core in one thread,
for tests and `wgc run --local`), `client` (the Python client), `loading` (generated modules
and node construction) and `inputs` (every reader of user data, bounded by the deployment's
limits, for `wgc run` and the server alike).
"""
