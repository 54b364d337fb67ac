"""What the speech examples' nodes (`wgc_models.orpheus`, `wgc_models.qwen3_omni`) share: how a
request's randomness is seeded, its sampling options read, its prompt text and tokenizer
found, and how seeded random weights are drawn when no checkpoint is given.

**Seeds.** Every node of a request seeds from one number, `speech_seed` (the request's
``--seed`` / ``"seed"``, else its id, through `CallContext.request_seed`), with the offsets of
`tests.reference.speech.SpeechOptions`: the token model (Orpheus's LM, the
Thinker) draws from ``seed``, the Talker and its code predictor from ``seed + 1``, SNAC's noise
for audio window ``k`` from ``seed + 2 + k``. So a request run by the reference pipelines with
``SpeechOptions(seed=speech_seed(...))`` draws the same numbers, and a generator kept in the
request's state (`RequestGenerator`: its state is a tensor, so it moves with the request when a
placement hands a node's state to another rank) gives the same draws batched or alone.

**Sampling** (`sampling`): the declared request options ``temperature`` (0: greedy, the
default), ``top_p`` and ``repetition_penalty``, read as HF ``generate`` reads them.

**Weights** (`widen_`): seeded draws wider than HF's initialisation (as
`tests.reference.checkpoints` does for the reference's checkpoints), so a
random model's greedy choices do not hinge on rounding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import torch

from wgc_models.layers.host_values import int_list
from wgc_models.layers.sampling import Sampling
from wgc_models.layers.tokenizer import TextCodec
from wgc_runtime.contract.node import (
    SEED_OPTION,
    CallContext,
    Node,
    NodeError,
    NodeInputError,
    Work,
)

SALT = "speech"
TOKENS, TALKER, NOISE = 0, 1, 2  # seed offsets (`SpeechOptions`)
M = TypeVar("M", bound=torch.nn.Module)
TINY_TOKENIZERS = Path(__file__).resolve().parents[1]


def speech_seed(ctx: CallContext) -> int:
    """The request's base seed (module docstring)."""
    return ctx.request_seed(SALT)


def request_seed(request_id: str, seed: int | None = None) -> int:
    """`speech_seed` of a request with this id and ``--seed`` (for tests and benchmarks)."""
    options = {} if seed is None else {SEED_OPTION: seed}
    return speech_seed(CallContext(request_id=request_id, walk="", call=0, options=options))


class RequestGenerator:
    """A request's `torch.Generator` for one model, kept in its node state between calls."""

    def __init__(self, state: dict[str, Any], key: str, seed: int):
        self.state, self.key = state, key
        self.generator = torch.Generator()
        saved = state.get(key)
        if isinstance(saved, torch.Tensor):
            self.generator.set_state(saved)
        else:
            self.generator.manual_seed(seed)

    def __enter__(self) -> torch.Generator:
        return self.generator

    def __exit__(self, *exc: object) -> None:
        self.state[self.key] = self.generator.get_state()


def sampling(options: Mapping[str, Any], prefix: str = "") -> Sampling:
    """The request's sampling options (``{prefix}temperature`` ...)."""

    def get(name: str, default: float) -> float:
        value = options.get(prefix + name, default)
        return float(default if value is None else value)

    temperature = get("temperature", 0.0)
    try:
        return Sampling(
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else 1.0,
            top_p=get("top_p", 1.0),
            repetition_penalty=get("repetition_penalty", 1.0),
        )
    except ValueError as exc:
        raise NodeInputError(
            f"option {prefix}temperature/top_p/repetition_penalty: {exc}"
        ) from None


def plain(params: Sampling) -> bool:
    """Whether ``params`` is plain greedy decoding (what a captured step computes by itself)."""
    return not params.do_sample and params.repetition_penalty == 1.0


def prompt_text(value: torch.Tensor | None, node: str) -> str:
    """A text segment as the runtime hands it over (its UTF-8 bytes as ``i64``)."""
    if value is None or value.numel() == 0:
        raise NodeInputError(f"node `{node}`: an empty text prompt has nothing to say")
    raw = int_list(value)
    if not all(0 <= b < 256 for b in raw):
        raise NodeInputError(f"node `{node}`: a text segment must arrive as UTF-8 bytes")
    return bytes(raw).decode("utf-8", errors="replace")


def text_codec(checkpoint: str, family: str) -> TextCodec:
    """The checkpoint's ``tokenizer.json``; with no checkpoint (seeded random weights), the
    shipped tiny tokenizer. A checkpoint without one is an error: its ids would be read with
    another vocabulary's pieces (the published folders all ship their ``tokenizer.json``)."""
    if not checkpoint:
        return TextCodec.from_file(TINY_TOKENIZERS / family / "tokenizer.json")
    file = Path(checkpoint) / "tokenizer.json"
    if not file.is_file():
        raise NodeError(
            f"checkpoint `{checkpoint}` has no `tokenizer.json`: copy the published folder "
            f"whole (docs/checkpoints.md)"
        )
    return TextCodec.from_file(checkpoint)


@torch.no_grad()
def widen_(module: M, seed: int, std: float = 0.1) -> M:
    """Seeded random weights: matrices ``N(0, std)``, norm weights ``1 + N(0, 0.1)``, biases
    ``N(0, 0.1)`` (module docstring); the global RNG is left as it was."""
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        noise = torch.randn(p.shape, generator=g)
        if p.dim() >= 2:
            p.copy_(noise * std)
        elif "norm" in name:
            p.copy_(1 + 0.1 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
    return module.eval()


def inference(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a node's ``forward`` / ``forward_one`` in inference mode, handing its tensors back
    as normal tensors: an inference tensor has no version counter, which the transport needs
    to send it to another rank."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.inference_mode():
            out = fn(*args, **kwargs)
        return normal_tensors(out)

    return run


def normal_tensors(x: Any) -> Any:
    """``x`` with its inference tensors (in dicts and lists) cloned into normal ones (outside
    inference mode)."""
    if isinstance(x, torch.Tensor):
        return x.clone() if x.is_inference() else x
    if isinstance(x, dict):
        return {k: normal_tensors(v) for k, v in cast(dict[Any, Any], x).items()}
    if isinstance(x, list):
        return [normal_tensors(v) for v in cast(list[Any], x)]
    return x


def forward_alone(
    node: Node, inputs: dict[str, torch.Tensor | None], ctx: CallContext
) -> dict[str, torch.Tensor]:
    """A batched node's `Node.forward_one`: its `Node.forward` on a batch of one."""
    (out,) = node.forward([Work(inputs, ctx)])
    if isinstance(out, BaseException):
        raise out
    return out


def check_sizes(node: str, what: str, want: Mapping[str, int], have: Mapping[str, int]) -> None:
    """A checkpoint's sizes against what the ``.walk`` declares (they size the KV pool)."""
    wrong = {k: (want[k], have[k]) for k in want if want[k] != have[k]}
    if wrong:
        diff = ", ".join(f"{k} {w} (checkpoint: {h})" for k, (w, h) in wrong.items())
        raise NodeError(
            f"node `{node}`: {what} does not match the .walk file: {diff}; set the params to "
            "the checkpoint's sizes"
        )
