"""The errors a node raises or is failed with: `NodeError` and its kinds, by whose fault it is."""

from __future__ import annotations


class NodeError(Exception):
    """A node failed a request; the message names the node (and port) involved."""


class NodeOutputError(NodeError):
    """A node returned something its declared ports do not allow."""


class NodeInputError(NodeError, ValueError):
    """A node cannot take a value of the request (an option out of its range, an empty prompt):
    the request's fault, reported as such (`Cause.INPUT`: HTTP 400, `wgc run` exit 1). Only
    this class counts: any other exception, a plain `ValueError` included (it may be a bug), is
    the deployment's (HTTP 500)."""
