"""`wgc serve` over HTTP vs what a user would otherwise run: the ZeroMQ `Client` on the same
deployment (what `wgc run --serve` offered before), and `wgc run` once per request.

    .venv/bin/python benchmarks/served_http.py [--model faults|orpheus|both] [--requests 200]
        [--concurrency 32] [--repeat 3] [--cold 1] [--json out.json]

Models: ``faults`` (the failure-test model, `tests/e2e/faults`, 2 CPU ranks: a source and a
3-step loop on f32[4], so the time is the runtime's and the transport's, not the model's) and
``orpheus`` (`generated/orpheus/cpu`, the toy-sized real architecture on one CPU rank: text in,
streamed audio out). One `wgc serve` process (conductor and workers as `wgc run` starts them) is
started per model; worker start is outside the timings. Sides, interleaved ``--repeat`` times,
every side sending the same requests:

* **HTTP** (`/v1/requests`, JSON, the whole answer at once; for Orpheus also
  `/v1/audio/speech`, streamed WAV): one at a time (latency: median and p90), then
  ``--requests`` at ``--concurrency`` (requests/s), each from its own keep-alive connection per
  thread (`http.client`);
* **Client**: the same requests through `wgc_runtime.host.client.Client` on the server's
  conductor address (one client per thread; ZeroMQ and msgpack, no HTTP);
* **wgc run**: the same request as ``wgc run GENERATED_DIR --input ... -o DIR``, a fresh process
  per request, as a user without a server runs it (start-up, loading and the request;
  ``--cold`` times).

Every answer is checked: HTTP and Client outputs equal for the same request (bit for bit; the
server's ``--seed``). Reported: latency per side, the HTTP overhead per request (HTTP − Client
median), requests/s at the concurrency for both (and their ratio), ``wgc run``'s time per
request, for the speech route the time to the first audio byte vs the whole answer, and the
machine load before and after (`os.getloadavg`).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.serve_support import Served, served, wgc_exe  # noqa: E402
from wgc_runtime.host.client import Client  # noqa: E402

SEED = 5


# ---------------------------------------------------------------- the models' requests


def faults_request(i: int) -> tuple[list[Any], list[str], dict[str, Any]]:
    x = np.arange(4, dtype=np.float32) + i
    return [("tensor", x)], ["tensor"], {}


def orpheus_request(i: int) -> tuple[list[Any], list[str], dict[str, Any]]:
    return [("text", f"hello number {i}")], ["audio"], {}


def as_json(request: tuple[list[Any], list[str], dict[str, Any]]) -> dict[str, Any]:
    segments, want, options = request
    inputs = []
    for modality, data in segments:
        if isinstance(data, np.ndarray):
            raw = base64.b64encode(data.tobytes()).decode()
            data = {"dtype": "f32", "shape": list(data.shape), "b64": raw}
        inputs.append({"modality": modality, "data": data})
    return {"inputs": inputs, "want": want, "options": options}


# ---------------------------------------------------------------- the sides


class Http:
    """One keep-alive connection per thread."""

    def __init__(self, s: Served) -> None:
        self.s = s
        self.local = threading.local()

    def conn(self) -> http.client.HTTPConnection:
        c = getattr(self.local, "conn", None)
        if c is None:
            c = self.local.conn = http.client.HTTPConnection(*self.s.host_port, timeout=120)
        return c

    def post(self, path: str, body: dict[str, Any]) -> http.client.HTTPResponse:
        """POST on this thread's connection, opened again when the server closed it (uvicorn
        closes one idle for 5 s)."""
        data, headers = json.dumps(body), {"content-type": "application/json"}
        try:
            self.conn().request("POST", path, data, headers)
            return self.conn().getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn().close()
            self.local.conn = None
            self.conn().request("POST", path, data, headers)
            return self.conn().getresponse()

    def native(self, body: dict[str, Any]) -> list[bytes]:
        resp = self.post("/v1/requests", body)
        raw = resp.read()
        assert resp.status == 200, raw[:300]
        return [base64.b64decode(o["value"]["b64"]) for o in json.loads(raw)["outputs"]]

    def speech(self, text: str) -> tuple[float, float, int]:
        """(seconds to the first audio byte after the header, seconds to the end, bytes)."""
        t0 = time.perf_counter()
        body = {"model": "orpheus", "input": text, "response_format": "wav"}
        resp = self.post("/v1/audio/speech", body)
        assert resp.status == 200
        header = resp.read(44)
        first = resp.read(2)
        t_first = time.perf_counter() - t0
        rest = resp.read()
        return t_first, time.perf_counter() - t0, len(header) + len(first) + len(rest)


class Zmq:
    """One `Client` per thread."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.local = threading.local()
        self.clients: list[Client] = []
        self.lock = threading.Lock()

    def client(self) -> Client:
        c = getattr(self.local, "client", None)
        if c is None:
            c = self.local.client = Client(self.address)
            with self.lock:
                self.clients.append(c)
        return c

    def run(self, request: tuple[list[Any], list[str], dict[str, Any]]) -> list[bytes]:
        segments, want, options = request
        outs = self.client().submit(segments, want, options, deadline=120, seed=SEED).collect()
        return [o.value.numpy().tobytes() for o in outs if o.value is not None]

    def close(self) -> None:
        for c in self.clients:
            c.close()


def latencies(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return out


def throughput(fn, n: int, concurrency: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(fn, range(n)))
    return n / (time.perf_counter() - t0)


def wgc_run(plan: str, request, tmp: Path) -> float:
    segments, want, options = request
    args = []
    for modality, data in segments:
        if isinstance(data, np.ndarray):
            path = tmp / "x.npy"
            np.save(path, data)
            data = str(path)
        args += ["--input", f"{'x' if modality == 'tensor' else modality}={data}"]
    for w in want:
        args += ["--want", w]
    for k, v in options.items():
        args += ["--option", f"{k}={v}"]
    t0 = time.perf_counter()
    r = subprocess.run(
        [*wgc_exe(), "run", plan, *args, "--seed", str(SEED), "-o", str(tmp / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return time.perf_counter() - t0


# ---------------------------------------------------------------- one model


def bench(model: str, plan: str, make, args) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "plan": plan, "load_before": os.getloadavg()[0]}
    with served(plan, "--seed", str(SEED), "--max-queue", str(max(64, args.concurrency))) as s:
        h, z = Http(s), Zmq(s.client_address)
        try:
            # the same answers both ways
            for i in range(3):
                assert h.native(as_json(make(i))) == z.run(make(i)), "HTTP != Client"
            rows: dict[str, list[float]] = {"http_lat": [], "zmq_lat": [], "http_rps": []}
            rows["zmq_rps"] = []
            speech_first: list[float] = []
            speech_total: list[float] = []
            for _ in range(args.repeat):
                n = max(10, args.requests // 10)
                rows["http_lat"] += latencies(lambda i: h.native(as_json(make(i))), n)
                rows["zmq_lat"] += latencies(lambda i: z.run(make(i)), n)
                rows["http_rps"].append(
                    throughput(
                        lambda i: h.native(as_json(make(i))), args.requests, args.concurrency
                    )
                )
                rows["zmq_rps"].append(
                    throughput(lambda i: z.run(make(i)), args.requests, args.concurrency)
                )
                if model == "orpheus":
                    for i in range(n):
                        first, total, _ = h.speech(f"hello number {i}")
                        speech_first.append(first)
                        speech_total.append(total)
        finally:
            z.close()
    for side in ("http", "zmq"):
        lat = sorted(rows[f"{side}_lat"])
        out[f"{side}_latency_ms_median"] = 1000 * statistics.median(lat)
        out[f"{side}_latency_ms_p90"] = 1000 * lat[int(0.9 * (len(lat) - 1))]
        out[f"{side}_rps_median"] = statistics.median(rows[f"{side}_rps"])
        out[f"{side}_rps_best"] = max(rows[f"{side}_rps"])
    out["http_overhead_ms"] = out["http_latency_ms_median"] - out["zmq_latency_ms_median"]
    out["rps_http_over_zmq"] = out["http_rps_median"] / out["zmq_rps_median"]
    if speech_first:
        out["speech_first_byte_ms_median"] = 1000 * statistics.median(speech_first)
        out["speech_total_ms_median"] = 1000 * statistics.median(speech_total)
    with tempfile.TemporaryDirectory() as tmp:
        cold = [wgc_run(plan, make(0), Path(tmp)) for _ in range(args.cold)]
    out["wgc_run_s_median"] = statistics.median(cold) if cold else None
    out["load_after"] = os.getloadavg()[0]
    return out


def faults_plan(tmp: Path) -> str:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    faults = ROOT / "tests" / "e2e" / "faults"
    result = Driver().compile(
        str(faults / "faults.walk"), str(faults / "placements" / "cpu-2rank.yaml")
    )
    assert result.ok, [d.message for d in result.errors]
    sync(tmp, result.files, check=False)
    return str(tmp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["faults", "orpheus", "both"], default="both")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", type=int, default=1, help="`wgc run` processes to time")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.model in ("faults", "both"):
            results.append(bench("faults", faults_plan(Path(tmp)), faults_request, args))
        if args.model in ("orpheus", "both"):
            results.append(bench("orpheus", "generated/orpheus/cpu", orpheus_request, args))
    for r in results:
        print(
            f"\n== {r['model']} ({r['plan']}), load {r['load_before']:.2f} -> {r['load_after']:.2f}"
        )
        print(
            f"  one at a time: HTTP {r['http_latency_ms_median']:.1f} ms (p90 "
            f"{r['http_latency_ms_p90']:.1f}), Client {r['zmq_latency_ms_median']:.1f} ms (p90 "
            f"{r['zmq_latency_ms_p90']:.1f}); HTTP overhead {r['http_overhead_ms']:.1f} ms"
        )
        print(
            f"  {args.requests} at concurrency {args.concurrency}: HTTP {r['http_rps_median']:.1f}"
            f" req/s (best {r['http_rps_best']:.1f}), Client {r['zmq_rps_median']:.1f} req/s "
            f"(best {r['zmq_rps_best']:.1f}); HTTP/Client {r['rps_http_over_zmq']:.2f}"
        )
        if "speech_first_byte_ms_median" in r:
            print(
                f"  /v1/audio/speech: first audio byte {r['speech_first_byte_ms_median']:.1f} ms, "
                f"whole answer {r['speech_total_ms_median']:.1f} ms"
            )
        if r["wgc_run_s_median"] is not None:
            print(f"  wgc run, one process per request: {r['wgc_run_s_median']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
