"""The ``"inductor"`` backend of a `GraphRunner` bucket: the CPU analogue of graph capture.

One ``torch.compile(fullgraph=True, dynamic=False)`` artifact per bucket (C++/OpenMP kernels on
the CPU: the elementwise ops between the matrix products fused, one call in place of dozens of
dispatched ops). Each bucket compiles its own copy of `_trampoline`'s code object
(`torch.compile` keeps its cache on the code object), so a bucket's artifact is its own and
runners never evict one another's under dynamo's recompile limit; after its compiling call a
bucket runs dynamo's compiled bytecode directly (`CompiledBody`). A compiled unit runs in
``torch.inference_mode`` (entered around it: dynamo does not trace into it), so it must not
enter inference mode itself. The unit must be traceable: no host reads, no data-dependent
shapes, and mutations of the tensors it closes over (e.g. the K/V pool) made on base tensors,
not views (a model's static decode step prepares them so).
"""

from __future__ import annotations

import shutil
import threading
import types
from collections.abc import Callable
from typing import Any

import torch


def _trampoline(body, bufs):
    return body(bufs)


def _compile(
    template: Callable,
    name: str,
    dynamic: bool | None,
    *,
    cpp_wrapper: bool = False,
    realize_opcount: int | None = None,
) -> Callable:
    """``torch.compile`` of a private copy of ``template``'s code: dynamo caches per code
    object, so this artifact has a cache (and a recompile limit) of its own.

    Two of inductor's options trim the host code around the kernels, which at the tiny sizes
    is most of a step: ``size_asserts`` off (the generated wrapper otherwise checks the size
    and strides of every input on every call; a runner's static buffers, and a vocoder's
    contiguous rows, are what the artifact was compiled for by construction, and the tensor
    guards check them on each artifact's compiling call), and, for a static
    artifact, ``cpp_wrapper`` (the wrapper that allocates the intermediate buffers and calls
    the kernels generated as C++ instead of Python). Measured paired on a TTS model at
    concurrency 16 (`benchmarks/speech_paired.py`, `benchmarks/README.md`): with both, the LM
    rank's CPU per round 3-14% lower over three runs.

    ``realize_opcount``: inductor's ``realize_opcount_threshold`` for this artifact: an
    elementwise result read by several consumers is stored once when it takes more than this
    many ops, instead of being recomputed inside each consumer (None: inductor's default, 50
    ops on the CPU; see `CompiledRows`)."""
    fresh = types.FunctionType(template.__code__.replace(co_name=name), template.__globals__)
    # like a recorded graph, the artifact is replayed on the same static buffers without
    # re-checking the Python objects it closed over; only tensor guards (shapes, dtypes,
    # devices of buffers and the K/V pool) stay, which saves ~20 µs per tiny step
    opts: dict[str, str | int | bool | Callable[..., Any]] = {
        "guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe,
        "size_asserts": False,
    }
    if cpp_wrapper:
        opts["cpp_wrapper"] = True
    if realize_opcount is not None:
        opts["realize_opcount_threshold"] = realize_opcount
    _thread_lock_for_progress_bars()
    return torch.compile(fresh, backend="inductor", fullgraph=True, dynamic=dynamic, options=opts)


class CompiledBody:
    """``torch.compile`` of ``body(bufs)`` through a private copy of `_trampoline`'s code
    (`_compile`), shapes static; called as ``compiled(bufs)``.

    The first call compiles; later calls run dynamo's compiled bytecode for the copy directly
    (`_direct`, ``direct`` true), not through ``torch.compile``'s wrapper: a runner calls it
    with the same static buffers every time, so the guards (shapes, strides and dtypes of the
    buffers and of the tensors ``body`` closes over) hold by construction, and skipping the
    wrapper and its guard check saves ~80 µs of a ~490 µs step (a TTS model's tiny LM at batch 16,
    interleaved medians). Mutations of the buffers (carries, the K/V pool) are the compiled
    graph's own, so they happen either way."""

    def __init__(self, body: Callable, label: str) -> None:
        self.body = body
        self._compiled = _compile(_trampoline, f"_wgc_{label}", dynamic=False, cpp_wrapper=True)
        self._direct: Callable | None = None

    @property
    def direct(self) -> bool:
        return self._direct is not None

    def __call__(self, bufs):
        # entered outside the compiled frame: dynamo cannot trace into inference mode
        with torch.inference_mode():
            if self._direct is not None:
                return self._direct(self.body, bufs)
            out = self._compiled(self.body, bufs)
            self._direct = _direct(self._compiled)
            return out


def _direct(compiled: Callable) -> Callable | None:
    """The one artifact of a compiled copy of `_trampoline` as a plain function: dynamo's
    transformed bytecode (it reads the tensors out of its arguments and calls the compiled graph),
    run without dynamo's frame hook or guards. None when the copy does not have exactly one
    artifact (then calls go through ``torch.compile`` as usual)."""
    fn = getattr(compiled, "_torchdynamo_orig_callable", None)
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:  # pragma: no cover - another torch
        return None
    if not isinstance(fn, types.FunctionType):
        return None
    entries = _debug_get_cache_entry_list(fn.__code__)
    if len(entries) != 1:
        return None
    return types.FunctionType(entries[0].code, fn.__globals__, fn.__name__)


def _apply(fn, *args):
    return fn(*args)


class CompiledRows:
    """``torch.compile`` of ``fn(*tensors)``, every argument's dim 0 the batch: one artifact for
    a batch of one row, one for every larger batch (dim 0 symbolic, so a node batching itself,
    like a vocoder decoding the windows that are ready, compiles twice, not once per size). Like
    `CompiledBody`: a code object of its own (`_compile`), run in inference mode, and after its
    compiling call each artifact's compiled bytecode is called directly, without the guard check
    (the caller passes contiguous rows of the dtypes and trailing shapes it was compiled for;
    dynamo's bytecode reads the batch size off the first tensor itself).

    ``realize_opcount`` (`_compile`): a program whose costly elementwise results feed several
    taps of a convolution written as shifted sums, like an audio codec decoder's snake activations
    (``x + sin(a x)^2 / a``) before each kernel-7 convolution, runs faster when they are stored
    once than when inductor recomputes them in every tap."""

    def __init__(
        self, fn: Callable[..., torch.Tensor], label: str, realize_opcount: int | None = None
    ) -> None:
        self.fn = fn
        self.realize_opcount = ops = realize_opcount
        self._one = _compile(_apply, f"_wgc_{label}_b1", dynamic=False, realize_opcount=ops)
        self._rows = _compile(_apply, f"_wgc_{label}_rows", dynamic=None, realize_opcount=ops)
        self._direct: dict[bool, Callable | None] = {}  # single row? -> the artifact's code

    def direct(self, single: bool) -> bool:
        """Does a batch of one row (``single``), or of more, run its artifact's code directly?"""
        return self._direct.get(single) is not None

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            single = args[0].shape[0] == 1
            code = self._direct.get(single)
            if code is not None:
                return code(self.fn, *args)
            if single:
                out = self._one(self.fn, *args)
            else:
                for a in args:
                    torch._dynamo.mark_dynamic(a, 0, min=2, max=1 << 16)
                out = self._rows(self.fn, *args)
            if single not in self._direct:  # looked for once: None keeps the guarded path
                self._direct[single] = _direct(self._one if single else self._rows)
            return out


def _thread_lock_for_progress_bars() -> None:
    """Give tqdm a threading lock before inductor draws its compile progress bar: tqdm's default
    lock is a multiprocessing one, whose semaphore a worker (started by multiprocessing, and
    ended without Python's clean-up) leaves registered, and the resource tracker then warns
    about a leaked semaphore when the deployment stops."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - inductor brings tqdm
        return
    if getattr(tqdm, "_lock", None) is None:
        tqdm.set_lock(threading.RLock())


def inductor_available() -> str | None:
    """None when ``torch.compile`` with inductor can work here, else why not."""
    try:
        import torch._inductor  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the installation
        return f"inductor does not import: {e}"
    if not shutil.which("g++") and not shutil.which("c++") and not shutil.which("clang++"):
        return "no C++ compiler on PATH (inductor's CPU kernels need one)"
    return None
