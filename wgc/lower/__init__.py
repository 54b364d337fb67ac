"""Lowering: a verified `Model` plus a `Placement` becomes a `Plan` (plain, JSON-dumpable data)."""
