"""Moving a request's node state between rank groups (plan handoffs): the `Node` defaults
(`encode_state` / `decode_state`), the handoff messages on the wire, and one executor exporting
to another."""

from __future__ import annotations

import pytest
import torch

from wgc_runtime.contract import messages as M
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.node import Node, NodeContext, NodeError, decode_state, encode_state
from wgc_runtime.contract.spec import NodeSpec, RankSpec
from wgc_runtime.core.executor import RankExecutor
from wgc_runtime.host.transport.codec import Codec

CODEC = Codec(M.CORE)


def test_the_default_state_encoding_round_trips_exactly() -> None:
    kept = {"context": (1 << 61) + 3, "scale": 0.1, "done": True, "kv": torch.arange(6.0)}
    state = encode_state("LLM", kept)
    assert set(state) == {"int:context", "float:scale", "bool:done", "tensor:kv"}
    assert all(isinstance(t, torch.Tensor) for t in state.values())
    back = decode_state(state)
    assert back.keys() == kept.keys()
    assert back["context"] == kept["context"] and type(back["context"]) is int
    assert back["scale"] == kept["scale"] and back["done"] is True
    assert torch.equal(back["kv"], kept["kv"])


def test_state_the_default_cannot_move_names_node_and_key() -> None:
    with pytest.raises(NodeError, match=r"node `LLM` keeps `pages` \(list\)"):
        encode_state("LLM", {"pages": [1, 2]})


def test_node_defaults_move_the_kept_dict() -> None:
    node = Node(NodeContext(name="LLM", engine="kv_cache"))
    state = node.export_state("r", {"context": 7})
    into: dict = {}
    node.import_state("r", state, into)
    assert into == {"context": 7}


@pytest.mark.parametrize(
    "msg",
    [
        M.ExportState("r", 3, "LLM", (0, 1), (2, 3)),
        M.StateEnd("r", 3, "LLM", 0, 2),
        M.StateImported("r", 3, "LLM", 2),
        M.StatePart("r", 3, "LLM", "int:context", 0, 17),  # data: a descriptor on the wire
    ],
)
def test_handoff_messages_round_trip_on_the_wire(msg) -> None:
    (back,) = CODEC.decode(CODEC.encode([msg]))
    assert back == msg


def test_a_state_part_is_a_data_message_whose_tensor_travels() -> None:
    part = M.StatePart("r", 3, "LLM", "tensor:kv", 0, torch.arange(4.0))
    assert part.DATA
    (back,) = CODEC.decode(CODEC.encode([part]))
    assert torch.equal(back.data, part.data)


class Counter(Node):
    def forward_one(self, inputs, ctx):
        return {}


def _rank(r: int) -> RankSpec:
    node = NodeSpec(name="LLM", impl="x:Counter", engine=Engine.KV_CACHE, ranks=(r,))
    return RankSpec(rank=r, device="cpu", host="127.0.0.1", nodes=(node,))


@pytest.mark.parametrize(
    ("from_ranks", "to_ranks", "sends"),
    [
        ((0,), (1,), {0: [1]}),
        ((0, 1), (2, 3), {0: [2], 1: [3]}),  # shard k to shard k
        ((0, 1), (2,), {0: [2], 1: []}),  # group sizes differ: the leader sends
    ],
)
def test_executors_move_state_and_confirm(from_ranks, to_ranks, sends) -> None:
    ranks = sorted({*from_ranks, *to_ranks})
    queue: list[tuple[int, M.Message]] = []
    ex = {
        r: RankExecutor(
            _rank(r), {"LLM": Counter(NodeContext(name="LLM"))}, lambda to, m: queue.append((to, m))
        )
        for r in ranks
    }
    for r in from_ranks:
        ex[r].table.req("req").node_state["LLM"] = {"context": 100 + r}
    for r in from_ranks:
        ex[r].deliver(M.ExportState("req", 1, "LLM", from_ranks, to_ranks))
    sent = {
        r: sorted({to for to, m in queue if isinstance(m, M.StateEnd) and m.src_rank == r})
        for r in from_ranks
    }
    assert sent == sends
    for r in from_ranks:
        assert "LLM" not in ex[r].requests["req"].node_state  # moved, not copied
    while any(to >= 0 for to, _ in queue):
        to, m = next((to, m) for to, m in queue if to >= 0)
        queue.remove((to, m))
        ex[to].deliver(m)
    confirmed = sorted(m.rank for to, m in queue if isinstance(m, M.StateImported))
    assert to_ranks == tuple(confirmed)
    for k, r in enumerate(to_ranks):
        src = from_ranks[k] if len(from_ranks) == len(to_ranks) else from_ranks[0]
        assert ex[r].requests["req"].node_state["LLM"] == {"context": 100 + src}


def test_parts_arriving_after_the_end_marker_still_import() -> None:
    queue: list[tuple[int, M.Message]] = []
    ex = RankExecutor(
        _rank(1), {"LLM": Counter(NodeContext(name="LLM"))}, lambda to, m: queue.append((to, m))
    )
    ex.deliver(M.StateEnd("req", 1, "LLM", 0, 2))
    ex.deliver(M.StatePart("req", 1, "LLM", "int:a", 0, torch.tensor(1)))
    assert not queue
    ex.deliver(M.StatePart("req", 1, "LLM", "float:b", 0, torch.tensor(2.5, dtype=torch.float64)))
    assert queue == [(M.CONDUCTOR, M.StateImported("req", 1, "LLM", 1))]
    assert ex.requests["req"].node_state["LLM"] == {"a": 1, "b": 2.5}
