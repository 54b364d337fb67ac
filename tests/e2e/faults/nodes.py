"""Toy nodes for the multi-process failure tests (`tests/e2e/test_processes.py`).

Request options drive them: ``fail`` (`Source` refuses its value: a `NodeInputError`), ``crash``
(`Source` fails as a bug would: a plain `ValueError`, which is not a refusal), ``die`` (`Step`
kills its own worker process with SIGKILL), ``steps`` (the loop's length), ``delay_ms`` (sleep
per step) and ``marker_dir`` (every node writes ``<node>-released-<request>`` there when the
runtime releases the request, so a test can see that state was released on every rank). `Step`
appends one K/V token per step to its request's cache in the runtime's paged pool (``ctx.kv``),
so a test can see pages held while a request runs and freed when it ends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

from tests.narrow import present
from wgc_runtime.contract.node import Node, NodeInputError


class _Marking(Node):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.markers: dict[str, str] = {}

    def _remember(self, ctx) -> None:
        where = ctx.options.get("marker_dir")
        if where:
            self.markers[ctx.request_id] = str(where)

    def release(self, request_id: str) -> None:
        where = self.markers.pop(request_id, None)
        if where:
            Path(where, f"{self.name}-released-{request_id}").touch()


class Source(_Marking):
    def forward_one(self, inputs, ctx):
        self._remember(ctx)
        if ctx.options.get("fail"):
            raise NodeInputError("the source was told to fail")
        if ctx.options.get("crash"):
            raise ValueError("the source was told to crash")  # a plain one: not the request's fault
        return {"y": present(inputs["x"]).float() + 1}


class Step(_Marking):
    def forward_one(self, inputs, ctx):
        self._remember(ctx)
        if ctx.options.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        delay = int(ctx.options.get("delay_ms", 0))
        if delay:
            time.sleep(delay / 1000)
        if ctx.kv is not None:
            k = present(inputs["y"]).reshape(1, 1, 1, 4)
            ctx.kv.append(k, k)
        n = ctx.state["n"] = ctx.state.get("n", 0) + 1
        stop = n >= int(ctx.options.get("steps", 3))
        return {"y": present(inputs["y"]) * 2, "stop": torch.tensor(stop)}
