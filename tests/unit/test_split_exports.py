"""The modules split into smaller ones (issue 31: no runtime file over 400 lines) keep their import
paths: every name importable from `wgc_runtime.contract.spec`, `.node` and `.messages` (generated
modules and nodes import them), and from the host modules that were split, still is, and is the
object its new home defines. The lists are the modules' names before the split."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from wgc.codegen.specs import SpecUsage, public_module

BEFORE: dict[str, tuple[str, ...]] = {
    "wgc_runtime.contract.spec": (
        # the records, their helpers and constants
        "AttentionSpec", "BatchingSpec", "CallSpec", "CaptureSpec", "Dest", "Dims", "ITEMSIZE",
        "KV_ITEMSIZE", "KvCacheSpec", "KvPoolSpec", "LoopSpec", "MemorySpec", "NodeSpec",
        "OMIT_DEFAULT", "PieceSpec", "PortIn", "PortOut", "RankSpec", "SPEC_VERSION", "SinkSpec",
        "Source", "SpecVersionError", "StreamSpec", "TypeSpec", "Unit", "check_spec_version",
        "render_type", "type_parts",
        # the kinds it imported
        "AttentionKind", "CaptureBackend", "CaptureScope", "DestKind", "Edge", "Engine",
        "FinalMode", "InputMode", "Policy", "SourceKind",
    ),
    "wgc_runtime.contract.node": (
        "CallContext", "ChunkInfo", "DTYPES", "DTYPE_NAMES", "KvCache", "Node", "NodeContext",
        "NodeError", "NodeInputError", "NodeOutputError", "SEED_OPTION", "Work", "check_outputs",
        "decode_state", "encode_state", "render_tensor", "to_tensor",
        # what it imported from the rest of the contract
        "AttentionSpec", "BatchingSpec", "CaptureSpec", "CapturedCall", "Engine", "KvCacheSpec",
        "StaticStep", "WeightParts", "render_type", "type_parts",
    ),
    "wgc_runtime.contract.messages": (
        "CLIENT", "CONDUCTOR", "CORE", "ChunkReady", "ChunksDone", "ClientOut", "CopyKv",
        "ExportState", "Failed", "Finished", "ForgetSession", "ForwardPersisted", "Iters",
        "Message", "Output", "Release", "SkipChunk", "StartWalk", "StateEnd", "StateImported",
        "StatePart", "StreamAbandon", "StreamAck", "StreamAcks", "StreamDone", "StreamItem",
        "StreamItems", "Until", "Value", "WalkDone", "pack_items", "unpack_acks", "unpack_items",
        "Emitted", "ROUTE_SEP", "base_id", "routable", "route", "routed_id",
        "Cause", "Dest", "Edge", "FailKind",
    ),
    "wgc_runtime.host.transport.sockets": (
        "CLIENT_FRAME_BYTES", "ClientPort", "FrameCodec", "HEARTBEAT_MS", "HEARTBEAT_TIMEOUT_MS",
        "HWM", "INBOX_EVERY_S", "LOOPBACK", "MAX_FRAME_BYTES", "Mesh", "Peer", "RECUT_S", "RINGS",
        "SEND_TIMEOUT_MS", "TransportError", "WILDCARD", "bind_address", "client_name",
        "is_loopback", "named_hosts", "new_secret", "watch",
    ),
    "wgc_runtime.host.processes.launcher": (
        "ChildDied", "Cluster", "Health", "LAUNCHER_IN", "process_age", "terminate_as_interrupt",
    ),
    "wgc_runtime.host.server.calls": (
        "Call", "HttpError", "IDLE_TIMEOUT", "STATUS", "Server", "conform", "until_disconnect",
    ),
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(BEFORE))
def test_every_name_importable_before_the_split_still_is(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in BEFORE[module] if not hasattr(mod, n)]
    assert not missing, f"{module} no longer exports {missing}"
    for name in BEFORE[module]:  # `from module import name` as a generated module writes it
        namespace: dict[str, object] = {}
        exec(f"from {module} import {name}", namespace)
        assert namespace[name] is getattr(mod, name)


@pytest.mark.parametrize(
    "module",
    ["wgc_runtime.contract.spec", "wgc_runtime.contract.node", "wgc_runtime.contract.messages"],
)
def test_a_contract_package_exports_what_its_modules_define(module: str) -> None:
    """``__all__`` is the package's whole public surface, and each name is its home's object."""
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(set(BEFORE[module])), "the surface changed"
    for name in mod.__all__:
        obj = getattr(mod, name)
        home = getattr(obj, "__module__", None)
        if isinstance(obj, type) and home and home.startswith(module + "."):
            assert getattr(importlib.import_module(home), name) is obj


def test_generated_modules_import_every_record_from_its_package() -> None:
    """Codegen names the package (``spec``), never the file a record lives in (``spec.ports``),
    so generated modules keep their import lines."""
    from wgc_runtime.contract import spec

    records = [
        obj
        for obj in vars(spec).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    ]
    assert len(records) == 18  # ports 5, pieces 4, ranks 9
    used = SpecUsage()
    for record in records:
        assert public_module(record) == "spec"
        used.use_class(record)
    assert set(used.names) == {"spec"}


def test_a_class_no_package_exports_is_refused() -> None:
    class Stray:
        pass

    Stray.__module__ = "wgc_runtime.contract.spec.ports"
    with pytest.raises(AssertionError, match=r"not exported by `wgc_runtime\.contract\.spec`"):
        public_module(Stray)
