"""`wgc serve` under abuse, on the failure-test model (a source on rank 0, a loop on rank 1 whose
length and pace are request options; two requests run at once, 48 may wait): a disconnect storm
leaves nothing running and a short request afterwards runs in normal time; over the limit is
429 with ``Retry-After``; past a deadline is 504; ill-typed options and values are 400; the
Python client is refused at the door too (``rejected``) and may reuse an ended request id; load:
200 requests at concurrency 32, all answered, each with exactly its own outputs."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.narrow import present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")

from tests.e2e.serve_support import Served, served, wgc_exe  # noqa: E402
from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_runtime.host.client import Client, RequestFailed  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")

FAULTS = ROOT / "tests" / "e2e" / "faults"
NATIVE = "/v1/requests"
X = {"modality": "tensor", "data": [1, 2, 3, 4], "dtype": "f32"}


@pytest.fixture(scope="module")
def faults_plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults")
    result = Driver().compile(
        str(FAULTS / "faults.walk"), str(FAULTS / "placements" / "cpu-2rank.yaml")
    )
    assert result.ok, [d.message for d in result.errors]
    sync(out, result.files, check=False)
    return out


@pytest.fixture(scope="module")
def faults(faults_plan):
    with served(str(faults_plan), "--max-queue", "48") as s:
        yield s


def body(**options) -> dict:
    return {"inputs": [X], "want": ["tensor"], "options": options}


def drop(s: Served, options: dict, patience: float | None) -> tuple[bool, bool]:
    """Open an SSE stream and drop the connection (a reset, not a polite close) after its
    first output, or after ``patience`` seconds of waiting for it: (no error status, saw an
    output)."""
    conn = http.client.HTTPConnection(*s.host_port, timeout=60)
    payload = json.dumps({**body(**options), "stream": "sse"})
    conn.request("POST", NATIVE, payload, {"content-type": "application/json"})
    ok, seen = True, False
    assert conn.sock is not None
    conn.sock.settimeout(patience or 60)
    try:
        resp = conn.getresponse()  # sent with the first output (a queued request waits)
        ok = resp.status == 200
        while ok and not seen:
            line = resp.fp.readline()
            if not line:
                break
            seen = line.startswith(b"event: output")
    except TimeoutError:
        pass  # still queued: the client gives up
    if conn.sock is not None:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    conn.close()
    return ok, seen


def held(s: Served) -> tuple[float, float, float]:
    m = s.metrics()
    return (
        m[("wgc_requests_in_flight", ())],
        m[("wgc_conductor_requests_running", ())],
        m[("wgc_conductor_requests_queued", ())],
    )


@pytest.mark.slow
def test_a_disconnect_storm_leaves_nothing_running(faults, tmp_path) -> None:
    slow = {"steps": 1000, "delay_ms": 20, "marker_dir": str(tmp_path)}
    before = faults.metrics().get(("wgc_conductor_requests_total", (("outcome", "cancelled"),)), 0)
    t_normal = time.monotonic()
    status, _ = faults.post(NATIVE, body(steps=2))
    normal = time.monotonic() - t_normal
    assert status == 200
    t0 = time.monotonic()
    with ThreadPoolExecutor(50) as pool:
        # half drop after their first output, half after 0.3 s, most of them still queued
        results = list(pool.map(lambda i: drop(faults, slow, 0.3 if i % 2 else None), range(50)))
    assert all(ok for ok, _ in results)
    deadline = time.monotonic() + 30  # generous: a loaded CI machine is slow, not wrong
    while held(faults) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert held(faults) == (0, 0, 0)
    storm = time.monotonic() - t0
    m = faults.metrics()
    cancelled = m[("wgc_conductor_requests_total", (("outcome", "cancelled"),))] - before
    assert cancelled == 50  # every one, queued or running, was cancelled in the conductor

    # the ranks released what ran: each node marks a request it released, and the loop (rank 1)
    # ran for every request that sent an output
    def released() -> tuple[set[str], set[str]]:
        pairs = [p.name.split("-released-") for p in tmp_path.iterdir()]
        return {r for n, r in pairs if n == "source"}, {r for n, r in pairs if n == "step"}

    ran = sum(seen for _, seen in results)
    deadline = time.monotonic() + 20  # a rank writes its marker when the release reaches it
    while len(released()[1]) < ran and time.monotonic() < deadline:
        time.sleep(0.05)
    sources, steps = released()
    assert len(steps) >= ran >= 25 and steps <= sources
    # and every process says it holds nothing: no request, no KV page
    m = faults.metrics()
    held_by = {dict(k)["process"]: v for (n, k), v in m.items() if n == "wgc_process_requests"}
    assert held_by == {"conductor": 0, "rank 0": 0, "rank 1": 0}
    assert all(
        v == 0 for (n, _), v in m.items() if n in ("wgc_kv_pages_used", "wgc_kv_pages_admitted")
    )
    t1 = time.monotonic()
    status, reply = faults.post(NATIVE, body(steps=2))
    quick = time.monotonic() - t1
    assert status == 200 and len(reply["outputs"]) == 2
    print(
        f"\ndisconnect storm: 50 dropped, all released in {storm:.2f} s; next request {quick:.3f} s"
    )
    assert quick < max(2.0, 10 * normal)  # normal speed again (as fast as before the storm)


@pytest.mark.slow
def test_over_the_limit_is_429_with_retry_after(faults) -> None:
    slow = body(steps=1000, delay_ms=20)
    conns = []
    try:
        for _ in range(50):  # the limit: 2 running + 48 waiting
            conn = http.client.HTTPConnection(*faults.host_port, timeout=60)
            conn.request(
                "POST",
                NATIVE,
                json.dumps({**slow, "stream": "ndjson"}),
                {"content-type": "application/json"},
            )
            conns.append(conn)
        deadline = time.monotonic() + 20
        while held(faults)[0] < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, headers, raw = faults.request("POST", NATIVE, body(steps=2))
        assert status == 429, raw
        assert int(headers["retry-after"]) >= 1
        error = json.loads(raw)["error"]
        assert (
            error["code"] == "overloaded"
            and "its limit (50: 2 running, 48 waiting)" in error["message"]
        )
    finally:
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 30  # generous: a loaded CI machine is slow, not wrong
    while held(faults) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert held(faults) == (0, 0, 0)


@pytest.mark.slow
def test_past_the_deadline_is_504_and_the_request_is_cancelled(faults) -> None:
    t0 = time.monotonic()
    status, reply = faults.post(NATIVE, {**body(steps=1000, delay_ms=20), "deadline": 0.5})
    assert status == 504 and reply["error"]["code"] == "timeout"
    assert reply["error"]["message"] == "the request's deadline (0.5 s) passed"
    assert time.monotonic() - t0 < 10  # not the 20 s the request would take
    deadline = time.monotonic() + 20
    while held(faults) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(faults) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("request_body", "field", "message"),
    [
        (body(steps="abc"), "options.steps", "option `steps` is an int, got `'abc'`"),
        (body(fail=1), "options.fail", "option `fail` is a bool, got `1` (give true or false)"),
        (
            {"inputs": [{**X, "data": [1, 2, 3]}], "want": ["tensor"]},
            "inputs[0].data",
            "expected f32[4], got f32[3] (dim 0 must be 4); flow `run` passes this `tensor` "
            "segment to walk `main` input `x` (f32[4])",
        ),
    ],
)
def test_ill_typed_values_are_400(faults, request_body, field, message) -> None:
    status, reply = faults.post(NATIVE, request_body)
    assert status == 400
    assert {"field": field, "message": message} in reply["error"]["problems"]


@pytest.mark.slow
def test_a_value_a_node_refuses_is_400_and_a_node_bug_is_500(faults) -> None:
    """Past the door, a node that refuses a value (raises `NodeInputError`) answers 400 with its
    message; one that fails otherwise (a plain `ValueError`, which may be a bug) stays a server
    error."""
    status, reply = faults.post(NATIVE, body(fail=True))
    assert status == 400, reply
    error = reply["error"]
    assert error["code"] == "invalid_value" and error["type"] == "invalid_request_error"
    told = "node `source` failed in walk `main`: NodeInputError: the source was told to fail"
    assert told in error["message"]
    status, reply = faults.post(NATIVE, body(crash=True))
    assert status == 500, reply
    assert reply["error"]["type"] == "server_error" and reply["error"]["code"] == "node"
    assert "ValueError: the source was told to crash" in reply["error"]["message"]
    m = faults.metrics()
    assert m[("wgc_requests_total", (("outcome", "invalid_value"), ("route", NATIVE)))] >= 1
    assert faults.post(NATIVE, body())[0] == 200  # the deployment goes on


@pytest.mark.slow
def test_the_python_client_is_refused_at_the_door_and_may_reuse_an_id(faults) -> None:
    x = [("tensor", [1.0, 2.0, 3.0, 4.0])]
    with Client(faults.client_address) as client:
        with pytest.raises(RequestFailed) as info:
            client.submit(x, ["tensor"], {"stpes": 2}, deadline=30).collect()
        assert info.value.error.kind == "rejected"
        assert "unknown option `stpes` (did you mean `steps`?)" in str(info.value)
        t0 = time.monotonic()
        first = client.submit(x, ["tensor"], {"steps": 2}, deadline=30, request_id="same")
        first_out = [present(o.value).tolist() for o in first.collect()]
        again = client.submit(x, ["tensor"], {"steps": 2}, deadline=30, request_id="same")
        assert [present(o.value).tolist() for o in again.collect()] == first_out and len(
            first_out
        ) == 2
        assert time.monotonic() - t0 < 15  # the reused id did not hang until its deadline (30 s)


@pytest.mark.slow
def test_load_200_requests_at_concurrency_32_none_lost(faults) -> None:
    """Every answer is exactly its own request's (a source adds 1, each step doubles)."""

    def one(i: int) -> tuple[int, list[list[float]], list[list[float]]]:
        x = [float(i), i + 1.0, i + 2.0, i + 3.0]
        steps = 1 + i % 4
        request = {"inputs": [{**X, "data": x}], "want": ["tensor"], "options": {"steps": steps}}
        status, reply = faults.post(NATIVE, request, timeout=120)
        got = [o["value"]["data"] for o in reply["outputs"]] if status == 200 else []
        want = [[(v + 1) * 2**k for v in x] for k in range(1, steps + 1)]
        return status, got, want

    t0 = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(200)))
    seconds = time.monotonic() - t0
    assert [status for status, _, _ in results] == [200] * 200
    assert all(got == want for _, got, want in results)
    print(f"\nload: 200 requests at concurrency 32 in {seconds:.2f} s ({200 / seconds:.0f}/s)")
    assert seconds < 120
    deadline = time.monotonic() + 20
    while held(faults) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(faults) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--option", "stpes=2", "--want", "tensor"],
            "options.stpes: unknown option `stpes` (did you mean `steps`?)",
        ),
        (["--option", "steps=abc", "--want", "tensor"], "option `steps` is an int, got `'abc'`"),
        (["--want", "tnesor"], "want: `faults` never emits `tnesor` (did you mean `tensor`?)"),
    ],
)
def test_wgc_run_refuses_what_the_server_refuses(faults_plan, tmp_path, args, message) -> None:
    """`wgc run` has the same door: exit 1, the field and what is allowed, before any process
    starts (nothing is written)."""
    import numpy as np

    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    out = tmp_path / "out"
    cmd = [*wgc_exe(), "run", str(faults_plan), "--input", f"x={tmp_path / 'x.npy'}", *args]
    t0 = time.monotonic()
    r = subprocess.run(
        [*cmd, "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1, r.stderr
    assert "error: the request cannot run:" in r.stderr and message in r.stderr
    assert "ready" not in r.stderr and not out.exists()
    print(f"\nrefused in {time.monotonic() - t0:.1f} s")


@pytest.mark.slow
def test_a_client_that_leaves_a_whole_answer_request_cancels_it(faults) -> None:
    """Not streamed (the answer comes at the end): a client gone before it is noticed all the
    same, its request cancelled in the conductor and nothing held."""
    key = ("wgc_conductor_requests_total", (("outcome", "cancelled"),))
    before = faults.metrics().get(key, 0)
    socks = []
    for _ in range(10):
        conn = http.client.HTTPConnection(*faults.host_port, timeout=60)
        payload = json.dumps(body(steps=1000, delay_ms=20))
        conn.request("POST", NATIVE, payload, {"content-type": "application/json"})
        socks.append(conn)
    deadline = time.monotonic() + 10
    while held(faults)[0] < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(faults)[0] == 10
    for conn in socks:
        conn.close()
    deadline = time.monotonic() + 30  # generous: a loaded CI machine is slow, not wrong
    while held(faults) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(faults) == (0, 0, 0)
    assert faults.metrics().get(key, 0) - before == 10
