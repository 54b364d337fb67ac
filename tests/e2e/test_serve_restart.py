"""`wgc serve` keeps serving through a dead worker and speaks CURVE when hosts are named.

On the failure-test model (a source on rank 0, a loop on rank 1; the ``die`` option makes the loop
kill its own worker with SIGKILL):

* ``--restarts 1``: a request that kills rank 1 fails, saying so; ``/health`` says ``degraded``
  (503) until rank 1 is back, then ``ok`` with one restart; requests are served again (the
  budget itself, and the final failure past it, are `test_restart`'s);
* hosts named (``127.0.0.2``, ``127.0.0.3``): the server reaches the conductor with the client
  key, HTTP requests are served, the announcing line names the key file, a Python client with
  that file is served and one without it is refused."""

from __future__ import annotations

import json
import re
import time

import pytest
import torch

from tests.e2e.runtime_support import TWO_RANKS, compile_faults
from tests.e2e.serve_support import Served, served
from tests.narrow import present
from wgc_runtime.host.client import Client, RequestFailed

pytest.importorskip("fastapi")

NATIVE = "/v1/requests"
X = {"modality": "tensor", "data": [0, 1, 2, 3], "dtype": "f32"}
EXPECTED = [((torch.arange(4.0) + 1) * 2 * 2**i).tolist() for i in range(3)]


def run(s: Served, **options) -> tuple[int, dict]:
    body = {"inputs": [X], "want": ["tensor"], "options": {"steps": 3, **options}}
    status, out = s.post(NATIVE, body, timeout=120)
    return status, out


def values(out: dict) -> list[list[float]]:
    return [o["value"]["data"] for o in out["outputs"]]


def health(s: Served) -> tuple[int, dict]:
    status, _, raw = s.request("GET", "/health", timeout=30)
    return status, json.loads(raw)


@pytest.mark.slow
def test_serve_restarts_a_dead_worker(tmp_path) -> None:
    plan = compile_faults(tmp_path)
    with served(plan, "--restarts", "1", timeout=300) as s:
        status, out = run(s)
        assert status == 200 and values(out) == EXPECTED, out
        code, h = health(s)
        assert code == 200 and h["status"] == "ok" and h["restarts"] == 0, h
        t0 = time.monotonic()
        status, out = run(s, die=True)
        assert status >= 500 and "rank 1 died" in str(out), (status, out)
        seen = set()
        while time.monotonic() - t0 < 180:
            code, h = health(s)
            seen.add((code, h["status"]))
            if h["status"] == "ok":
                break
            time.sleep(0.1)
        back = time.monotonic() - t0
        assert (503, "degraded") in seen and h["status"] == "ok" and h["restarts"] == 1, seen
        status, out = run(s)
        assert status == 200 and values(out) == EXPECTED, out
        served_again = time.monotonic() - t0
        m = s.metrics()  # the restart counted for rank 1 alone; every rank up again
        restarts = {
            dict(k)["process"]: v for (n, k), v in m.items() if n == "wgc_process_restarts_total"
        }
        assert restarts == {"rank 0": 0, "rank 1": 1}, restarts
        assert m[("wgc_process_up", (("process", "rank 1"),))] == 1
        print(f"\nwgc serve: rank 1 back in {back:.1f} s, served again {served_again:.1f} s after")


@pytest.mark.slow
def test_serve_with_named_hosts_uses_the_client_key(tmp_path) -> None:
    plan = compile_faults(tmp_path, TWO_RANKS + "hosts: {0: 127.0.0.2, 1: 127.0.0.3}\n")
    with served(plan, timeout=300) as s:
        assert s.client_address.startswith("tcp://127.0.0.2:")
        status, out = run(s)
        assert status == 200 and values(out) == EXPECTED, out
        found = None
        deadline = time.monotonic() + 30  # the line after the address: the log reader may lag
        while found is None and time.monotonic() < deadline:
            found = re.search(r"key \(CURVE\): (\S+)", "".join(s.log))
            time.sleep(0.05)
        assert found, "".join(s.log)
        x = [("x", torch.arange(4, dtype=torch.float32))]
        with Client(s.client_address, key=found.group(1)) as client:
            outs = client.run(x, ["tensor"], {"steps": 3}, deadline=120)
            assert [present(o.value).tolist() for o in outs] == EXPECTED
        with (
            Client(s.client_address, idle_timeout=60) as plain,
            pytest.raises(RequestFailed) as info,
        ):
            plain.run(x, ["tensor"], {"steps": 3}, deadline=120)
        assert "refused the connection" in info.value.error.message
