"""Moving runtime messages between processes: `codec` (msgpack + zero-copy tensor frames),
`arena` (the per-host shared-memory arena) and `sockets` (the ZeroMQ wiring)."""
