"""`wgc run`: run a compiled model as processes (or in one process with `--local`).

    wgc run MODEL.walk --placement P.yaml [--set NAME=VALUE] ...   # compiles first
    wgc run generated/<model>/<placement>/ ...                       # an existing compile

One-shot use: ``--input NAME=VALUE[,FIELD=VALUE...]`` (repeatable, in order: an input segment
of modality NAME; VALUE is text, or a file: ``.png``/``.jpg`` images (through PIL when
installed), ``.wav`` audio (stdlib ``wave``), ``.npy`` arrays; each ``,FIELD=VALUE`` a field of
the segment: a file, a JSON scalar or list, else text), or ``--request FILE.json`` (the general
form: segments with fields, want, options, seed; `wgc.cli.request_input`), ``--want MODALITY``
(repeatable), ``--option NAME=VALUE`` (JSON-ish: ints, floats, true/false, else a string),
``-o OUTDIR`` (a folder, checked before anything runs). Every input is read and bounded at the edge
(`wgc_runtime.host.inputs`, as the server reads its own; ``--limit NAME=VALUE`` changes a limit):
a malformed or oversized one exits 1 naming the file and the reason. Every emitted output is
written as it arrives: audio is appended to ``OUTDIR/<modality>.wav`` (16-bit PCM at the
emitting node's ``sample_rate`` config, else 24 kHz), images go to ``<modality>_NNN.png``, a
video to ``<modality>_NNN.npy`` plus its frames as ``<modality>_NNN/frame_KKKK.png``, text
streams to stdout (and ``<modality>.txt``; byte outputs through an incremental UTF-8 decoder),
anything else to ``<modality>_NNN.npy``. While the workers start, a progress bar (on a
terminal) follows their weights loading and capture (`wgc.cli.progress`); at the end each
audio output's length, first-audio latency, real-time factor and any clipped samples are
reported (`wgc.cli.speech_stats`). Exits 0 when
the request finished, 1 when it failed (the error names node, walk and message) or a worker
died (the message names the rank; workers are not restarted).

The request is checked at the door before any process starts (`wgc_runtime.core.conductor.door`,
strict: an undeclared option, an unknown want or input modality, a missing segment field, a value
a walk input cannot take: every problem is printed and the exit code is 1); ``--option`` values
are read as the option's declared type (``true``/``false``/``1``/``0`` for a bool); without
``--want`` every modality the model emits is wanted. ``--seed N`` seeds the nodes (default: the
request id).

Where the workers run: this host, or ``--ray ADDRESS`` (the nodes of a Ray cluster), or
``--external-workers JOIN.json`` (started elsewhere with ``wgc worker``), as for `wgc serve`
(`wgc.cli.workers`).

Server use: ``--serve`` is `wgc serve` (the HTTP server, `wgc.cli.serve`) on its default address.

``--local`` runs the one-shot request in this process on `wgc_runtime.host.local.LocalCluster` (no
sockets, no processes): handy for debugging.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import shutil
import struct
import sys
import threading
import time
import wave
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wgc.cli.door import as_tensors, at_the_door
from wgc.cli.errors import EXIT_OK, EXIT_USER, UserError
from wgc.cli.preflight import check_deployment, random_weights_option
from wgc.cli.request_input import field_value, read_request_file, split_fields
from wgc.cli.seconds import SECONDS
from wgc.cli.speech_stats import RequestStats
from wgc.cli.workers import THIS_HOST, Workers, worker_options
from wgc.config import Env

if TYPE_CHECKING:
    from wgc_runtime.host.inputs import Limits

DEFAULT_SAMPLE_RATE = 24_000


# ------------------------------------------------------------------------- the runtime


def require_runtime(command: str = "run", extra: str = "runtime") -> None:
    """`wgc run` needs the runtime's dependencies, which the core install leaves out."""
    import importlib.util

    for module in ("torch", "zmq", "msgspec", "numpy"):  # found, not imported: torch takes ~1.5 s
        if importlib.util.find_spec(module) is None:
            raise UserError(
                f"`wgc {command}` needs the runtime, and `{module}` is not installed: "
                f"install it with `pip install 'wgc[{extra}]'`"
            ) from None


# ------------------------------------------------------------------------- inputs and options


def parse_value(text: str) -> Any:
    """An option value: JSON scalars (``3``, ``0.5``, ``true``, ``null``), else the string."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser: text
        return text
    return value if isinstance(value, (int, float, bool, str)) or value is None else text


def _pairs(items: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UserError(f"`{flag} {item}`: expected NAME=VALUE")
        out.append((name.strip(), value))
    return out


def read_file(value: str, where: str, limits: Limits) -> tuple[Any, dict[str, Any]] | None:
    """(data, fields) of a file named by ``value``, read by its suffix and checked against
    ``limits`` (`wgc_runtime.host.inputs.read_file`: a bad or oversized file is a user error
    naming it); None when ``value`` names no file (it is text then)."""
    from wgc_runtime.host.inputs import read_file as read_checked

    path = Path(value)
    if not (len(value) < 4096 and path.suffix and path.is_file()):
        return None
    with _as_user_error():
        return read_checked(path, where, limits)


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}..."


@contextlib.contextmanager
def _as_user_error() -> Iterator[None]:
    """An input the edge refuses (`wgc_runtime.host.inputs.InputError`) as exit 1."""
    from wgc_runtime.host.inputs import InputError

    try:
        yield
    except InputError as exc:
        raise UserError(str(exc)) from None


def read_input(name: str, value: str, limits: Limits) -> tuple[str, Any, dict[str, Any]]:
    """(modality, data, fields) of one ``--input NAME=VALUE[,FIELD=VALUE...]``: a file by its
    suffix, else text; each field a file, a JSON scalar or list, else text
    (`wgc.cli.request_input`); all within ``limits``."""
    from wgc_runtime.host.inputs import check_value

    text, field_texts = split_fields(value)
    got = read_file(text, f"`--input {name}={text}`", limits)  # a file: named in full
    data, fields = got if got is not None else (text, {})

    def file_data(v: str, at: str) -> Any | None:
        got = read_file(v, at, limits)
        return None if got is None else got[0]

    with _as_user_error():
        for field, ftext in field_texts:
            fields[field] = field_value(ftext, file_data, f"`--input {name}=...,{field}=`", limits)
        check_value(data, f"`--input {name}={_short(text)}`", limits)
        for field, v in fields.items():
            check_value(v, f"`--input {name}=...,{field}=`", limits)
    return name, data, fields


# ------------------------------------------------------------------------- writing outputs


def to_numpy(value: Any):
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def write_png(path: Path, image) -> None:
    """Write ``image`` (``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``; u8, or float in [0, 1] or
    [-1, 1]) as PNG, through PIL when installed, else zlib + struct."""
    import numpy as np

    x = np.asarray(image)
    if x.ndim == 3 and x.shape[0] in (1, 3, 4) and x.shape[-1] not in (1, 3, 4):
        x = np.moveaxis(x, 0, -1)
    if x.ndim == 3 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.dtype != np.uint8:
        x = x.astype(np.float32)
        if x.min(initial=0.0) < 0:
            x = (x + 1) / 2
        x = (np.clip(x, 0, 1) * 255 + 0.5).astype(np.uint8)
    if x.ndim not in (2, 3):
        raise ValueError(f"cannot write an image of shape {x.shape}")
    try:
        from PIL import Image  # pyright: ignore[reportMissingImports]  (optional: Pillow)

        Image.fromarray(x).save(path)
        return
    except ImportError:
        pass
    height, width = x.shape[:2]
    channels = 1 if x.ndim == 2 else x.shape[2]
    color = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = np.ascontiguousarray(x).reshape(height, width * channels)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def pcm16(samples):
    """Float samples in [-1, 1] (or integer PCM) as 16-bit frames, ``[samples, channels]``."""
    import numpy as np

    x: np.ndarray = np.asarray(samples)
    if x.ndim == 0:
        x = x.reshape(1)
    if x.ndim == 2 and x.shape[0] <= 8 < x.shape[1]:
        x = x.T  # [channels, samples]
    if x.ndim > 2:
        x = x.reshape(-1)
    if x.ndim == 1:
        x = x[:, None]
    if x.dtype.kind == "f":
        x = np.clip(x, -1.0, 1.0) * 32767
    return np.round(x).astype("<i2")


class OutputWriter:
    """Writes each emitted output as it arrives (see the module docstring)."""

    def __init__(
        self,
        out_dir: Path | None,
        sample_rates: dict[str, int],
        echo=click.echo,
        stats: RequestStats | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.sample_rates = sample_rates
        self.echo = echo
        self.stats = stats or RequestStats()
        self.utf8: dict[str, Any] = {}  # modality -> incremental decoder of byte outputs
        self.counts: dict[str, int] = {}
        self.wavs: dict[str, tuple[wave.Wave_write, int]] = {}
        self.texts: dict[str, Any] = {}
        self.written: list[Path] = []
        self.text_open = False
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)

    def _index(self, modality: str) -> int:
        n = self.counts.get(modality, 0)
        self.counts[modality] = n + 1
        return n

    def _path(self, name: str) -> Path | None:
        if self.out_dir is None:
            return None
        path = self.out_dir / name
        if path not in self.written:
            self.written.append(path)
        return path

    def write(self, modality: str, value: Any) -> None:
        kind = kind_of(modality)
        n = self._index(modality)
        if kind == "text":
            self._text(modality, value)
            return
        if value is None:
            return
        x = to_numpy(value)
        if kind == "audio":
            self._audio(modality, x)
        elif kind == "image" and image_like(x):
            path = self._path(f"{modality}_{n:03d}.png")
            if path is not None:
                write_png(path, x)
        elif kind == "video":
            self._video(modality, n, x)
        else:  # arrays, and an image output of a shape no image has
            self._npy(f"{modality}_{n:03d}.npy", x)

    def _npy(self, name: str, x) -> None:
        path = self._path(name)
        if path is not None:
            import numpy as np

            np.save(path, x, allow_pickle=False)

    def _video(self, modality: str, n: int, x) -> None:
        """A video: the array as ``<modality>_NNN.npy`` and, when its frames are images, each
        frame as ``<modality>_NNN/frame_KKKK.png``."""
        self._npy(f"{modality}_{n:03d}.npy", x)
        frames = video_frames(x)
        folder = self._path(f"{modality}_{n:03d}")
        if frames is None or folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        for k, frame in enumerate(frames):
            write_png(folder / f"frame_{k:04d}.png", frame)

    def _text(self, modality: str, value: Any) -> None:
        raw = text_bytes(value)
        if raw is None:
            text = decode_text(value)
        else:  # a character may be split over two outputs
            decoder = self.utf8.setdefault(
                modality, codecs.getincrementaldecoder("utf-8")(errors="replace")
            )
            text = decoder.decode(raw)
        sys.stdout.write(text)
        sys.stdout.flush()
        self.text_open = True
        path = self._path(f"{modality}.txt")
        if path is not None:
            if modality not in self.texts:
                self.texts[modality] = path.open("w", encoding="utf-8")
            self.texts[modality].write(text)

    def _audio(self, modality: str, x) -> None:
        rate = self.sample_rates.get(modality, DEFAULT_SAMPLE_RATE)
        self.stats.add(modality, x, rate)
        path = self._path(f"{modality}.wav")
        if path is None:
            return
        frames = pcm16(x)
        if modality not in self.wavs:
            w = wave.open(str(path), "wb")  # noqa: SIM115 - open across writes, closed in close()
            w.setnchannels(frames.shape[1])
            w.setsampwidth(2)
            w.setframerate(rate)
            self.wavs[modality] = (w, frames.shape[1])
        w, channels = self.wavs[modality]
        if frames.shape[1] != channels:
            frames = frames.reshape(-1, channels)
        w.writeframes(frames.tobytes())

    def close(self) -> None:
        for modality, decoder in self.utf8.items():
            if tail := decoder.decode(b"", final=True):  # a character cut off at the end
                sys.stdout.write(tail)
                if modality in self.texts:
                    self.texts[modality].write(tail)
        self.utf8.clear()
        for w, _ in self.wavs.values():
            w.close()
        for f in self.texts.values():
            f.close()
        self.wavs.clear()
        self.texts.clear()
        if self.text_open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.text_open = False


def image_like(x) -> bool:
    """Whether `write_png` can write ``x``: ``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``."""
    channels = (1, 3, 4)
    return x.ndim == 2 or (x.ndim == 3 and (x.shape[0] in channels or x.shape[-1] in channels))


def video_frames(x):
    """The frames of a video array as ``[T, H, W, C]`` (from ``[C, T, H, W]``,
    ``[T, C, H, W]`` or ``[T, H, W, C]``, a leading batch of one dropped), or None when no
    axis is a channel axis."""
    import numpy as np

    channels = (1, 3, 4)
    if x.ndim == 5 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 4:
        return None
    if x.shape[1] in channels:  # [T, C, H, W]
        return np.moveaxis(x, 1, -1)
    if x.shape[0] in channels:  # [C, T, H, W]
        return np.moveaxis(x, 0, -1)
    if x.shape[-1] in channels:
        return x
    return None


def kind_of(modality: str) -> str:
    m = modality.lower()
    if m.startswith(("audio", "speech", "wav")):
        return "audio"
    if m.startswith("video"):
        return "video"
    if m.startswith(("image", "img", "picture", "frame")):
        return "image"
    if m.startswith("text"):
        return "text"
    return "array"


def text_bytes(value: Any) -> bytes | None:
    """A text output of byte ids (a node that emits its text's UTF-8 bytes), else None."""
    if not hasattr(value, "dtype") or isinstance(value, str):
        return None
    x = to_numpy(value).reshape(-1)
    if x.dtype.kind in "iu" and ((x >= 0) & (x < 256)).all():
        return bytes(int(v) for v in x)
    return None


def decode_text(value: Any) -> str:
    """Text outputs: a str, or token ids; byte-range ids decode as UTF-8 (the stand-in
    tokenizer), others print as numbers."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    x = to_numpy(value).reshape(-1)
    if x.dtype.kind in "iu" and ((x >= 0) & (x < 256)).all():
        return bytes(int(v) for v in x).decode("utf-8", errors="replace")
    return " ".join(str(v) for v in x.tolist()) + " "


# ------------------------------------------------------------------------- the plan


def at_input_rate(plan_dir: str, segments: list[Any]) -> list[Any]:
    """The (modality, data, fields) inputs with each audio one resampled to the rate the plan's
    audio-reading node declares (`wgc_runtime.host.audio`), as the server's routes do."""
    from wgc_runtime.host.audio import RateError, at_rate, input_rate
    from wgc_runtime.host.loading import load_conductor, load_rank

    spec = load_conductor(plan_dir)
    rate = input_rate(load_rank(plan_dir, r) for r in range(spec.world_size))
    try:
        return [(mo, *at_rate(mo, d, f, rate, f"input {i}")) for i, (mo, d, f) in
                enumerate(segments)]  # fmt: skip
    except RateError as exc:
        raise UserError(str(exc)) from None


def sample_rates(plan_dir: str) -> dict[str, int]:
    """Emitted modality -> the emitting node's ``sample_rate`` config, where it has one."""
    from wgc_runtime.host.loading import load_conductor, load_rank

    out: dict[str, int] = {}
    spec = load_conductor(plan_dir)
    for r in range(spec.world_size):
        rank = load_rank(plan_dir, r)
        configs = {n.name: dict(n.config) for n in rank.nodes}
        for piece in rank.pieces:
            for call in piece.calls:
                rate = configs.get(call.node, {}).get("sample_rate")
                if not isinstance(rate, int):
                    continue
                for o in call.outputs:
                    for d in o.dests:
                        if d.kind == "client" and d.name:
                            out.setdefault(d.name, rate)
    return out


def prepare(target: str, placement: str | None, sets: tuple[str, ...], keep: Path | None) -> str:
    """The generated folder to run: ``target`` itself, or a fresh compile of MODEL.walk."""
    from wgc.cli.compile import _parse_sets, _report, resolve_names, sync
    from wgc.driver import Driver

    path, placement = resolve_names(target, placement)  # names of families, placements
    if path.is_dir():
        if placement:
            raise UserError("`--placement` is for MODEL.walk; a generated folder is already placed")
        if not (path / "conductor.py").is_file():
            raise UserError(f"`{target}` has no conductor.py: is it a `wgc compile` output?")
        return str(path)
    if not path.is_file():
        raise UserError(f"no such file or folder: `{target}`")
    if not placement:
        default = path.parent / "placements" / "cpu.yaml"
        if not default.is_file():
            raise UserError(
                "give `--placement P.yaml` to run a .walk model (no `placements/cpu.yaml` beside "
                "it to default to)"
            )
        placement = str(default)
        click.echo(f"note: no `--placement`: using `{placement}`", err=True)
    if not Path(placement).is_file():
        raise UserError(f"no such file: `{placement}`")
    result = Driver().compile(str(path), placement, _parse_sets(sets))
    _report(result, color=False)
    if not result.ok:
        raise UserError(f"`{target}` does not compile for `{placement}`")
    assert result.plan is not None
    from wgc_runtime.host.scratch import private_dir

    # a SIGKILLed `wgc run`/`wgc serve` cannot remove it: the next start sweeps it (its owner file)
    out = keep or Path(private_dir(f"wgc-run-{result.plan.model}-"))
    sync(out, result.files, check=False)
    return str(out)


# ------------------------------------------------------------------------- running


def _stream_processes(
    plan_dir: str,
    inputs,
    want,
    options,
    ready_timeout: float,
    deadline: float | None,
    seed,
    submitted=lambda: None,
    workers: Workers = THIS_HOST,
) -> Iterator[Any]:
    from wgc.cli.progress import StartupProgress, startup_steps
    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster, terminate_as_interrupt

    strict = {"strict": True}  # the door's (checked here already; the conductor checks again)
    progress = StartupProgress(startup_steps(plan_dir))
    # the client needs torch for the outputs: import it while the processes start, not after
    threading.Thread(target=_import_codec, name="wgc-import-torch", daemon=True).start()
    with (
        terminate_as_interrupt(),
        Cluster(
            plan_dir,
            progress=progress,
            ready_timeout=ready_timeout,
            config=strict,
            **workers.cluster_options(),
        ) as cluster,
    ):
        progress.close()
        assert cluster.client_address is not None
        with Client(cluster.client_address, key=cluster.client_key) as client:
            stream = client.submit(inputs, want, options, deadline, seed=seed)
            submitted()
            try:
                yield from stream
            except Exception:
                if cluster.failure is not None:
                    raise WorkerDied(str(cluster.failure)) from None
                raise
            if cluster.failure is not None:
                raise WorkerDied(str(cluster.failure))


def _import_codec() -> None:
    import wgc_runtime.host.transport.codec  # noqa: F401  (torch)


def _stream_local(plan_dir: str, inputs, want, options, seed, submitted=lambda: None):
    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.host.client import ErrorInfo, Output, RequestFailed
    from wgc_runtime.host.loading import ensure_import_root

    ensure_import_root()
    from wgc_runtime.host.local import LocalCluster

    cluster = LocalCluster(plan_dir, strict=True)
    segments = [Segment(m, d, tuple(f.items())) for m, d, f in as_tensors(inputs)]
    handle = cluster.submit(cluster.request(segments, want, options), seed=seed)
    submitted()
    for item in handle:
        meta = item.meta
        yield Output(
            handle.id,
            meta.get("flow", ""),
            meta.get("walk", ""),
            item.modality,
            item.channel,
            item.tensor,
            tuple(meta.get("iters", ())),
        )
    error = handle.error
    if error is not None:
        raise RequestFailed(
            ErrorInfo(
                error.kind or "error",
                error.message or "request failed",
                error.flow,
                error.walk,
                error.node,
            )
        )


class WorkerDied(RuntimeError):
    pass


limit_option = click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="An input limit, e.g. text_chars=4096 (see `wgc_runtime.host.inputs`).",
)
"""``--limit NAME=VALUE`` (repeatable; `wgc run` and `wgc serve`), read by `input_limits`."""


def input_limits(pairs: tuple[str, ...]) -> Limits:
    """The deployment's input limits: the defaults with each ``--limit NAME=VALUE`` applied."""
    from wgc_runtime.host.inputs import Limits

    with _as_user_error():
        return Limits().with_pairs(_pairs(pairs, "--limit"))


def output_dir(output: str | None) -> Path | None:
    """``-o OUTDIR``, checked now (before any compile or process): a path that is a file, or a
    folder that cannot be made, is a user error. The folder itself is made by the first output
    written into it, so a request refused at the door leaves nothing behind."""
    if output is None:
        return None
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise UserError(f"`-o {output}`: is a file, not a folder (outputs are written into it)")
    base = path.absolute()
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise UserError(f"`-o {output}`: cannot make the folder (`{base}` is a file)")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"`-o {output}`: cannot make the folder (`{base}`: permission denied)")
    return path


def _check_plan(plan_dir: str, random_weights: bool = False) -> None:
    """Load the generated modules once before any process starts: a folder from another wgc
    version, or one that does not import, is a user error with its reason; then the devices,
    weights and memory of every rank (`wgc.cli.preflight`), before any weight is built."""
    from wgc_runtime.host.loading import DeploymentError, load_plan

    try:
        load_plan(plan_dir)
        check_deployment(plan_dir, random_weights=random_weights)
    except DeploymentError as exc:
        raise UserError(str(exc)) from None


def deployment_errors() -> tuple[type[Exception], ...]:
    """What a deployment that cannot start raises: its own fault, said in one line (exit 1). A
    host that does not resolve or cannot be bound is one too (`TransportError`)."""
    from wgc_runtime.host.loading import DeploymentError
    from wgc_runtime.host.transport.sockets import TransportError

    return DeploymentError, TransportError


@click.command()
@click.argument("target", metavar="MODEL.walk|GENERATED_DIR")
@click.option("--placement", "-p", metavar="P.yaml", help="The placement (for MODEL.walk).")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a param.")
@click.option(
    "--input",
    "-i",
    "inputs",
    multiple=True,
    metavar="NAME=VALUE",
    help="An input segment: text, or a .png/.wav/.npy file (repeatable, in order).",
)
@click.option(
    "--request",
    "request_file",
    metavar="FILE.json",
    help="The request as JSON: inputs with fields, want, options, seed (see `wgc run --help`).",
)
@click.option("--want", "-w", multiple=True, metavar="MODALITY", help="An output modality.")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE", help="A request option.")
@click.option("-o", "--output", metavar="OUTDIR", help="Write emitted outputs here.")
@click.option("--serve", is_flag=True, help="Serve over HTTP instead: `wgc serve`.")
@click.option("--seed", type=int, default=None, help="What the nodes seed from (default: the id).")
@click.option("--local", is_flag=True, help="Run in this process (no sockets, no processes).")
@worker_options
@click.option(
    "--plan-dir",
    metavar="DIR",
    help="Where to write the compile of MODEL.walk [default: a temp folder].",
)
@click.option(
    "--ready-timeout",
    type=SECONDS,
    default=600.0,
    show_default=True,
    help="Seconds to wait for workers to load.",
)
@click.option("--timeout", type=SECONDS, default=None, help="Deadline of the request, seconds.")
@random_weights_option
@limit_option
@click.pass_obj
def run(
    env: Env,
    target: str,
    placement: str | None,
    sets: tuple[str, ...],
    inputs: tuple[str, ...],
    request_file: str | None,
    want: tuple[str, ...],
    options: tuple[str, ...],
    output: str | None,
    serve: bool,
    seed: int | None,
    local: bool,
    ray_address: str | None,
    external: str | None,
    join_timeout: float,
    plan_dir: str | None,
    ready_timeout: float,
    timeout: float | None,
    random_weights: bool,
    limits: tuple[str, ...],
) -> None:
    """Run a model: one request (--input/--want/-o) or a server (--serve)."""
    del env
    require_runtime()
    edge = input_limits(limits)
    if serve and (inputs or request_file or local):
        raise UserError(
            "`--serve` takes requests from clients: give no --input, --request or --local"
        )
    if not serve and not inputs and not request_file:
        raise UserError(
            "give at least one `--input NAME=VALUE`, a `--request FILE.json` or `--serve`"
        )
    workers = Workers(ray_address, external, join_timeout)
    if local and workers.placed:
        raise UserError("`--local` runs in this process: give no --ray or --external-workers")
    if serve:
        from wgc.cli.serve import require_serve, run_server

        require_serve()
        ctx = click.get_current_context()
        code = run_server(
            target,
            placement,
            sets,
            seed=seed,
            plan_dir=plan_dir,
            ready_timeout=ready_timeout,
            workers=workers,
            limits=edge,
            random_weights=random_weights,
        )
        ctx.exit(code)
    out_dir = output_dir(output)
    plan = prepare(target, placement, sets, Path(plan_dir) if plan_dir else None)
    temporary = plan != target and not plan_dir
    try:
        _check_plan(plan, random_weights)
        code = _one_shot(
            plan,
            inputs,
            request_file,
            want,
            options,
            out_dir,
            local,
            ready_timeout,
            timeout,
            seed,
            edge,
            workers=workers,
        )
    finally:
        if temporary:
            shutil.rmtree(plan, ignore_errors=True)
    click.get_current_context().exit(code)


def _one_shot(
    plan: str,
    inputs: tuple[str, ...],
    request_file: str | None,
    want: tuple[str, ...],
    options: tuple[str, ...],
    output: Path | None,
    local: bool,
    ready_timeout: float,
    timeout: float | None,
    seed: int | None,
    limits: Limits,
    workers: Workers = THIS_HOST,
) -> int:
    from wgc_runtime.host.client import RequestFailed

    segments = [read_input(name, value, limits) for name, value in _pairs(inputs, "--input")]
    opts = {name: parse_value(value) for name, value in _pairs(options, "--option")}
    if request_file is not None:  # the file's inputs first; the command line adds / overrides
        with _as_user_error():
            doc = read_request_file(request_file, lambda v, w: read_file(v, w, limits), limits)
        segments = [*doc["inputs"], *segments]
        want = want or tuple(doc["want"])
        opts = {**doc["options"], **opts}
        seed = seed if seed is not None else doc["seed"]
    segments = at_input_rate(plan, segments)
    want, opts = at_the_door(plan, segments, want, opts, seed, limits)
    rates = sample_rates(plan)
    stats = RequestStats()
    for modality in want:  # a wanted audio output that never comes is said, too
        if kind_of(modality) == "audio":
            stats.expect(modality, rates.get(modality, DEFAULT_SAMPLE_RATE))
    writer = OutputWriter(output, rates, stats=stats)
    t0 = time.monotonic()
    n = 0
    code = EXIT_OK
    try:
        events = (
            _stream_local(plan, segments, want, opts, seed, stats.submit)
            if local
            else _stream_processes(
                plan, segments, want, opts, ready_timeout, timeout, seed, stats.submit, workers
            )
        )
        for out in events:
            writer.write(out.modality, out.value)
            n += 1
    except KeyboardInterrupt:
        writer.close()
        click.echo("wgc: interrupted", err=True)
        return 130
    except deployment_errors() as exc:
        writer.close()
        click.echo(f"error: {exc}", err=True)
        return EXIT_USER
    except WorkerDied as exc:
        writer.close()
        click.echo(f"error: {exc}; the run is stopped (workers are not restarted)", err=True)
        code = EXIT_USER
    except RequestFailed as exc:
        writer.close()
        click.echo(f"error: request failed: {exc}", err=True)
        code = EXIT_USER
    writer.close()
    if code == EXIT_OK:
        files = ", ".join(str(p) for p in writer.written) or "no files"
        click.echo(
            f"wgc: {n} output{'s' if n != 1 else ''} in {time.monotonic() - t0:.1f} s -> {files}",
            err=True,
        )
        for line in stats.lines():
            click.echo(line, err=True)
    return code
