"""Writing what a `wgc run` request emits, as it arrives (`OutputWriter`; the formats are in
`wgc.cli.run`'s docstring): audio as 16-bit PCM ``.wav``, images as PNG (through PIL when
installed, else zlib + struct), videos as ``.npy`` plus PNG frames, text to stdout (byte outputs
through an incremental UTF-8 decoder), anything else as ``.npy``."""

from __future__ import annotations

import codecs
import struct
import sys
import wave
import zlib
from pathlib import Path
from typing import Any

import click

from wgc.cli.speech_stats import RequestStats

DEFAULT_SAMPLE_RATE = 24_000


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
    """Writes each emitted output as it arrives (the formats are in `wgc.cli.run`'s docstring)."""

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
