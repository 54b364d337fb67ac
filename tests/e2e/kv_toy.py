"""The KV toy model of the KV end-to-end tests (`test_kv_leaks`, `test_kv_copies`,
`test_like_merging`).

BAGEL's KV story in miniature: `LLM`, a kv-cache node with labels ``main`` and ``cfg``,
prefills each prompt segment into ``main`` and forks it into ``cfg`` (copy on branch), decodes
into ``main``, and in a CFG-parallel denoising loop reads ``main`` while its copy `LLM_cfg`
(``like LLM { label cfg }``) reads ``cfg``, wherever a placement puts it (`PLACEMENTS`: the
layouts the tests run it on). `compile_into` writes a compiled plan of it (or any model) into a
folder; `nodes` builds a rank's nodes for `LocalCluster`; request option ``fail =
"NODE:WALK"`` makes that node raise in that walk, and ``overflow`` makes a prefill append more
tokens than any pool here holds.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.narrow import present
from wgc.driver import Driver
from wgc.interp import Emitted, Outputs, RequestError
from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.host.loading import node_context
from wgc_runtime.host.local import Handle

WALK = """\
model kvtoy

type Token = i64[1]
type Latent = f32[4, 4]

node LLM: kv_cache(labels = [main, cfg]) {
  impl "kv_toy:LLM"
  in  prompt:    f32[T, 4]
  in  token:     Token
  in  latents:   Latent
  out new_token: Token
  out stop:      bool[]
  out velocity:  Latent
  config layers = 2
  config kv_heads = 1
  config head_dim = 4
  config kv_tokens = 16
}

node LLM_cfg: like LLM { label cfg }

node combine: stateless {
  impl "kv_toy:Combine"
  in  v_main:  Latent
  in  v_cfg:   Latent
  in  latents: Latent
  out latents: Latent
}

walk prefill(prompt: f32[T, 4]) {
  LLM(prompt) -> new_token
  persist new_token
}

walk decode(token: Token) {
  loop decode_loop max 6 until stop {
    emit token as text
    LLM(token) -> token = new_token, stop
  }
}

walk gen(latents?: Latent) {
  loop denoise max 3 {
    par {
      LLM(latents)     -> v_main = velocity
      LLM_cfg(latents) -> v_cfg = velocity
    }
    combine(v_main, v_cfg, latents) -> latents
  } yield last latents
  emit latents as tensor
}

flow main {
  for seg in request.inputs {
    prefill(prompt = seg)
  }
  if request.wants(text) {
    decode(token = new_token)
  }
  if request.wants(tensor) {
    gen()
  }
}
"""

# where a placement puts the copy and the decode walks (YAML without the settings)
PLACEMENTS = {
    "one-rank": "devices: [cpu]\nplace:\n  - nodes: [LLM, LLM_cfg, combine]\n    ranks: [0]\n",
    "cfg-on-rank-1": """\
devices: [cpu, cpu]
place:
  - nodes: [LLM, combine]
    ranks: [0]
  - nodes: [LLM_cfg]
    ranks: [1]
""",
    "decode-on-rank-1": """\
devices: [cpu, cpu]
place:
  - nodes: [LLM]
    ranks: [0]
    walks: [prefill, gen]
  - nodes: [LLM]
    ranks: [1]
    walks: [decode]
  - nodes: [combine]
    ranks: [0]
  - nodes: [LLM_cfg]
    ranks: [1]
""",
    "decode-on-rank-1-cfg-on-rank-2": """\
devices: [cpu, cpu, cpu]
place:
  - nodes: [LLM]
    ranks: [0]
    walks: [prefill, gen]
  - nodes: [LLM]
    ranks: [1]
    walks: [decode]
  - nodes: [combine]
    ranks: [0]
  - nodes: [LLM_cfg]
    ranks: [2]
""",
}


# ---------------------------------------------------------------------------------- the nodes
def _fail(node: str, ctx) -> None:
    if ctx.options.get("fail") == f"{node}:{ctx.walk}":
        raise RuntimeError(f"toy failure in `{node}`")


def _kv(rows: torch.Tensor, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = rows.reshape(rows.shape[0], 1, 4).float()
    k = torch.stack([torch.sin(x + i) for i in range(layers)])
    v = torch.stack([torch.cos(x - i) for i in range(layers)])
    return k, v


def _token(out: torch.Tensor) -> torch.Tensor:
    return torch.tensor([1 + int(out.abs().sum() * 1000) % 97], dtype=torch.int64)


class LLM(Node):
    """Prefill appends a segment to ``main`` and forks it into ``cfg``; decode appends the
    token to ``main``; a denoising call reads its own (first) label. Option ``overflow`` makes
    a prefill append more tokens than the pool holds."""

    def forward_one(self, inputs, ctx):
        _fail(self.name, ctx)
        kv = present(ctx.kv, "kv cache")
        if "prompt" in inputs:
            rows = present(inputs["prompt"])
            if ctx.options.get("overflow"):
                rows = rows.new_zeros(100, 4)
            kv.append(*_kv(rows, kv.layers), "main")
            kv.fork("main", "cfg")
            return {"new_token": _token(kv.attend(_kv(rows[-1:], 1)[0][0]))}
        if "token" in inputs:
            row = present(inputs["token"]).float().reshape(1, 1).expand(1, 4) / 97
            kv.append(*_kv(row, kv.layers), "main")
            ctx.state["n"] = n = ctx.state.get("n", 0) + 1
            stop = n >= int(ctx.options.get("eos_after", 3))
            return {"new_token": _token(kv.attend(_kv(row, 1)[0][0])), "stop": torch.tensor(stop)}
        latents = inputs.get("latents")
        if latents is None:
            latents = torch.randn(4, 4, generator=ctx.generator("noise", per_call=False))
        read = kv.attend(latents.reshape(4, 1, 4), causal=False).reshape(4, 4)
        return {"velocity": read - latents}


class Combine(Node):
    def forward_one(self, inputs, ctx):
        _fail(self.name, ctx)
        v = (2 * present(inputs["v_main"]) - present(inputs["v_cfg"])) / 3
        latents = inputs.get("latents")
        if latents is None:
            latents = torch.randn(4, 4, generator=ctx.generator("noise", per_call=False))
        return {"latents": latents + v}


CLASSES = {"LLM": LLM, "LLM_cfg": LLM, "combine": Combine}


def nodes(rank: RankSpec) -> dict[str, Node]:
    """A rank's nodes of the toy model (the factory `LocalCluster` takes)."""
    return {n.name: CLASSES[n.name](node_context(rank, n)) for n in rank.nodes}


# ---------------------------------------------------------------------------------- plans, outputs
def compile_into(tmp: Path, walk: Path, placement: Path) -> Path:
    res = Driver().compile(str(walk), str(placement))
    assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
    out = tmp / "out"
    out.mkdir()
    for name, text in res.files.items():
        (out / name).write_text(text)
    return out


def as_outputs(h: Handle) -> Outputs:
    """A runtime request's outputs as the interpreter reports them."""
    out = Outputs()
    for o in h.outputs:
        m = o.meta
        out.emitted.append(Emitted(m["flow"], m["walk"], o.modality, o.channel, o.tensor))
    if h.error is not None:
        e = h.error
        out.error = RequestError(e.kind or "", e.message or "", e.flow, e.walk, e.node)
    return out
