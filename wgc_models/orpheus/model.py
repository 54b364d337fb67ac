"""Orpheus TTS: its token ids, the audio-token → SNAC-code mapping, and the streaming vocoder
step that turns one 28-token window into one frame of audio.

Token ids (Orpheus's tokenizer is Llama 3's, ``tokeniser_length`` = 128256 ids, followed by
``<custom_token_N>`` = ``tokeniser_length + N``; public reference: canopyai/Orpheus-TTS,
``orpheus_tts_pypi/orpheus_tts/engine_class.py`` and ``decoder.py``):

* the prompt is ``[start_of_human] + tokenizer("{voice}: {text}")`` (which starts with
  ``begin_of_text`` 128000) ``+ [end_of_text 128009, end_of_human, start_of_ai,
  start_of_speech]`` (``_format_prompt``: 128259 … 128009, 128260, 128261, 128257); custom
  tokens 1–7 are start/end of speech, start/end of human, start/end of AI and pad;
* generation stops at ``end_of_speech`` (custom token 2, 128258);
* audio codes start at custom token 10 (``audio_offset`` = 128266): the token at position
  ``p`` of the audio stream (``p`` counted from the first audio token) carries code
  ``id − audio_offset − (p mod 7) · codebook_size`` (``turn_token_into_id``: ``int(N) − 10 −
  (index % 7) · 4096``). Each of the 7 positions of a frame has its own 4096-id range, so the
  model's vocabulary is ``audio_offset + 7 · 4096`` (+2 spare) = 156940.

A frame's 7 codes redistribute over SNAC's 3 codebooks as ``[c0]``, ``[c1, c4]``,
``[c2, c3, c5, c6]`` (``convert_to_audio``: ``codes_1`` takes positions 1 and 4, ``codes_2``
positions 2, 3, 5, 6).

Streaming (``tokens_decoder``): once 28 audio tokens (4 frames) are in, and then after every 7
more, the last 28 are decoded and samples ``[2048:4096]`` of the window's audio are kept: the
audio of the window's SECOND frame (``samples_per_frame`` = 2048 at 24 kHz), with one frame of
context before it and two after. The first frame's audio and the last two frames' audio are
never emitted, so n frames give n − 3 frames of audio. A window with a code outside the
codebook yields no audio (the reference's range check; it tests ``c > 4096``, so it lets the
out-of-range 4096 through: here the check is ``0 ≤ c < codebook_size``). This is exactly the
``.walk`` file's ``sliding(window = 28, stride = 7)`` with ``final drop``. The window's SNAC
decode computes only the samples kept (`wgc_models.orpheus.snac_span`: the same function,
to ~1e-5 of float rounding, in about a third of the whole window's time at the real sizes and
three quarters at the tiny ones, where per-layer overhead dominates). Windows that are ready at
once, from any requests, decode as one batch (`OrpheusVocoder.windows`): the decoder is
batch-invariant (`wgc_models.orpheus.conv1d`) and each window draws its own noise, so a
window's audio does not depend on its batch-mates. `OrpheusVocoder.compile` makes that decode
one inductor program (`wgc_models.orpheus.snac_compiled`: ~2x faster at the tiny sizes,
still batch-invariant, equal to the eager decode to float rounding).

One difference from the reference, on purpose: ``tokens_decoder`` drops every token that is not
a custom token *or whose code is 0* before windowing (``token > 0``), which shifts the frame
positions of everything after a code 0; wgc's stream windows the LM's tokens as they come.
The two agree whenever every generated token is an audio token with a non-zero code, which
`audio_mask` can enforce (`OrpheusTokens.allowed`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from wgc_models.layers.host_values import int_list
from wgc_models.orpheus.snac import DrawnNoise, SnacDecoder

if TYPE_CHECKING:  # a type only: the model needs no tokenizer package
    from wgc_models.layers.tokenizer import TextCodec

FRAME = 7  # tokens per SNAC frame
WINDOW_FRAMES = 4  # frames per decoder window (28 tokens)
# a frame's positions that carry each SNAC codebook's codes (1, 2 and 4 codes a frame)
CODEBOOK_POSITIONS = ((0,), (1, 4), (2, 3, 5, 6))


@dataclass(frozen=True, slots=True, kw_only=True)
class OrpheusTokens:
    """Orpheus's special and audio token ids for a vocabulary of ``tokeniser_length`` text ids
    and SNAC codebooks of ``codebook_size`` codes (the real model: 128256 and 4096)."""

    tokeniser_length: int = 128256
    codebook_size: int = 4096
    begin_of_text: int = 128000
    end_of_text: int = 128009

    def custom(self, n: int) -> int:
        """The id of ``<custom_token_{n}>``."""
        return self.tokeniser_length + n

    @property
    def start_of_speech(self) -> int:
        return self.custom(1)

    @property
    def end_of_speech(self) -> int:
        return self.custom(2)

    @property
    def start_of_human(self) -> int:
        return self.custom(3)

    @property
    def end_of_human(self) -> int:
        return self.custom(4)

    @property
    def start_of_ai(self) -> int:
        return self.custom(5)

    @property
    def audio_offset(self) -> int:
        return self.custom(10)

    @property
    def vocab_size(self) -> int:
        """The LM's vocabulary: every audio id, plus the 2 spare ids the real model has."""
        return self.audio_offset + FRAME * self.codebook_size + 2

    def prompt(self, text_ids: list[int]) -> list[int]:
        """The LM prompt around the tokenized ``"{voice}: {text}"`` (without its BOS)."""
        return [
            self.start_of_human,
            self.begin_of_text,
            *text_ids,
            self.end_of_text,
            self.end_of_human,
            self.start_of_ai,
            self.start_of_speech,
        ]

    def audio_token(self, position: int, code: int) -> int:
        """The id that carries ``code`` at ``position`` of the audio stream."""
        return self.audio_offset + (position % FRAME) * self.codebook_size + code

    def code(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """The SNAC code ``token`` carries at ``position`` (may be out of range)."""
        return token - self.audio_offset - (position % FRAME) * self.codebook_size

    def allowed(self, position: int) -> tuple[int, int]:
        """The id range ``[lo, hi)`` of non-zero codes at ``position``: what `audio_mask`
        keeps (code 0 is left out because the reference decoder drops it, see the module)."""
        lo = self.audio_token(position, 1)
        return lo, lo + self.codebook_size - 1

    def drops(self, vocab: int, device: torch.device | str) -> torch.Tensor:
        """What `audio_mask` drops, by row ``position % FRAME + FRAME * (position > 0)``: a
        ``[2 * FRAME, vocab]`` bool table (`masked` reads one row per batch row)."""
        pos = torch.cat([torch.arange(FRAME), torch.arange(FRAME) + FRAME]).to(device)
        return audio_mask(torch.zeros(2 * FRAME, vocab, device=device), self, pos).isinf()

    @staticmethod
    def masked(logits: torch.Tensor, drops: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`audio_mask` of ``logits`` with the table of `drops`: the same values in a third of
        the tensor ops (one gather of the rows instead of building each row's mask)."""
        pos = positions.reshape(-1)
        return logits.masked_fill(drops[pos % FRAME + (pos > 0) * FRAME], float("-inf"))


def audio_mask(
    logits: torch.Tensor, tokens: OrpheusTokens, positions: list[int] | torch.Tensor
) -> torch.Tensor:
    """``logits`` ``[batch, vocab]`` with everything but row ``b``'s `OrpheusTokens.allowed`
    range at ``positions[b]`` set to ``-inf``, and ``end_of_speech`` kept at frame boundaries
    after the first frame (constrained audio decoding, an option). Tensor ops only (no host
    reads): ``positions`` may be a tensor on the logits' device, so a captured step can mask."""
    pos = torch.as_tensor(positions, device=logits.device).reshape(-1, 1)
    ids = torch.arange(logits.shape[-1], device=logits.device)[None]
    lo = tokens.audio_offset + (pos % FRAME) * tokens.codebook_size + 1
    keep = (ids >= lo) & (ids < lo + tokens.codebook_size - 1)
    keep |= (ids == tokens.end_of_speech) & (pos > 0) & (pos % FRAME == 0)
    return logits.masked_fill(~keep, float("-inf"))


def window_codes(window: torch.Tensor, tokens: OrpheusTokens) -> list[torch.Tensor] | None:
    """A window of whole frames (``[B, 7·n]`` audio tokens, starting at a frame boundary) as
    SNAC's three code tensors ``[B, n]``, ``[B, 2n]``, ``[B, 4n]``; None when any code is out
    of range (no audio for that window, like the reference)."""
    codes, rows = valid_window_codes(window, tokens)
    return codes if len(rows) == window.shape[0] else None


def valid_window_codes(
    windows: torch.Tensor, tokens: OrpheusTokens
) -> tuple[list[torch.Tensor], list[int]]:
    """`window_codes` of the rows of ``windows`` whose codes are all in range, and those rows
    (a row with a code out of range has no audio): every row mapped in one go."""
    b, t = windows.shape
    if t % FRAME:
        raise ValueError(f"a window holds whole frames of {FRAME} tokens, not {t}")
    codes = tokens.code(windows.long(), torch.arange(t, device=windows.device))
    valid = ((codes >= 0) & (codes < tokens.codebook_size)).all(dim=1)
    rows = int_list(valid.nonzero())
    if len(rows) < b:
        codes = codes[rows]
    n = t // FRAME
    frames = codes.view(len(rows), n, FRAME)
    return [frames[:, :, list(p)].reshape(len(rows), n * len(p)) for p in CODEBOOK_POSITIONS], rows


class OrpheusVocoder:
    """The ``snac_decoder`` node's computation: one window of 28 LM tokens (4 frames) → the
    ``samples_per_frame`` samples of its second frame (module docstring), or None."""

    def __init__(self, snac: SnacDecoder, tokens: OrpheusTokens):
        if snac.config.codebook_size != tokens.codebook_size:
            raise ValueError("the SNAC codebooks and the Orpheus token ranges disagree in size")
        self.snac, self.tokens = snac, tokens
        self.samples_per_frame = snac.config.samples_per_frame
        self.sample_rate = snac.config.sampling_rate
        self._noise: tuple[tuple[int, ...], torch.dtype, torch.device] | None = None

    def compile(self) -> None:
        """Decode windows with one compiled program from now on (`SnacDecoder.compile_span`,
        `wgc_models.orpheus.snac_compiled`), compiled here on a window of one and a batch of
        two, so no request waits for it."""
        keep = self.keep()
        latent = WINDOW_FRAMES * self.snac.config.vq_strides[0]
        self.snac.compile_span(latent, (keep.start, keep.stop))
        device = next(self.snac.parameters()).device
        ids = [self.tokens.audio_token(p, 1) for p in range(WINDOW_FRAMES * FRAME)]
        window = torch.tensor(ids, device=device)
        for n in (1, 2):
            self.windows([window] * n, [torch.Generator().manual_seed(0) for _ in range(n)])

    @property
    def compiled(self) -> bool:
        """Whether windows decode with the compiled program (`compile`)."""
        return bool(self.snac.compiled_spans)

    def window_noise(self, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """A window's noise drawn now from ``generator``, as its decode would draw it: give it
        to `windows` as a `DrawnNoise` in the generator's place (`NoiseAhead`)."""
        if self._noise is None:  # the window's noise blocks' lengths, and the weights' kind
            p = next(self.snac.parameters())
            lengths = self.snac.noise_lengths(WINDOW_FRAMES * self.snac.config.vq_strides[0])
            self._noise = (lengths, p.dtype, p.device)
        return DrawnNoise.draw(generator, *self._noise)

    @staticmethod
    def windows_of(tokens: int) -> int:
        """How many windows a stream of ``tokens`` tokens fills (`sliding(28, 7)`)."""
        return max(0, (tokens - WINDOW_FRAMES * FRAME) // FRAME + 1)

    def keep(self) -> slice:
        """The samples of a window's audio that are emitted: its second frame."""
        spf = self.samples_per_frame
        return slice(spf, 2 * spf)

    def window(
        self, window: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor | None:
        """``window`` ``[28]`` (or ``[B, 28]``) → audio ``[spf]`` (``[B, spf]``) fp32, or None
        when a code is out of range."""
        batched = window.dim() == 2
        w = window if batched else window[None]
        codes = window_codes(w, self.tokens)
        if codes is None:
            return None
        keep = self.keep()
        audio = self.snac.decode(codes, generator, span=(keep.start, keep.stop))[:, 0].float()
        return audio if batched else audio[0]

    def windows(
        self,
        windows: Sequence[torch.Tensor],
        generators: Sequence[torch.Generator | DrawnNoise],
    ) -> list[torch.Tensor | None]:
        """Several requests' windows (``[28]`` each, every one with its own noise generator)
        decoded as ONE batch: each one's audio ``[spf]`` fp32 bit for bit what `window` gives
        it alone (the decoder is batch-invariant: `wgc_models.orpheus.conv1d`), or None
        for a window with a code out of range."""
        out: list[torch.Tensor | None] = [None] * len(windows)
        if len(generators) != len(windows):
            raise ValueError(f"{len(generators)} noise generators for {len(windows)} windows")
        if not windows:
            return out
        if len({tuple(w.shape) for w in windows}) > 1:
            raise ValueError("the windows of one batch have one length")
        batch = torch.stack([w.reshape(-1) for w in windows])
        stacked, rows = valid_window_codes(batch, self.tokens)
        if not rows:
            return out
        noise = [generators[i] for i in rows]
        keep = self.keep()
        audio = self.snac.decode(stacked, noise, span=(keep.start, keep.stop))[:, 0].float()
        for j, i in enumerate(rows):
            out[i] = audio[j]
        return out


class NoiseAhead:
    """Requests' window noise drawn before their windows fill: what a vocoder rank does while it
    waits for the LM (the first window needs 28 decode steps), so the draws are not on the path
    of the decodes. Window ``k``'s noise comes from a generator seeded with the request's noise
    seed plus ``k`` alone (``wgc_models.orpheus.nodes``), so it can be drawn at any time, in any
    order, with the same numbers. `expect` notes a request (its seed and how many windows it
    may fill, at most ``limit``); each `step` draws one window's, round robin over the
    requests, earliest windows first; `take` hands window ``k``'s over once (None when it was
    not drawn yet, or for another seed: the caller then draws it itself); `drop` forgets a
    request. Held: at most ``limit`` windows a request (~54 KB each: 13,440 samples)."""

    def __init__(
        self, draw: Callable[[torch.Generator], tuple[torch.Tensor, ...]], limit: int = 32
    ):
        self._draw, self.limit = draw, limit
        self._plans: dict[str, list[int]] = {}  # request -> [seed, next k to draw, windows]
        self._drawn: dict[str, dict[int, tuple[torch.Tensor, ...]]] = {}
        self._queue: deque[str] = deque()  # requests with windows left to draw
        self.drawn = self.used = 0  # windows drawn ahead, and of those handed to a decode

    def expect(self, request: str, seed: int, windows: int) -> None:
        if request in self._plans:
            return
        self._plans[request] = [seed, 0, min(windows, self.limit)]
        self._drawn[request] = {}
        if windows > 0:
            self._queue.append(request)

    def step(self) -> bool:
        """Draw one window's noise; False when none is left to draw."""
        while self._queue:
            request = self._queue.popleft()
            plan = self._plans.get(request)
            if plan is None or plan[1] >= plan[2]:
                continue  # dropped, or all drawn (or taken) meanwhile
            seed, k, _ = plan
            self._drawn[request][k] = self._draw(torch.Generator().manual_seed(seed + k))
            plan[1] = k + 1
            self.drawn += 1
            if plan[1] < plan[2]:
                self._queue.append(request)
            return True
        return False

    def take(self, request: str, seed: int, k: int) -> DrawnNoise | None:
        plan = self._plans.get(request)
        if plan is None or plan[0] != seed:
            return None
        drawn = self._drawn[request]
        for old in [j for j in drawn if j < k]:  # windows decode in order: those are stale
            del drawn[old]
        plan[1] = max(plan[1], k + 1)  # never draw what was already decoded
        tensors = drawn.pop(k, None)
        if tensors is None:
            return None
        self.used += 1
        return DrawnNoise(tensors)

    def window(self, request: str, seed: int, k: int) -> DrawnNoise | torch.Generator:
        """Window ``k``'s noise for its decode: drawn ahead (`take`), else its generator."""
        return self.take(request, seed, k) or torch.Generator().manual_seed(seed + k)

    def drop(self, request: str) -> None:
        self._plans.pop(request, None)
        self._drawn.pop(request, None)

    def held(self) -> int:
        """Windows drawn and not handed over yet."""
        return sum(len(d) for d in self._drawn.values())


def orpheus_tokens(config: Mapping[str, Any]) -> OrpheusTokens:
    return OrpheusTokens(
        tokeniser_length=int(config["text_vocab"]),
        codebook_size=int(config["codebook"]),
        begin_of_text=int(config["bos"]),
        end_of_text=int(config["eot"]),
    )


def prompt_ids(codec: TextCodec, tokens: OrpheusTokens, voice: str, text: str) -> list[int]:
    """Orpheus's prompt for ``text`` in ``voice``: ``"{voice}: {text}"`` between its special
    tokens (`OrpheusTokens.prompt`)."""
    return tokens.prompt(codec.encode(f"{voice}: {text}"))
