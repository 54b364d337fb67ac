"""The execution core of one rank (`RankExecutor`): runs its pieces of walks for every request."""

from wgc_runtime.core.executor.core import RankExecutor

__all__ = ["RankExecutor"]
