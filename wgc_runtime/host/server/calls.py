"""One HTTP request's run through the deployment, the same for every route.

`Call.open` checks every segment's text and arrays against the deployment's input limits
(`wgc_runtime.host.inputs.Limits`: HTTP 400 naming the segment), then the request at the door
(`wgc_runtime.host.admission.admit`, strict: HTTP 400 with every problem), refuses it when the
server already holds its limit of requests (the conductor's ``max_concurrent_requests`` running plus
``max_queue`` waiting: HTTP 429 with ``Retry-After``), and submits it. `Call.events` yields its
outputs as the conductor sends them and raises `HttpError` when it fails: past its ``deadline`` the
request is cancelled and answers 504 (so does a conductor ``timeout``); ``rejected`` and a flow's
``fail`` are 400, a dead rank 503, any other failure 500. Whenever a call ends before its `Finished`
(the client went away, the handler was cancelled) it is cancelled in the conductor, which releases
it on every rank.
`Call.gather` collects a whole request for a non-streaming response, cancelling it when the
client disconnects first.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request as HttpRequest

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.kinds import Cause, FailKind
from wgc_runtime.core.conductor.door import Problem, describe
from wgc_runtime.host.admission import admit
from wgc_runtime.host.audio import RateError, to_rate
from wgc_runtime.host.inputs import InputError, Limits, check_value
from wgc_runtime.host.server.access_log import is_logged, ran, record
from wgc_runtime.host.server.conform import conform as conform  # its import path before the split
from wgc_runtime.host.server.disconnects import chain as _chain
from wgc_runtime.host.server.disconnects import disconnected as _disconnected
from wgc_runtime.host.server.disconnects import empty as _empty
from wgc_runtime.host.server.gateway import Gateway, Pending
from wgc_runtime.host.server.metrics import Metrics
from wgc_runtime.host.server.model import ModelInfo

T = TypeVar("T")

IDLE_TIMEOUT = 30.0  # no word from the conductor for this long: it is wedged

STATUS = {
    FailKind.REJECTED: 400,
    FailKind.BUSY: 429,
    FailKind.FAIL: 400,
    FailKind.TIMEOUT: 504,
    FailKind.CANCELLED: 499,
    FailKind.INTERNAL: 503,
}


class HttpError(Exception):
    """An error answer: HTTP ``status``, the OpenAI error body's ``code`` and message, the
    door's problems, extra headers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        problems: Sequence[Problem] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.problems = tuple(problems)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        error: dict[str, Any] = {"message": self.message, "type": kind, "code": self.code}
        if self.problems:
            error["param"] = self.problems[0].field
            error["problems"] = [{"field": p.field, "message": p.message} for p in self.problems]
        return {"error": error}


@dataclass
class Server:
    """What every route shares: the model, the connection, the metrics and the settings."""

    spec: ConductorSpec
    info: ModelInfo
    gateway: Gateway
    metrics: Metrics
    seed: int | None = None  # the seed of requests that name none (`wgc serve --seed`)
    max_queue: int = 64  # requests that may wait behind the conductor's cap
    limits: Limits = field(default_factory=Limits)  # what one input may be (`--limit`)
    body_timeout_s: float = 30.0  # a request body's longest pause (`guard.Guard`)
    in_flight: int = 0
    mean_s: float = 1.0  # a moving average of request time, for Retry-After

    @property
    def limit(self) -> int:
        return self.spec.max_concurrent_requests + self.max_queue

    def retry_after(self) -> int:
        waves = (self.in_flight - self.limit + 1) / max(1, self.spec.max_concurrent_requests)
        return max(1, min(60, math.ceil(self.mean_s * max(1.0, waves))))


@dataclass(eq=False)
class Call:
    """One request (see the module docstring); ``outputs`` counts them per modality, ``first``
    says when each modality's first output came (seconds after admission)."""

    server: Server
    route: str
    segments: list[Segment]
    want: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    deadline: float | None = None
    trace: bool = False
    scope: MutableMapping[str, Any] | None = None  # the HTTP request's: its log line's figures
    audio_field: str | None = None  # the field that carried the audio (else `inputs[i]`)
    session: str | None = None  # the session it continues (`sessions`)
    rid: str = field(default_factory=lambda: f"http-{uuid.uuid4().hex[:16]}")
    pending: Pending | None = None
    t0: float = 0.0
    outputs: dict[str, int] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)
    audio_samples: int = 0
    audio_ends: float = 0.0  # when the audio received so far ends, played from its first chunk
    walks: int = 0  # walks finished (traced when logged; only ``trace`` shows them)
    _closed: bool = False

    @property
    def prompt_tokens(self) -> int:
        """The text segments' tokens (the stand-in byte tokenizer's: UTF-8 bytes)."""
        n = 0
        for seg in self.segments:
            if seg.modality == "text":
                d = seg.data
                n += len(d.encode("utf-8", "surrogatepass")) if isinstance(d, str) else _numel(d)
        return n

    def open(self) -> Call:
        s = self.server
        seed = self.seed if self.seed is not None else s.seed
        try:  # every entrance's audio at the model's rate (a no-op when a route did it already)
            self.segments = to_rate(self.segments, s.info.input_rate)
        except RateError as exc:
            p = Problem(self.audio_field or f"inputs[{exc.index}]", str(exc).partition(": ")[2])
            raise HttpError(400, str(p), code="invalid_value", problems=[p]) from None
        self._check_limits()
        request = s.spec.request(self.segments, self.want, self.options)
        _, problems = admit(
            s.spec, request, strict=True, seed=seed, limits=s.limits, session=self.session
        )
        if problems:
            s.metrics.requests.labels(self.route, "rejected").inc()
            raise HttpError(400, describe(problems), code="rejected", problems=problems)
        if s.in_flight >= s.limit:
            s.metrics.requests.labels(self.route, "overloaded").inc()
            wait = s.retry_after()
            raise HttpError(
                429,
                f"the server holds {s.in_flight} requests, its limit ({s.limit}: "
                f"{s.spec.max_concurrent_requests} running, {s.max_queue} waiting); retry in "
                f"{wait} s",
                code="overloaded",
                headers={"Retry-After": str(wait)},
            )
        s.in_flight += 1
        s.metrics.in_flight.set(s.in_flight)
        self.t0 = time.monotonic()
        logged = self.scope is not None and is_logged(self.scope)  # its line counts the walks
        self.pending = s.gateway.submit(
            self.rid,
            self.segments,
            self.want,
            self.options,
            seed,
            self.trace or logged,
            self.session,
        )
        if self.scope is not None and logged:
            figures = record(self.scope)
            figures["id"] = self.rid if "id" not in figures else f"{figures['id']},{self.rid}"
            figures["prompt_tokens"] = figures.get("prompt_tokens", 0) + self.prompt_tokens
        return self

    def _check_limits(self) -> None:
        try:
            for i, seg in enumerate(self.segments):
                check_value(seg.data, f"inputs[{i}].data", self.server.limits)
                for k, v in seg.fields:
                    check_value(v, f"inputs[{i}].fields.{k}", self.server.limits)
        except InputError as exc:
            self.server.metrics.requests.labels(self.route, "rejected").inc()
            where, _, why = str(exc).partition(": ")
            problem = Problem(where, why)
            raise HttpError(400, str(exc), code="too_large", problems=[problem]) from None

    async def events(self) -> AsyncGenerator[m.Output | c.WalkTrace, None]:
        """Outputs (and, when traced, walk events) as they arrive; raises `HttpError`."""
        assert self.pending is not None
        try:
            while True:
                msg = await self._next(self.pending)
                if isinstance(msg, m.Finished):
                    if msg.ok:
                        self._close("ok")
                        return
                    kind = FailKind(msg.kind or FailKind.INTERNAL)
                    if msg.cause is Cause.INPUT:  # a node refused a value of the request
                        self._close("invalid_value")
                        raise HttpError(400, msg.message or "bad value", code="invalid_value")
                    self._close(str(kind))
                    status = STATUS.get(kind, 500)
                    # busy: the session's running request (or every kept session's) ends in
                    # about a request's time
                    wait = max(1, min(60, math.ceil(self.server.mean_s)))
                    headers = {"Retry-After": str(wait)} if kind is FailKind.BUSY else None
                    raise HttpError(
                        status, msg.message or "request failed", code=str(kind), headers=headers
                    )
                if isinstance(msg, m.Output):
                    self._count(msg)
                    yield msg
                elif isinstance(msg, c.WalkTrace):
                    self.walks += msg.done
                    if self.trace:
                        yield msg
        finally:
            self._close("disconnected")

    async def collect(self) -> list[m.Output]:
        """Every output of the request."""
        return [e async for e in self.events() if isinstance(e, m.Output)]

    async def gather(self, http: HttpRequest) -> list[m.Output]:
        """`collect`, cancelled when the client disconnects first."""
        return await until_disconnect(http, self.collect())

    def cancel(self) -> None:
        self._close("cancelled")

    async def primed(self, http: HttpRequest) -> AsyncIterator[m.Output | c.WalkTrace]:
        """`events`, once the first has arrived: a request that fails (or times out) before
        its first output answers with its HTTP status instead of an empty stream; cancelled
        when the client disconnects while waiting for it."""
        it = self.events()
        first = asyncio.ensure_future(anext(it))
        gone = asyncio.ensure_future(_disconnected(http))
        try:
            await asyncio.wait({first, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not first.done():
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            await it.aclose()
            raise HttpError(499, "the client disconnected", code="disconnected")
        try:
            head = first.result()
        except StopAsyncIteration:
            return _empty()
        return _chain(head, it)

    async def _next(self, pending: Pending) -> m.Message:
        while True:
            now = time.monotonic()
            idle = pending.last_heard + IDLE_TIMEOUT - now
            ends = None if self.deadline is None else self.t0 + self.deadline
            wait = idle if ends is None else min(idle, ends - now)
            try:
                return await asyncio.wait_for(pending.events.get(), max(0.0, wait))
            except TimeoutError:
                pass
            if ends is not None and time.monotonic() >= ends:
                self._close("timeout")
                raise HttpError(
                    504, f"the request's deadline ({self.deadline:g} s) passed", code="timeout"
                ) from None
            if time.monotonic() >= pending.last_heard + IDLE_TIMEOUT:
                self._close("timeout")
                raise HttpError(
                    504, f"no word from the conductor for {IDLE_TIMEOUT:g} s", code="timeout"
                ) from None

    def _count(self, msg: m.Output) -> None:
        n = self.outputs.get(msg.modality, 0)
        self.outputs[msg.modality] = n + 1
        if n == 0:
            self.first[msg.modality] = time.monotonic() - self.t0
            self.server.metrics.first_output.labels(self.route, msg.modality).observe(
                self.first[msg.modality]
            )
        if msg.modality.startswith("audio") and msg.data is not None:
            self._audio(msg.modality, int(msg.data.numel()))

    def _audio(self, modality: str, samples: int) -> None:
        """A listener's buffer: playback starts with the first chunk and stalls when it runs dry
        (`metrics`: ``wgc_audio_buffer_seconds``, ``wgc_audio_underruns_total``)."""
        now = time.monotonic()
        metrics = self.server.metrics
        if self.audio_samples:
            ahead = self.audio_ends - now
            metrics.buffer.labels(self.route).observe(max(0.0, ahead))
            if ahead < 0:
                metrics.underruns.labels(self.route).inc()
                self.audio_ends = now  # the player waited for this chunk
        else:
            self.audio_ends = now
        self.audio_samples += samples
        self.audio_ends += samples / self.server.info.rate(modality)

    def timing(self) -> dict[str, Any]:
        """This request's own figures, as the native route reports them: its first output per
        modality (seconds after admission) and, with audio, the audio's length and the
        real-time factor (seconds taken per second of audio, so far)."""
        out: dict[str, Any] = {"first_output_s": {k: round(v, 6) for k, v in self.first.items()}}
        if self.audio_samples:
            audio_s = self.audio_samples / self.server.info.rate("audio")
            out["audio_seconds"] = round(audio_s, 6)
            out["real_time_factor"] = round((time.monotonic() - self.t0) / audio_s, 6)
        return out

    def _close(self, outcome: str) -> None:
        """End the call once: cancel it in the conductor unless it finished, record it."""
        if self._closed or self.pending is None:
            return
        self._closed = True
        s = self.server
        if self.pending.finished is None:
            s.gateway.cancel(self.rid)
        s.in_flight -= 1
        s.metrics.in_flight.set(s.in_flight)
        seconds = time.monotonic() - self.t0
        s.mean_s = 0.9 * s.mean_s + 0.1 * seconds
        s.metrics.requests.labels(self.route, outcome).inc()
        s.metrics.duration.labels(self.route).observe(seconds)
        if self.scope is not None and is_logged(self.scope):
            ran(self.scope, self.walks, self.outputs, self.first, seconds, outcome)
        if self.audio_samples:
            audio_s = self.audio_samples / s.info.rate("audio")
            s.metrics.rtf.labels(self.route).observe(seconds / audio_s)


def _numel(data: Any) -> int:
    shape = getattr(data, "shape", None)
    return math.prod(int(d) for d in shape) if shape is not None else 1


async def until_disconnect(http: HttpRequest, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client disconnects first: then ``work`` is cancelled (its
    calls with it) and the answer is 499."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(http))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise HttpError(499, "the client disconnected", code="disconnected")
    return task.result()
