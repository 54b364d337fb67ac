"""Helpers for the `wgc serve` tests: a live server as a subprocess, and raw HTTP.

`served(target, *args)` runs ``wgc serve TARGET --port 0 ARGS`` from the project root, waits for
the URL it prints, yields a `Served`, then stops it with SIGINT and checks it exited 0 and left
no shared memory behind.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from wgc_runtime.host.transport.arena import leaked_segments

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    url: str
    client_address: str
    proc: subprocess.Popen
    log: list[str]

    @property
    def host_port(self) -> tuple[str, int]:
        u = urlparse(self.url)
        return u.hostname or "127.0.0.1", u.port or 80

    key: str | None = None  # the API key requests bear (`Authorization: Bearer`)

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 60
    ) -> tuple[int, dict[str, str], bytes]:
        """One raw HTTP request: (status, headers, body)."""
        conn = http.client.HTTPConnection(*self.host_port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"content-type": "application/json"} if data is not None else {}
            if self.key is not None:
                headers["authorization"] = f"Bearer {self.key}"
            conn.request(method, path, data, headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def post(self, path: str, body: Any, timeout: float = 60) -> tuple[int, Any]:
        status, _, raw = self.request("POST", path, body, timeout)
        return status, json.loads(raw) if raw else None

    def get_json(self, path: str) -> Any:
        status, _, raw = self.request("GET", path)
        assert status == 200, raw
        return json.loads(raw)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``, parsed with prometheus_client's parser."""
        from prometheus_client.parser import text_string_to_metric_families

        status, _, raw = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for family in text_string_to_metric_families(raw.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


def wgc_exe() -> list[str]:
    exe = Path(sys.executable).with_name("wgc")
    return (
        [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    )


@contextlib.contextmanager
def served(
    target: str,
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    preexec_fn: Any = None,
) -> Iterator[Served]:
    """``env``: the server's environment (default: this one's); ``preexec_fn``: run in the
    child before it starts (a `resource.setrlimit`)."""
    cmd = [*wgc_exe(), "serve", target, "--port", "0", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        env=env,
        preexec_fn=preexec_fn,
    )
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stderr or ()), daemon=True)
    reader.start()
    url = ""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while not url and time.monotonic() < deadline and proc.poll() is None:
        url = proc.stdout.readline().strip()
    if not url:
        proc.kill()
        raise AssertionError("wgc serve did not start:\n" + "".join(log))
    address = ""
    for _ in range(50):  # the announcing line is written just before the URL
        found = re.search(r"client address: ((?:tcp|ipc)://[^)\s]+)", "".join(log))
        if found:
            address = found.group(1)
            break
        time.sleep(0.05)
    try:
        yield Served(url, address, proc, log)
    finally:
        kids = _children_of(proc.pid)  # the conductor, the workers
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(10)
        reader.join(5)
        assert code == 0, "".join(log)
        assert leaked_segments(f"wgc-{proc.pid}-") == set(), "shared memory left in /dev/shm"
        gone_by = time.monotonic() + 15  # a child SIGKILLed last may take a moment to go
        while [k for k in kids if _alive(k)] and time.monotonic() < gone_by:
            time.sleep(0.05)
        left = [k for k in kids if _alive(k)]
        assert not left, f"processes left behind: {[_cmdline(k) for k in left]}\n" + "".join(log)


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def sse_events(raw: bytes) -> list[tuple[str, Any]]:
    """(event, data) of every event in a server-sent-events body (``data`` parsed as JSON when
    it is JSON)."""
    out = []
    for block in re.split(r"\r?\n\r?\n", raw.decode()):
        event, data = "message", []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            text = "\n".join(data)
            try:
                out.append((event, json.loads(text)))
            except ValueError:
                out.append((event, text))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is gone, only not reaped yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return str(pid)
