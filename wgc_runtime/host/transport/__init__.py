"""Moving runtime messages between processes: `codec` (msgpack + zero-copy tensor frames),
`arena` (the per-host shared-memory arena), `ring` and its `doorbell` (same-host rings between
processes) and `sockets` (the ZeroMQ wiring)."""
