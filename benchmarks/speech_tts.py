"""Text-to-speech served by wgc vs the plain pipeline a user would write instead.

    .venv/bin/python benchmarks/speech_tts.py [--family orpheus|qwen3_omni]
        [--concurrency 1 4 16] [--tokens N] [--placements cpu cpu-2rank ...] [--threads 1]
        [--repeat 3] [--set NAME=VALUE ...] [--json out.json]

The model is `wgc_models/<family>` at its tiny sizes, on tiny checkpoints in the references' own
formats (`tests.reference.checkpoints`: for Orpheus a transformers
``LlamaForCausalLM`` folder and a `snac` ``SNAC``, for Qwen3-Omni a transformers
``Qwen3OmniMoeForConditionalGeneration`` folder), compiled against them (``--set
checkpoint=...``). Every request is the same text, greedy; Orpheus speaks ``max_tokens =
--tokens`` audio tokens, or fewer where the LM says end-of-speech (both sides stop there; the
report lists the samples per request); Qwen3-Omni writes at most 8 text tokens and speaks at
most ``--tokens`` codec frames. Per concurrency ``c``:

* **wgc**: `Cluster` (the conductor and one worker process per rank, as `wgc run` starts them)
  on each ``--placements`` placement (Orpheus ``cpu``: the LM and the SNAC decoder colocated;
  ``cpu-2rank``: split; ``cpu-2rank-compiled``: split, the LM's decode step compiled by
  inductor, its requests holding at most 320 tokens; Qwen3-Omni ``cpu``: everything on one
  rank, ``cpu-2rank``: the Thinker apart from the Talker and Code2Wav (colocated),
  ``cpu-3rank``: each apart); ``c`` requests
  submitted at once, one `Client` per request in its own thread, each timing its first audio
  chunk and its end. The executor batches the decode steps across requests and streams audio
  chunk by chunk (Orpheus: each 28-token window to the SNAC decoder as it fills, the windows
  ready at once decoded as one batch, each bit for bit its audio alone; Qwen3-Omni:
  the Thinker's states to the Talker, 25-frame code chunks to Code2Wav).
* **reference**, in this process. Orpheus: transformers' ``generate()`` on the same LM, the
  ``c`` prompts as one batch (identical prompts: no padding), greedy with Orpheus's audio-token
  constraint as a logits processor (`wgc_models.orpheus.model.audio_mask`, so the tokens
  are the ones wgc chooses), then `snac`'s ``SNAC.decode`` on each request's whole code
  sequence. Qwen3-Omni: its ``generate()`` (Thinker, Talker, then Code2Wav over the whole code
  sequence), one request after another (it takes one conversation at a time). A reference
  request's first audio is its last: nothing is heard before its vocoder call ends.

Every deployment is started first (worker start, loading and capture are outside the timings);
then ``--repeat`` rounds, each running every concurrency on the reference and on each placement
in turn, so the sides are measured in the same minutes. Reported per side and concurrency, the
median over the rounds (and their range): throughput (seconds of audio per wall second), the
median first-audio latency (from submission), the median real-time factor (a request's wall
time per second of its audio), and the wgc / reference ratios, each round's wgc over the same
round's reference. Both sides use ``--threads`` intra-op threads (the workers through
``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATE = 24_000
TEXT = "hello there"  # the tiny checkpoint speaks 140 tokens and more for it
OMNI_TEXT, OMNI_TOKENS = "hello there", 8  # Qwen3-Omni: its text tokens at most
DEFAULT_PLACEMENTS = {
    "orpheus": ("cpu", "cpu-2rank", "cpu-2rank-compiled"),
    "qwen3_omni": ("cpu", "cpu-2rank"),
}


def plan_for(family: str, placement: str, sets: dict[str, str], out: Path) -> Path:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    walk = ROOT / "wgc_models" / family / f"{family}.walk"
    place = walk.parent / "placements" / f"{placement}.yaml"
    result = Driver().compile(str(walk), str(place), sets)
    if not result.ok:
        raise SystemExit("\n".join(d.message for d in result.errors))
    out.mkdir(parents=True, exist_ok=True)
    sync(out, result.files, check=False)
    return out


def served(address: str, c: int, request: tuple[str, list[str], dict]) -> dict:
    """``c`` requests at once, one client each; per request (first audio, end, samples)."""
    from wgc_runtime.host.client import Client

    results: list[tuple[float, float, int] | BaseException] = [RuntimeError("no result")] * c
    start = threading.Barrier(c + 1)

    def one(i: int) -> None:
        try:
            with Client(address) as client:
                start.wait()
                t0 = time.perf_counter()
                text, wants, options = request
                stream = client.submit([("text", text)], wants, options, deadline=600)
                first, samples = None, 0
                for out in stream:
                    if out.modality == "audio" and out.value.numel():
                        first = first if first is not None else time.perf_counter() - t0
                        samples += int(out.value.numel())
                results[i] = (first or float("nan"), time.perf_counter() - t0, samples)
        except BaseException as exc:  # reported below, with the others
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    bad = [r for r in results if isinstance(r, BaseException)]
    if bad:
        raise SystemExit(f"a served request failed: {bad[0]!r}")
    return summary(wall, [r for r in results if not isinstance(r, BaseException)])


class Reference:
    """transformers ``generate()`` then SNAC on the whole sequence (module docstring)."""

    def __init__(self, lm, codec) -> None:
        from wgc_models.orpheus.config import TINY_TOKENS

        self.lm, self.codec, self.tokens = lm, codec, TINY_TOKENS

    def run(self, c: int, tokens: int) -> dict:
        import torch
        from transformers import LogitsProcessor, LogitsProcessorList

        from wgc_models._shared.speech import text_codec
        from wgc_models.orpheus.model import audio_mask, prompt_ids, window_codes

        t0 = time.perf_counter()
        prompt = prompt_ids(text_codec("", "orpheus"), self.tokens, "tara", TEXT)
        ids = torch.tensor([prompt] * c)
        tk = self.tokens

        class AudioOnly(LogitsProcessor):
            def __call__(self, input_ids, scores):
                n = input_ids.shape[1] - len(prompt)
                return audio_mask(scores, tk, [n] * scores.shape[0])

        with torch.inference_mode():
            seq = self.lm.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                do_sample=False,
                logits_processor=LogitsProcessorList([AudioOnly()]),
                pad_token_id=tk.end_of_speech,
                eos_token_id=tk.end_of_speech,
            )
            ends, samples = [], []
            for row in seq[:, len(prompt) :].tolist():
                if tk.end_of_speech in row:  # the audio before it (the rows after: padding)
                    row = row[: row.index(tk.end_of_speech)]
                row = row[: len(row) // 7 * 7]
                codes = window_codes(torch.tensor([row]), tk)
                assert codes is not None, "an audio token out of range"
                audio = self.codec.decode(codes)
                ends.append(time.perf_counter() - t0)
                samples.append(int(audio.numel()))
        wall = time.perf_counter() - t0
        # nothing is heard before the whole batch is generated; each request's audio as its
        # vocoder call ends
        return summary(wall, [(e, e, s) for e, s in zip(ends, samples, strict=True)])


class OmniReference:
    """Qwen3-Omni's ``generate()`` (Thinker, Talker, then Code2Wav on the whole code sequence),
    one request after another (it takes one conversation at a time)."""

    def __init__(self, model, checkpoint: Path) -> None:
        from wgc_models._shared.speech import text_codec
        from wgc_models.qwen3_omni.omni_config import OmniConfig
        from wgc_models.qwen3_omni.prompt import ChatPrompt, audio_ids

        codec = text_codec("", "qwen3_omni")
        cfg = OmniConfig.from_pretrained(checkpoint)
        self.model = model
        self.prompt = ChatPrompt(codec, cfg.tokens, audio_ids(codec, cfg)).whole(OMNI_TEXT)

    def run(self, c: int, frames: int) -> dict:
        import torch

        t0 = time.perf_counter()
        ends, samples = [], []
        with torch.inference_mode():
            for _ in range(c):
                _, wav = self.model.generate(
                    torch.tensor([self.prompt]),
                    speaker="ethan",
                    thinker_max_new_tokens=OMNI_TOKENS,
                    thinker_do_sample=False,
                    talker_do_sample=False,
                    talker_max_new_tokens=frames + 1,  # the last first code makes no frame
                    talker_repetition_penalty=1.0,
                )
                ends.append(time.perf_counter() - t0)
                samples.append(int(wav.numel()))
        rows = [(e, e, n) for e, n in zip(ends, samples, strict=True)]
        return summary(time.perf_counter() - t0, rows)


def summary(wall: float, rows: list[tuple[float, float, int]]) -> dict:
    audio = sum(s for _, _, s in rows) / RATE
    return {
        "wall_s": wall,
        "audio_s": audio,
        "throughput": audio / wall,
        "first_audio_s": statistics.median(f for f, _, _ in rows),
        "rtf": statistics.median(end / (s / RATE) if s else float("inf") for _, end, s in rows),
        "samples": sorted({s for _, _, s in rows}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=["orpheus", "qwen3_omni"], default="orpheus")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument(
        "--tokens", type=int, default=140, help="Orpheus: audio tokens; Qwen3-Omni: codec frames"
    )
    ap.add_argument(
        "--placements",
        nargs="+",
        help="default: Orpheus cpu, cpu-2rank, cpu-2rank-compiled; Qwen3-Omni cpu, cpu-2rank",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a .walk param for every placement (as `wgc compile --set`), e.g. kv_tokens=256",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not args.placements:
        args.placements = list(DEFAULT_PLACEMENTS[args.family])
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import torch

    from tests.reference import checkpoints
    from wgc_runtime.host.processes.launcher import Cluster

    torch.set_num_threads(args.threads)
    report: dict = {
        "tokens": args.tokens,
        "threads": args.threads,
        "repeat": args.repeat,
        "load": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        if args.family == "orpheus":
            lm, codec = checkpoints.orpheus(ckpt, seed=0)
            sets = {"checkpoint": str(ckpt / "lm"), "snac_checkpoint": str(ckpt / "snac")}
            ref: Reference | OmniReference = Reference(lm, codec)
            request = (TEXT, ["audio"], {"max_tokens": args.tokens})
            warm = (TEXT, ["audio"], {"max_tokens": 35})
            ref.run(1, 14)  # warm-up
        else:
            model = checkpoints.qwen3_omni(ckpt, seed=1)
            sets = {"checkpoint": str(ckpt)}
            ref = OmniReference(model, ckpt)
            options = {"max_tokens": OMNI_TOKENS, "max_frames": args.tokens}
            request = (OMNI_TEXT, ["text", "audio"], options)
            warm = (OMNI_TEXT, ["text", "audio"], {"max_tokens": 2, "max_frames": 4})
            ref.run(1, 4)  # warm-up
        sets.update(kv.split("=", 1) for kv in args.set)
        with contextlib.ExitStack() as stack:
            addresses = {}
            for placement in args.placements:
                folder = plan_for(args.family, placement, sets, Path(tmp) / placement)
                cluster = Cluster(str(folder), progress=None, ready_timeout=300)
                stack.enter_context(cluster)
                assert cluster.client_address is not None
                addresses[placement] = cluster.client_address
                served(cluster.client_address, 1, warm)  # warm-up
            rounds: dict[str, dict[int, list[dict]]] = {
                side: {c: [] for c in args.concurrency} for side in ["reference", *addresses]
            }
            for _ in range(args.repeat):
                for c in args.concurrency:
                    rounds["reference"][c].append(ref.run(c, args.tokens))
                    for placement, address in addresses.items():
                        rounds[placement][c].append(served(address, c, request))
    for side, per_c in rounds.items():
        report[side] = {c: combine(rs, rounds["reference"][c]) for c, rs in per_c.items()}
    report["load_after"] = os.getloadavg()
    print_table(report, args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def combine(rounds: list[dict], reference: list[dict]) -> dict:
    """One side's rounds at one concurrency: the medians, the ranges, and the per-round ratios
    to the same round's reference (throughput: side / reference; first audio: reference /
    side, above 1 is earlier)."""
    med = statistics.median
    ratio = [r["throughput"] / f["throughput"] for r, f in zip(rounds, reference, strict=True)]
    first = [
        f["first_audio_s"] / r["first_audio_s"] for r, f in zip(rounds, reference, strict=True)
    ]
    return {
        "throughput": med(r["throughput"] for r in rounds),
        "throughput_range": [
            min(r["throughput"] for r in rounds),
            max(r["throughput"] for r in rounds),
        ],
        "first_audio_s": med(r["first_audio_s"] for r in rounds),
        "rtf": med(r["rtf"] for r in rounds),
        "x_throughput": med(ratio),
        "x_throughput_range": [min(ratio), max(ratio)],
        "x_first_audio": med(first),
        "x_first_audio_range": [min(first), max(first)],
        "samples": sorted({s for r in rounds for s in r["samples"]}),
        "rounds": rounds,
    }


def print_table(report: dict, args) -> None:
    unit = "audio tokens" if args.family == "orpheus" else "codec frames at most"
    print(
        f"{args.family} TTS, {args.tokens} {unit} a request, {args.threads} thread(s), "
        f"median (range) of {args.repeat} round(s)"
    )
    print("| side | c | audio s / wall s | first audio (s) | RTF | × throughput | × first audio |")
    print("|---|---|---|---|---|---|---|")

    def span(lo_hi: list[float], fmt: str) -> str:
        return "" if args.repeat < 2 else f" ({lo_hi[0]:{fmt}}-{lo_hi[1]:{fmt}})"

    for side in ["reference", *args.placements]:
        for c in args.concurrency:
            r = report[side][c]
            print(
                f"| {side} | {c} | {r['throughput']:.2f}{span(r['throughput_range'], '.2f')} "
                f"| {r['first_audio_s']:.3f} | {r['rtf']:.3f} "
                f"| {r['x_throughput']:.2f}{span(r['x_throughput_range'], '.2f')} "
                f"| {r['x_first_audio']:.2f}{span(r['x_first_audio_range'], '.1f')} |"
            )
    print(f"load before {report['load']}, after {report['load_after']}")


if __name__ == "__main__":
    main()
