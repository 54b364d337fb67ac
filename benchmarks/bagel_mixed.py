"""A mixed stream of BAGEL text-to-image, editing and understanding requests on one deployment
vs the same requests split by task onto three dedicated deployments (one per task).

    .venv/bin/python benchmarks/bagel_mixed.py [--per-task 3] [--repeat 3] [--steps 50]
        [--threads 1] [--json out.json]

The model is `wgc_models/bagel` at its tiny sizes (seeded random weights) compiled for
`placements/cpu.yaml` (one CPU rank, ``max_batch`` 4, four requests admitted at a time), served
by `Cluster` (a conductor and a worker process, as `wgc run --serve` starts them), requests
sent by `Client` (one per request, each in its own thread, timing its request from submission
to its last output). The requests: ``--per-task`` each of text-to-image (a prompt, an image
out), editing (a 24 x 40 photo and a prompt, an image out) and understanding (the photo and a
question, at most 7 tokens out), interleaved, each with its own seed. Four deployments of the
same plan are started first (start-up is outside every timing) and held together; then,
interleaved ``--repeat`` times:

* **mixed**: every request submitted at once to the one deployment: the executor batches the
  denoising steps of the text-to-image requests together, and of the editing requests (their
  own walk, on the input image's grid) together, and decodes alongside;
* **per task**: each task's requests submitted at once to its own deployment, the three tasks
  one after another (as a system that needs one configuration per task runs them on one
  machine): the stream's wall time is the sum of the three.

Every output is checked against the same request (same seed) run alone on the mixed
deployment afterwards: images to at most 1 u8 step, tokens equal; the largest differences are
reported. Reported: requests/s of each side (median (best) of the rounds), the per-task median
latency (all rounds' requests) and the alone latency, and what each deployment holds: resident
memory (``VmRSS``) and private memory (``Private_*`` of ``smaps_rollup``) of its processes from
/proc, its weights (the parameters and buffers of the modules its rank loads, counted here on
the meta device) and its KV pool (the plan's ``kv_bytes``), with the same two at the real
sizes (BAGEL-7B-MoT's, 2 bytes a parameter, the `real-3xh100` plan's pools) — one deployment
holds them once, three dedicated ones three times.

The four start-ups (several seconds each on a busy 2-core machine; they cannot overlap: they
run one after another) dominate a small run: ``--per-task 1 --repeat 1 --steps 4``
(`benchmarks/all.py --quick`) takes about a minute there, the defaults about two.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ("t2i", "edit", "i2t")


def photo() -> Any:
    import torch

    return torch.arange(24 * 40 * 3).reshape(24, 40, 3).mul(3).remainder(251).to(torch.uint8)


def requests(per_task: int) -> list[dict]:
    """The stream, tasks interleaved: name, task, inputs, want, options, seed."""
    img, out = photo(), []
    for i in range(per_task):
        for task in TASKS:
            if task == "t2i":
                inputs, want, options = [("text", f"a red cube, view {i}")], ["image"], {}
            elif task == "edit":
                inputs, want, options = (
                    [("image", img), ("text", f"make it blue {i}")],
                    ["image"],
                    {},
                )
            else:
                inputs, want = [("image", img), ("text", f"what is it? ({i})")], ["text"]
                options = {"max_tokens": 7}
            seed = 100 * i + TASKS.index(task)
            out.append(
                {
                    "name": f"{task}-{i}",
                    "task": task,
                    "inputs": inputs,
                    "want": want,
                    "options": options,
                    "seed": seed,
                }
            )
    return out


def result(outputs: list) -> Any:
    """The request's image (u8 [H, W, 3]) or its decoded tokens (i64 [n])."""
    import torch

    images = [o.value for o in outputs if o.modality == "image"]
    if images:
        return images[0]
    return torch.cat([o.value.reshape(-1) for o in outputs if o.modality == "text"])


def stream(address: str, reqs: list[dict], tag: str) -> tuple[float, dict[str, tuple]]:
    """``reqs`` submitted at once, one client each: the wall time and, per request name,
    (seconds from submission to its last output, its result)."""
    from wgc_runtime.host.client import Client

    got: dict[str, tuple | BaseException] = {}
    start = threading.Barrier(len(reqs) + 1)

    def one(r: dict) -> None:
        try:
            with Client(address) as client:
                start.wait()
                t0 = time.perf_counter()
                s = client.submit(
                    r["inputs"],
                    r["want"],
                    r["options"],
                    deadline=600,
                    request_id=f"{tag}-{r['name']}",
                    seed=r["seed"],
                )
                outs = s.collect()
                got[r["name"]] = (time.perf_counter() - t0, result(outs))
        except BaseException as exc:  # reported below
            got[r["name"]] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in reqs]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    bad = [v for v in got.values() if isinstance(v, BaseException)]
    if bad:
        raise SystemExit(f"a request failed: {bad[0]!r}")
    return wall, {k: v for k, v in got.items() if not isinstance(v, BaseException)}


def proc_memory(pids: list[int]) -> dict[str, int]:
    """Bytes resident (``VmRSS``) and private (``Private_Clean`` + ``Private_Dirty``) summed
    over ``pids``, from /proc."""
    rss = private = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1]) * 1024
    return {"rss": rss, "private": private}


def weight_bytes(model: str, bytes_per_param: int | None) -> int:
    """Parameters and buffers of what a rank of `placements/cpu.yaml` loads (`Bagel`'s LLM and
    ViT parts, the VAE once: its encoder and decoder nodes share it), counted on the meta
    device; ``bytes_per_param`` None: as built."""
    import torch

    from wgc_models.bagel.autoencoder_kl import AutoencoderKL
    from wgc_models.bagel.config import CONFIGS
    from wgc_models.bagel.model import Bagel

    cfg = CONFIGS[model]
    with torch.device("meta"):
        llm, vit = Bagel(cfg, vit=False, llm=True), Bagel(cfg, vit=True, llm=False)
        mods: list[torch.nn.Module] = [llm, vit, AutoencoderKL(cfg.vae)]
    total = 0
    for m in mods:
        for t in [*m.parameters(), *m.buffers()]:
            total += t.numel() * (bytes_per_param or t.element_size())
    return total


def kv_bytes(plan: Path) -> int:
    ranks = json.loads((plan / "plan.json").read_text())["ranks"]
    return sum(int(r["memory"]["kv_bytes"]) for r in ranks)


def max_diff(a: Any, b: Any) -> int:
    if a.shape != b.shape:
        return 10**9  # a different number of tokens: reported as unequal
    return int((a.long() - b.long()).abs().max()) if a.numel() else 0


def compiled(steps: int, tmp: Path) -> Path:
    if steps == 50:  # the .walk's own: the committed plan
        return ROOT / "generated" / "bagel" / "cpu"
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    walk = ROOT / "wgc_models" / "bagel" / "bagel.walk"
    res = Driver().compile(
        str(walk), str(walk.parent / "placements" / "cpu.yaml"), {"steps": str(steps)}
    )
    if not res.ok:
        raise SystemExit("\n".join(d.message for d in res.errors))
    sync(tmp, res.files, check=False)
    return tmp


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--per-task", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50, help="the schedule's timesteps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from wgc_runtime.host.processes.launcher import Cluster

    reqs = requests(args.per_task)
    by_task = {t: [r for r in reqs if r["task"] == t] for t in TASKS}
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        plan = compiled(args.steps, Path(tmp))
        os.chdir(ROOT)  # workers import the nodes as `wgc_models.bagel.nodes`
        names = ["mixed", *TASKS]
        clusters = {n: Cluster(str(plan), progress=None, ready_timeout=300) for n in names}
        try:
            for c in clusters.values():
                c.start()
            start_s = {n: c.timings["ready"] for n, c in clusters.items()}
            addr = {n: c.client_address or "" for n, c in clusters.items()}
            for n in names:  # warm-up: one request of each task it serves
                stream(addr[n], [r for r in reqs[:3] if n in ("mixed", r["task"])], f"warm-{n}")
            walls: dict[str, list[float]] = {"mixed": [], "per_task": []}
            lat: dict[str, dict[str, list[float]]] = {
                s: {t: [] for t in TASKS} for s in ("mixed", "per_task")
            }
            outs: dict[str, dict[str, Any]] = {"mixed": {}, "per_task": {}}
            for k in range(args.repeat):
                wall, got = stream(addr["mixed"], reqs, f"mixed{k}")
                walls["mixed"].append(wall)
                for r in reqs:
                    lat["mixed"][r["task"]].append(got[r["name"]][0])
                    outs["mixed"][r["name"]] = got[r["name"]][1]
                total = 0.0
                for t in TASKS:
                    wall, got = stream(addr[t], by_task[t], f"task{k}")
                    total += wall
                    for r in by_task[t]:
                        lat["per_task"][t].append(got[r["name"]][0])
                        outs["per_task"][r["name"]] = got[r["name"]][1]
                walls["per_task"].append(total)
            alone: dict[str, tuple] = {}
            for r in reqs:
                alone[r["name"]] = stream(addr["mixed"], [r], "alone")[1][r["name"]]
            memory = {n: proc_memory(list(c.pids.values())) for n, c in clusters.items()}
            processes = len(clusters["mixed"].pids)
        finally:
            for c in clusters.values():
                c.stop()
        kv_tiny = kv_bytes(plan)
    load_after = loadavg()

    diffs = {
        side: {
            t: max(max_diff(outs[side][r["name"]], alone[r["name"]][1]) for r in by_task[t])
            for t in TASKS
        }
        for side in outs
    }
    n = len(reqs)
    report = {
        "per_task": args.per_task,
        "repeat": args.repeat,
        "steps": args.steps,
        "threads": args.threads,
        "requests": n,
        "rps": {
            s: {"median": n / statistics.median(w), "best": n / min(w)} for s, w in walls.items()
        },
        "wall_s": walls,
        "p50_s": {s: {t: statistics.median(v) for t, v in d.items()} for s, d in lat.items()},
        "alone_s": {t: statistics.median(alone[r["name"]][0] for r in by_task[t]) for t in TASKS},
        "max_diff": diffs,
        "memory": {
            "processes_per_deployment": processes,
            "mixed": memory["mixed"],
            "per_task": {t: memory[t] for t in TASKS},
            "weights_bytes": weight_bytes("tiny", None),
            "kv_bytes": kv_tiny,
            "real_weights_bytes": weight_bytes("real", 2),
            "real_kv_bytes": kv_bytes(ROOT / "generated" / "bagel" / "real-3xh100"),
        },
        "start_s": start_s,
        "load": [load_before, load_after],
    }
    for side, d in diffs.items():
        for t, v in d.items():
            limit = 1 if t != "i2t" else 0
            assert v <= limit, f"{side} {t}: differs from the request alone by {v}"
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def table(r: dict) -> str:
    """The README's two tables from a report: the stream, then what each side holds."""
    rps, p50, diff = r["rps"], r["p50_s"], r["max_diff"]
    out = [
        f"{r['requests']} requests ({r['per_task']} per task), {r['steps']} timesteps, "
        f"{r['repeat']} round(s), load {r['load'][0]} -> {r['load'][1]}",
        "",
        "| side | requests/s | T2I p50 | edit p50 | I2T p50 "
        "| max diff vs alone (T2I / edit / I2T) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for side, label in (
        ("mixed", "one deployment, mixed stream"),
        ("per_task", "three deployments, one task each, one after another"),
    ):
        out.append(
            f"| {label} | {rps[side]['median']:.2f} ({rps[side]['best']:.2f}) "
            + "".join(f"| {p50[side][t]:.2f} s " for t in TASKS)
            + f"| {' / '.join(str(diff[side][t]) for t in TASKS)} |"
        )
    out.append(
        "| each request alone | — "
        + "".join(f"| {r['alone_s'][t]:.2f} s " for t in TASKS)
        + "| — |"
    )
    out.append(
        "| **mixed's gain** (requests/s: mixed / per task; latency: per task / mixed) "
        f"| **{rps['mixed']['median'] / rps['per_task']['median']:.2f}×** "
        + "".join(f"| {p50['per_task'][t] / p50['mixed'][t]:.2f}× " for t in TASKS)
        + "| |"
    )
    m = r["memory"]
    three = {k: sum(v[k] for v in m["per_task"].values()) for k in ("rss", "private")}

    def held(what: str, one: float, many: float, unit: int, fmt: str) -> str:
        name = {2**20: " MiB", 2**30: " GiB", 1: ""}[unit]
        return (
            f"| {what} | {one / unit:{fmt}}{name} | {many / unit:{fmt}}{name} | {many / one:.2f}× |"
        )

    procs = m["processes_per_deployment"]
    out += [
        "",
        "| what is held | one deployment | three dedicated deployments | three / one |",
        "| --- | --- | --- | --- |",
        held("processes", procs, 3 * procs, 1, ".0f"),
        held("resident (VmRSS, /proc)", m["mixed"]["rss"], three["rss"], 2**20, ".0f"),
        held("private (smaps_rollup)", m["mixed"]["private"], three["private"], 2**20, ".0f"),
        held("weights, tiny", m["weights_bytes"], 3 * m["weights_bytes"], 2**20, ".2f"),
        held("KV pool, tiny", m["kv_bytes"], 3 * m["kv_bytes"], 2**20, ".2f"),
        held(
            "weights, real sizes (bf16)",
            m["real_weights_bytes"],
            3 * m["real_weights_bytes"],
            2**30,
            ".1f",
        ),
        held("KV pools, `real-3xh100`", m["real_kv_bytes"], 3 * m["real_kv_bytes"], 2**30, ".1f"),
    ]
    return "\n".join(out)


if __name__ == "__main__":
    main()
