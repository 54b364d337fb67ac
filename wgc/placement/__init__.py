"""Placement files: loading (wgc and M* formats), the `Placement` records, and their rules.

`load.load(path)` parses a file into a `Placement`; `rules.run(model, placement)` checks it
against a model; `check.check_placement(model, path)` does both; `reach.assignment(model,
placement)` says which group runs each (walk, node); `params.apply_overrides` computes the
effective params (`--set` wins over the YAML).
"""
