"""Orpheus text-to-speech served by wgc vs the plain pipeline a user would write instead.

    .venv/bin/python benchmarks/speech_tts.py [--concurrency 1 4 16] [--tokens 140]
        [--placements cpu cpu-2rank] [--threads 1] [--json out.json]

The model is `examples/orpheus` at its tiny sizes, on tiny checkpoints in the references' own
formats (`wgc_runtime.components.pipelines.checkpoints.orpheus`: a transformers
``LlamaForCausalLM`` folder and a `snac` ``SNAC``), compiled against them (``--set
checkpoint=... snac_checkpoint=...``). Every request is the same text, greedy, ``max_tokens =
--tokens`` audio tokens, or fewer where the LM says end-of-speech (both sides stop there; the
report lists the samples per request). Per concurrency ``c``:

* **wgc**: `Cluster` (the conductor and one worker process per rank, as `wgc run` starts them)
  on each ``--placements`` placement (``cpu``: the LM and the SNAC decoder colocated on one
  rank; ``cpu-2rank``: split, the decoder on its own rank); ``c`` requests submitted at once,
  one `Client` per request in its own thread, each timing its first audio chunk and its end.
  The executor batches the LM's decode step across requests (its captured unit) and streams
  each 28-token window to the SNAC decoder as it fills (audio chunk by chunk).
* **reference**: in this process, transformers' ``generate()`` on the same LM, the ``c``
  prompts as one batch (identical prompts: no padding), greedy with Orpheus's audio-token
  constraint as a logits processor (`wgc_runtime.components.orpheus.audio_mask`, so the tokens
  are the ones wgc chooses), then `snac`'s ``SNAC.decode`` on each request's whole code
  sequence. Its first audio is its last: nothing is heard before the whole batch is decoded.

Reported per side and concurrency: throughput (seconds of audio per wall second), the median
first-audio latency (from submission), the median real-time factor (a request's wall time per
second of its audio), and wgc / reference ratios. Worker start (loading, capture) is outside
the timings. Both sides use ``--threads`` intra-op threads (the workers through
``OMP_NUM_THREADS``); on a shared machine, run it when the machine is otherwise idle and read
the ratios of one run.
"""

from __future__ import annotations

import argparse
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


def plan_for(placement: str, sets: dict[str, str], out: Path) -> Path:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    walk = ROOT / "examples" / "orpheus" / "orpheus.walk"
    place = walk.parent / "placements" / f"{placement}.yaml"
    result = Driver().compile(str(walk), str(place), sets)
    if not result.ok:
        raise SystemExit("\n".join(d.message for d in result.errors))
    out.mkdir(parents=True, exist_ok=True)
    sync(out, result.files, check=False)
    return out


def served(address: str, c: int, tokens: int) -> dict:
    """``c`` requests at once, one client each; per request (first audio, end, samples)."""
    from wgc_runtime.host.client import Client

    results: list[tuple[float, float, int] | BaseException] = [RuntimeError("no result")] * c
    start = threading.Barrier(c + 1)

    def one(i: int) -> None:
        try:
            with Client(address) as client:
                start.wait()
                t0 = time.perf_counter()
                stream = client.submit(
                    [("text", TEXT)], ["audio"], {"max_tokens": tokens}, deadline=600
                )
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
        from wgc_runtime.components.configs.orpheus import TINY_TOKENS

        self.lm, self.codec, self.tokens = lm, codec, TINY_TOKENS

    def run(self, c: int, tokens: int) -> dict:
        import torch
        from transformers import LogitsProcessor, LogitsProcessorList

        from examples._speech import text_codec
        from examples.orpheus.nodes import prompt_ids
        from wgc_runtime.components.orpheus import audio_mask, window_codes

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
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--tokens", type=int, default=140, help="audio tokens per request")
    ap.add_argument("--placements", nargs="+", default=["cpu", "cpu-2rank"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import torch

    from wgc_runtime.components.pipelines import checkpoints
    from wgc_runtime.host.processes.launcher import Cluster

    torch.set_num_threads(args.threads)
    report: dict = {"tokens": args.tokens, "threads": args.threads, "load": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        lm, codec = checkpoints.orpheus(Path(tmp) / "ckpt", seed=0)
        sets = {
            "checkpoint": str(Path(tmp) / "ckpt" / "lm"),
            "snac_checkpoint": str(Path(tmp) / "ckpt" / "snac"),
        }
        ref = Reference(lm, codec)
        ref.run(1, 14)  # warm-up
        report["reference"] = {c: ref.run(c, args.tokens) for c in args.concurrency}
        for placement in args.placements:
            folder = plan_for(placement, sets, Path(tmp) / placement)
            with Cluster(str(folder), progress=None, ready_timeout=300) as cluster:
                assert cluster.client_address is not None
                served(cluster.client_address, 1, 35)  # warm-up
                report[placement] = {
                    c: served(cluster.client_address, c, args.tokens) for c in args.concurrency
                }
    report["load_after"] = os.getloadavg()
    print_table(report, args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def print_table(report: dict, args) -> None:
    ref = report["reference"]
    print(f"Orpheus TTS, {args.tokens} audio tokens a request, {args.threads} thread(s)")
    print("| side | c | audio s / wall s | first audio (s) | RTF | × throughput | × first audio |")
    print("|---|---|---|---|---|---|---|")
    for side in ["reference", *args.placements]:
        for c in args.concurrency:
            r = report[side][c]
            ratio = r["throughput"] / ref[c]["throughput"]
            first = ref[c]["first_audio_s"] / r["first_audio_s"]
            print(
                f"| {side} | {c} | {r['throughput']:.2f} | {r['first_audio_s']:.3f} | "
                f"{r['rtf']:.3f} | {ratio:.2f} | {first:.2f} |"
            )
    print(f"load before {report['load']}, after {report['load_after']}")


if __name__ == "__main__":
    main()
