"""`DecoderEngine`: a `LlamaDecoder` over one `PagedKVPool` with one `AttentionBackend`.

Prefill, decode, fork and free on the pool's (request, label) sequences (the plain path:
metadata built on the host per step, ``backend.forward``), and the static decode unit for
`wgc_runtime.engines.capture.GraphRunner` (`DecoderEngine.decode_unit`: fixed-shape buffers,
no host synchronisation, see `wgc_models.layers.attention.StaticDecode`). It is the
`wgc_runtime.engines.batching.StepEngine` a `ContinuousBatcher` drives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, overload

import torch

from wgc_models.layers.attention import CAPTURABLE_DECODE, AttnStep, StaticDecode, static_meta
from wgc_models.llama.model import LlamaDecoder
from wgc_runtime.engines.attention.base import AttentionBackend, prepare_step
from wgc_runtime.engines.batching import Seq, StepEngine
from wgc_runtime.engines.capture import StaticBuffer, UnitFn
from wgc_runtime.engines.kv_pool import PAD_REQUEST, PagedKVPool


class DecoderEngine:
    """A `LlamaDecoder` over one `PagedKVPool` with one `AttentionBackend`.

    Requests and labels are the pool's; `prefill` and `decode` append to the named sequences.
    One pool page is kept aside for padding rows of static decode steps (their K/V land there).
    """

    def __init__(self, model: LlamaDecoder, pool: PagedKVPool, backend: AttentionBackend):
        cfg = model.config
        if (pool.layers, pool.kv_heads, pool.head_dim) != (
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
        ):
            raise ValueError(
                f"pool geometry (layers {pool.layers}, kv heads {pool.kv_heads}, head dim "
                f"{pool.head_dim}) does not fit the model ({cfg.num_layers}, "
                f"{cfg.num_kv_heads}, {cfg.head_dim})"
            )
        self.model, self.pool, self.backend = model, pool, backend
        self.device = pool.device
        self._pad_slot: int | None = None

    @classmethod
    def build(
        cls,
        model: LlamaDecoder,
        *,
        pages: int,
        page_size: int = 16,
        backend: type[AttentionBackend] | None = None,
        labels: Sequence[str] | None = None,
    ) -> DecoderEngine:
        """A pool and a backend sized for ``model`` (backend defaults to torch)."""
        from wgc_runtime.engines.attention.torch_backend import TorchAttention

        cfg = model.config
        param = next(model.parameters())
        pool = PagedKVPool(
            layers=cfg.num_layers,
            kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            pages=pages,
            page_size=page_size,
            dtype=param.dtype,
            device=param.device,
            labels=labels,
        )
        be = (backend or TorchAttention)(
            num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            page_size=page_size,
            device=param.device,
            dtype=param.dtype,
        )
        return cls(model, pool, be)

    # ------------------------------------------------------------ the plain path

    @overload
    def forward(
        self,
        seqs: Sequence[Seq],
        tokens: Sequence[torch.Tensor],
        *,
        all_logits: Literal[False] = False,
    ) -> torch.Tensor: ...

    @overload
    def forward(
        self, seqs: Sequence[Seq], tokens: Sequence[torch.Tensor], *, all_logits: Literal[True]
    ) -> list[torch.Tensor]: ...

    @torch.inference_mode()
    def forward(
        self, seqs: Sequence[Seq], tokens: Sequence[torch.Tensor], *, all_logits: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """Append ``tokens[i]`` (1-D) to sequence ``seqs[i]`` and run them in one ragged batch.

        Returns the logits of each sequence's last token ``[len(seqs), vocab]`` (fp32), or with
        ``all_logits`` a list of ``[len(tokens[i]), vocab]``.
        """
        lens = [int(t.numel()) for t in tokens]
        meta = prepare_step(
            self.pool, [(r, lab, n) for (r, lab), n in zip(seqs, lens, strict=True)]
        )
        self.backend.plan(meta)
        flat = torch.cat([t.reshape(-1) for t in tokens]).to(self.device, torch.long)
        assert meta.slot_mapping is not None  # prepare_step maps every new token
        step = AttnStep(self.pool, self.backend, meta.slot_mapping, meta=meta)
        hidden = self.model(flat, meta.positions, step)
        if all_logits:
            return list(torch.split(self.model.logits(hidden), lens))
        last = torch.tensor(lens, device=self.device).cumsum(0) - 1
        return self.model.logits(hidden[last])

    @overload
    def prefill(
        self,
        seqs: Sequence[Seq],
        prompts: Sequence[torch.Tensor],
        *,
        all_logits: Literal[False] = False,
    ) -> torch.Tensor: ...

    @overload
    def prefill(
        self, seqs: Sequence[Seq], prompts: Sequence[torch.Tensor], *, all_logits: Literal[True]
    ) -> list[torch.Tensor]: ...

    def prefill(
        self, seqs: Sequence[Seq], prompts: Sequence[torch.Tensor], *, all_logits: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """`forward` of the prompts (one per sequence)."""
        if all_logits:
            return self.forward(seqs, prompts, all_logits=True)
        return self.forward(seqs, prompts)

    def decode(self, seqs: Sequence[Seq], tokens: torch.Tensor) -> torch.Tensor:
        """One token per sequence (``tokens`` ``[len(seqs)]``) → logits ``[len(seqs), vocab]``."""
        return self.forward(seqs, [t.reshape(1) for t in tokens.reshape(-1)])

    def fork(self, request: Hashable, src: str, dst: str) -> None:
        self.pool.fork(request, src, dst)

    def free(self, request: Hashable) -> None:
        self.pool.free(request)

    # ------------------------------------------------------------ the static decode path

    @property
    def pad_slot(self) -> int:
        """A slot on a page of its own where padding rows write (allocated once)."""
        if self._pad_slot is None:
            self._pad_slot = int(self.pool.append(PAD_REQUEST, self._pad_label(), 1)[0])
        return self._pad_slot

    def close(self) -> None:
        """Give back the padding page (the pool is then empty once every request is freed)."""
        self.pool.free(PAD_REQUEST)
        self._pad_slot = None

    def _pad_label(self) -> str:
        labels = self.pool.labels
        return "main" if labels is None or "main" in labels else sorted(labels)[0]

    def width_for(self, max_len: int) -> int:
        """Page-table width of static buffers for sequences up to ``max_len`` tokens."""
        return self.pool.pages_for(max_len)

    def width_forms(self, max_len: int, forms: int) -> tuple[int, ...]:
        """Page-table widths of a decode step offered in ``forms`` forms (`StaticStep` forms,
        narrowest first): the width for ``max_len`` tokens and its successive halves, at least
        one page each (duplicates dropped)."""
        full = self.width_for(max_len)
        return tuple(sorted({max(1, full >> k) for k in range(max(1, forms))}))

    def decode_buffers(self, width: int) -> dict[str, StaticBuffer]:
        """The static inputs of one decode step (per row): token, position, slot, kv length,
        page table. Padding rows write to the scratch slot and attend to one token."""
        pad_page = self.pad_slot // self.pool.page_size
        # built now, not on the first step: that step may be a CUDA-graph capture
        self.model.rope_table(width * self.pool.page_size, self.model.model.norm.weight.dtype)
        return {
            "tokens": StaticBuffer((), torch.long, 0),
            "positions": StaticBuffer((), torch.long, 0),
            "slots": StaticBuffer((), torch.long, self.pad_slot),
            "kv_lens": StaticBuffer((), torch.int32, 1),
            "block_tables": StaticBuffer((width,), torch.int32, pad_page),
        }

    def decode_unit(
        self, bufs: Mapping[str, torch.Tensor], *, compiled: bool = False
    ) -> dict[str, torch.Tensor]:
        """One static decode step over the buffers of `decode_buffers`: logits and the greedy
        next token per row. Shape-static and free of host syncs (capturable).

        ``compiled``: the form for `torch.compile` (`GraphRunner` backend ``"inductor"``, via
        `compiled_decode_unit`): the full static page-table width (no host read) and K/V
        written through the pool tensor (`StaticDecode.prepare`); it leaves inference mode to
        its caller (dynamo cannot trace into it; the runner enters it around the compiled step)."""
        with contextlib.nullcontext() if compiled else torch.inference_mode():
            static = StaticDecode(bufs["block_tables"], bufs["kv_lens"])
            if self.backend.name in CAPTURABLE_DECODE:
                static.meta = static_meta(bufs, self.pool.page_size)
            elif compiled:
                static.prepare(bufs["slots"], self.pool, dynamic=False, through_pool=True)
            else:
                # eager on the CPU: cut the page tables to the pages in use
                static.prepare(bufs["slots"], self.pool, dynamic=self.device.type == "cpu")
            step = AttnStep(self.pool, self.backend, bufs["slots"], static=static)
            hidden = self.model(bufs["tokens"], bufs["positions"], step)
            logits = self.model.logits(hidden)
            return {"logits": logits, "next_token": logits.argmax(-1)}

    def compiled_decode_unit(self, bufs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`decode_unit` in its form for `torch.compile` (``compiled=True``)."""
        return self.decode_unit(bufs, compiled=True)

    def unit_for(self, backend: str) -> UnitFn:
        """The decode unit a `GraphRunner` with ``backend`` should run."""
        return self.compiled_decode_unit if backend == "inductor" else self.decode_unit


if TYPE_CHECKING:  # the type checker proves that a `DecoderEngine` is a `StepEngine`
    _: type[StepEngine] = DecoderEngine
