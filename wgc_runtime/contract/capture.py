"""The node API's captured steps: how a node lets the runtime run one of its calls as a
shape-static unit (a CUDA graph per batch bucket on a GPU, ``torch.compile`` on the CPU when
the placement's ``batching.backend`` asks for it, eager otherwise).

The plan's capture list (`wgc_runtime.contract.spec.CaptureSpec`) names the calls worth it: a
whole loop body on one rank, or one node step inside a loop, whose ports the verifier proved
static. At worker start, for each such call whose node returns a `StaticStep` from
`Node.static_step`, the runtime builds a runner with static buffers per bucket. Each batch of
that call is then copied into the smallest bucket that holds it, padded, run, and split back
into one result per request; a batch whose values do not have the declared shapes, or one
larger than every bucket, runs the node's plain `forward` (counted, not an error).

A `StaticStep` is

* ``fn``: the step as a function of batched buffers: every input port of the call under its
  own name (``[B, *dims]``, the port's static dims) plus the ``extra`` buffers, returning every
  output port (``[B, *dims]``). It must be shape-static and never read a value back to the host
  (it is recorded once per bucket and replayed); padding rows must be harmless.
* ``extra``: further static inputs (attention metadata: slots, sequence lengths, page tables),
  with the value their padding rows hold.
* ``prepare(work)``: called on the host before each run, once per request of the batch;
  returns that row's ``extra`` values (``[*dims]`` each: a tensor, or a number or list of
  numbers, which the runtime turns into one tensor per batch, the cheaper way), e.g. after
  appending the request's new token to its KV sequence. A ``prepare`` that raises fails that
  request only; the others run.
* ``prepare_batch(works)``: ``prepare`` for the whole batch in one call (a decode runner's,
  `wgc_runtime.engines.decode_runner`): returns the batch's ``extra`` buffers as tensors over
  the rows that run (``[n, *dims]``, in the batch's order) and, by position in ``works``, the
  rows that failed (they fail their requests only). A step has ``prepare`` or
  ``prepare_batch``, not both.
* ``finish(works, outputs)``: called after each run with the batch's rows of every output
  (per-request bookkeeping the graph cannot do), and of the values ``fn`` returned beside an
  output port under ``port:NAME`` (e.g. `length_key`; values only ``finish`` reads).
* ``admits(works)``: for a step offered in several *forms* (below), whether this form can run
  the batch (read before ``prepare``); None: every batch.
* ``label``: what tells this form from the call's others in start-up reports (e.g. ``page tables of
  80 tokens``).
* ``reads_inputs``: whether ``prepare``, ``prepare_batch``, ``finish`` or ``admits`` read the
  works' ``inputs`` (True, the default). A step that reads only their contexts says False: a
  decode lane (`wgc_runtime.core.executor.lanes`) then hands each row's carried input to its
  work only when the row leaves or the lane's rows change, not at every step.

`Node.static_step` may return a sequence of steps: forms of one call, each captured at every
bucket, e.g. a decode step whose page tables are a quarter, half and all of the longest
sequence's width (a compiled step reads its whole static width; short sequences then run the
narrow form). A batch runs in the first form, in the order given, that admits it, so the last
form should admit every batch the plan may send.

Running a call through its step computes the same function as the node's `Node.forward`; the
tests compare the two.

This module needs torch and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from wgc_runtime.contract.node import KvCache, Work

StepFn = Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]]
# works -> (the extra buffers of the rows that run, the failed rows by position)
PrepareBatch = Callable[
    [Sequence["Work"]], tuple[Mapping[str, torch.Tensor], Mapping[int, BaseException]]
]


def length_key(port: str) -> str:
    """The name a bounded port's true lengths go by, beside the port, in a step's buffers."""
    return f"{port}:len"


@dataclass(frozen=True, slots=True)
class StaticPort:
    """One extra static input of a step: per-row ``dims``, a contract dtype name (``i64``,
    ``i32``, ``f32``, ``bool``, ...), and the value padding rows hold."""

    dims: tuple[int, ...]
    dtype: str
    pad: float | int | bool = 0


@dataclass(frozen=True, slots=True)
class StaticStep:
    """A node's call as a shape-static unit (see the module docstring)."""

    fn: StepFn
    extra: Mapping[str, StaticPort] = field(default_factory=dict[str, StaticPort])
    prepare: Callable[[Work], Mapping[str, Any]] | None = None
    prepare_batch: PrepareBatch | None = None
    finish: Callable[[Sequence[Work], Mapping[str, torch.Tensor]], None] | None = None
    admits: Callable[[Sequence[Work]], bool] | None = None
    label: str = ""
    reads_inputs: bool = True


@dataclass(frozen=True, slots=True)
class CapturedCall:
    """What `Node.static_step` is asked about: one call of the plan's capture list on this
    rank. ``inputs``/``outputs``: the call's ports and their static types (TypeSpecs, every dim
    an int). ``buckets``: the batch sizes it will run at. ``backend``: how the runner runs it
    (``eager``, ``cuda_graph`` or ``inductor``: a step may offer a form for each). ``kv``: for a
    kv-cache node, a handle of its pool for the runtime's padding sequence (where padding rows
    may write), else None."""

    walk: str
    call: int
    loop: str | None
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    buckets: tuple[int, ...]
    device: str
    backend: str = "eager"
    kv: KvCache | None = None
