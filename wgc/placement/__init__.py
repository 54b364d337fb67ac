"""Placement files: loading (wgc and M* formats), the `Placement` records, and their rules."""
