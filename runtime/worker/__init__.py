"""The worker of one rank: its execution core (`executor.RankExecutor`) and node loading."""

from wgc_runtime.worker.executor import RankExecutor
from wgc_runtime.worker.loader import load_rank_nodes, node_context

__all__ = ["RankExecutor", "load_rank_nodes", "node_context"]
