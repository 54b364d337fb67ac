"""Loading placement files: YAML text -> `Placement`, with every problem a diagnostic.

Two formats, told apart by their top-level keys (a file that uses keys only one of them knows
from both is WG806):

* **wgc**: `devices` (rank i runs on devices[i]), `hosts` (rank -> host), `place` (groups of
  `nodes`, `ranks`, optional `walks`, optional `tp`, default the group size), `kv_cache`
  (`page_size`, `pages`, `dtype`), `batching` (`max_batch`, `capture`, `backend`), `params`,
  `max_concurrent_requests`, `attention`, `sessions` (also M*'s), `on_restart` (`restarts`).
* **M\\***: the reference implementation's configs as they are (`wgc.placement.mstar`):
  `node_groups` (`node_names`, `ranks`, `graph_walks`, `tp_size`, `sp_size`, `residency`),
  `kv_cache`, `resources`, `rank_devices`, `sp_size`, `max_concurrent_requests`, and M*'s own
  keys wgc does not use (`model`, `max_seq_len`, `model_kwargs`, ...), which are accepted and
  recorded in `Placement.ignored_keys`; nodes no group names run on rank 0, M*'s driver rank.

Groups in both formats may set sequence parallelism and residency (`wgc.placement.parallel`).
This module proves all that needs no model (codes below); `rules` checks it against the model.
Records are built even from a file with errors (bad entries dropped): the rules still run.

Codes owned: WG801 (YAML syntax), WG802 (unknown key, with did-you-mean), WG803 (wrong value
type), WG804 (missing or empty required entry), WG805 (duplicate key), WG806 (formats mixed),
WG809 (rank negative, repeated in a group, or beyond `devices`), WG810 (`tp` < 1 or not dividing
the group), WG822 (`sp` × `tp` not dividing the group), WG823 (a residency the runtime does not
honour, warning), WG816 (capture buckets not positive, not ascending, or above `max_batch`), WG817
(kv-cache, batching, concurrency or attention setting out of range), WG818 (device not `cpu`,
`cuda`, `cuda:N` or `auto:N`), WG819 (host for a rank that does not exist), WG821 (a device
whose rank no group uses), WG824 (collections nested past `MAX_YAML_DEPTH`, checked before the
YAML is composed), WG829 (an every-interface host such as `0.0.0.0`), WG899 (`restarts`).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir.types import DTYPE_NAMES
from wgc.parse.parser import MAX_SOURCE_CHARS, too_large
from wgc.placement import mstar, restarts, sessions
from wgc.placement.groups import GroupReader, ranks_phrase
from wgc.placement.model import Batching, Group, KvCache, ParamOverride, Placement
from wgc.placement.yaml_reader import Entries, other
from wgc.placement.yamlnodes import kind, mark_span, scalar, span

NAME = "placement-load"
CODES = (
    "WG801",
    "WG802",
    "WG803",
    "WG804",
    "WG805",
    "WG806",
    "WG809",
    "WG810",
    "WG816",
    "WG817",
    "WG818",
    "WG819",
    "WG821",
    "WG822",
    "WG823",
    "WG824",
    "WG829",
    "WG899",
)

TOP = {
    "wgc": (
        "devices",
        "hosts",
        "place",
        "kv_cache",
        "batching",
        "params",
        "max_concurrent_requests",
        "attention",
        "sessions",
        "on_restart",
    ),
    "mstar": (
        "model",
        "max_seq_len",
        "max_concurrent_requests",
        "kv_cache",
        "node_groups",
        "resources",
        "model_kwargs",
        "sp_size",
        "rank_devices",
        "sessions",
        *mstar.SPECULATIVE,
    ),
}
KV = {"wgc": ("page_size", "pages", "dtype"), "mstar": mstar.KV}
BATCHING = ("max_batch", "capture", "backend")
# how captured units run: `auto` is CUDA graphs on a CUDA device, else eager
CAPTURE_BACKENDS = ("auto", "eager", "cuda_graph", "inductor")
ATTENTION = ("auto", "torch", "triton", "flashinfer")
DEFAULT_CAPTURE = (1, 2, 4, 8, 16)
_KV_DEFAULT = KvCache()  # slotted dataclasses have no class-level defaults to read
_BATCHING_DEFAULT = Batching()
DEFAULT_MAX_CONCURRENT = 16
# one graph per bucket, unit and rank: vLLM's default list is 67 sizes
MAX_CAPTURE_BUCKETS = 256
_PLAIN = re.compile(r"[\t\n\r\x20-\x7e]*")  # text libyaml and PyYAML read alike
MAX_YAML_DEPTH = 32  # the deepest a valid placement goes is 4 (`place`, a group, `ranks`)
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+|auto:\d+)$")
_DEVICE_LIKE = re.compile(r"^(?:gpu|cuda|auto)\s*[:/ _-]?\s*(\d+)$", re.IGNORECASE)
# what binds every interface, not a machine a rank could run on (ZeroMQ cannot connect to it)
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "*", ""})


def load(path: str, text: str | None = None) -> tuple[Placement | None, list[Diagnostic]]:
    """The placement in ``path`` (read from disk unless ``text`` is given), and its problems."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return None, [
                diag(
                    "WG010",
                    f"cannot read `{path}`: {reason}",
                    Span(path, 0, 0, 0, 0),
                    help="check the path and that the file is UTF-8 text",
                )
            ]
    if len(text) > MAX_SOURCE_CHARS:
        return None, [too_large(path, len(text))]
    loader = _Loader(path, text)
    placement = loader.run()
    return placement, sorted(loader.diags, key=Diagnostic.sort_key)


class _Loader(GroupReader):
    def __init__(self, file: str, text: str) -> None:
        super().__init__(file, text)
        self.ignored: list[str] = []
        self.wgc_kv_keys = tuple(k for k in KV["wgc"] if k not in KV["mstar"])
        self._c_failed = False  # libyaml could not read the text (`loader`, `too_deep`)

    # ------------------------------------------------------------------ entry
    def run(self) -> Placement | None:
        root = self.compose()
        if root is None:
            return None
        self.format, self.deciding = _detect(root)
        top = self.keys(root, TOP[self.format], TOP[other(self.format)], "at the top level")
        if self.format == "mstar":
            return self.mstar(root, top)
        return self.wgc(root, top)

    def compose(self) -> yaml.MappingNode | None:
        try:
            if self.too_deep():
                return None
            root = yaml.compose(self.text, Loader=self.loader())
        except yaml.MarkedYAMLError as exc:
            self.syntax(exc)
            return None
        except yaml.YAMLError as exc:
            self.error("WG801", f"invalid YAML: {exc}", Span(self.file, 1, 1, 1, 2))
            return None
        if root is None:
            self.error(
                "WG803",
                "placement file is empty",
                Span(self.file, 1, 1, 1, 2),
                help="a placement is a YAML mapping, e.g. `place: [{nodes: [LLM], ranks: [0]}]`",
            )
            return None
        if not isinstance(root, yaml.MappingNode):
            self.wrong(
                root,
                "a placement file",
                "a mapping",
                "write `key: value` lines at the top level (`devices:`, `place:`, ...)",
            )
            return None
        return root

    def loader(self) -> type:
        """libyaml's `CSafeLoader` (~10x faster) for plain ASCII text it did not fail on (in
        `too_deep`), else PyYAML's `SafeLoader` (its own error words); both mark text alike."""
        c_loader = getattr(yaml, "CSafeLoader", None)
        if c_loader is None or self._c_failed or not _PLAIN.fullmatch(self.text):
            return yaml.SafeLoader
        return c_loader

    def too_deep(self) -> bool:
        """WG824 when collections nest past `MAX_YAML_DEPTH`, found from PyYAML's event stream
        (its parser keeps a stack of its own; its composer, which builds the nodes, recurses
        once per level: RecursionError some hundred levels down). libyaml failing: PyYAML."""
        try:
            return self._too_deep(self.loader())
        except yaml.YAMLError:
            if self._c_failed or self.loader() is yaml.SafeLoader:
                raise
            self._c_failed = True
            return self._too_deep(yaml.SafeLoader)

    def _too_deep(self, loader: type) -> bool:
        depth = 0
        for event in yaml.parse(self.text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    self.error(
                        "WG824",
                        f"placement nested more than {MAX_YAML_DEPTH} levels deep",
                        mark_span(self.file, event.start_mark),
                        label=f"level {depth} starts here",
                        help="a placement is a mapping of lists and mappings a few levels deep; "
                        "check the brackets and the indentation",
                    )
                    return True
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return False

    def syntax(self, exc: yaml.MarkedYAMLError) -> None:
        where = exc.problem_mark or exc.context_mark
        labels = []
        if exc.context and exc.context_mark is not None and exc.context_mark != where:
            labels.append(Label(mark_span(self.file, exc.context_mark), exc.context))
        problem = exc.problem or exc.context or "malformed YAML"
        hint = "YAML indents with spaces, never tabs" if "'\\t'" in problem else None
        self.error(
            "WG801",
            f"invalid YAML: {problem}",
            mark_span(self.file, where),
            label="here",
            labels=labels,
            help=hint or "check the indentation, colons and brackets around this point",
        )

    # ------------------------------------------------------------------ wgc format
    def wgc(self, root: yaml.Node, top: Entries) -> Placement:
        devices, device_spans, devices_key = self.devices(top.get("devices"))
        groups = self.groups(top.get("place"), "place")
        world = len(devices) if devices is not None else _derived_world(groups)
        if devices is None:
            devices = tuple(f"auto:{i}" for i in range(world))
        else:
            self.ranks_exist(groups, world, devices_key)
            self.idle_ranks(groups, device_spans, devices)
        kv = self.kv_cache(top.get("kv_cache"))
        batching = self.batching(top.get("batching"))
        self.graphs_need_cuda(batching, devices, top.get("batching"))
        return Placement(
            name=Path(self.file).stem,
            file=self.file,
            format="wgc",
            devices=devices,
            hosts=self.hosts(top.get("hosts"), world),
            groups=groups,
            kv_cache=kv,
            batching=batching,
            params=self.params(top.get("params")),
            max_concurrent_requests=self.max_concurrent(top.get("max_concurrent_requests")),
            attention=self.attention(top.get("attention")),
            sessions=sessions.read(self, top.get("sessions")),
            on_restart=restarts.read(self, top.get("on_restart")),
            span=span(self.file, root),
            groups_span=self.key_span(top.get("place")),
        )

    def devices(self, entry) -> tuple[tuple[str, ...] | None, list[Span], yaml.Node | None]:
        if entry is None:
            return None, [], None
        key, node = entry
        items = self.list_(node, "`devices`")
        if items is None:
            return None, [], key
        if not items:
            self.error(
                "WG818",
                "`devices` is empty",
                span(self.file, node),
                label="no devices",
                help="list one device per rank, e.g. `devices: [cpu]` or `[cuda:0, cuda:1]`",
            )
            return None, [], key
        out, spans = [], []
        for item in items:
            name = self.str_(item, "a device")
            if name is None:
                name = "cpu"
            elif not _DEVICE.match(name):
                self.bad_device(item, name)
            out.append(name)
            spans.append(span(self.file, item))
        return tuple(out), spans, key

    @staticmethod
    def is_device(name: str) -> bool:
        return bool(_DEVICE.match(name))

    def bad_device(self, item: yaml.Node, name: str) -> None:
        m = _DEVICE_LIKE.match(name.strip())
        suggestion = f"did you mean `cuda:{m.group(1)}`? " if m else ""
        self.error(
            "WG818",
            f"`{name}` is not a device",
            span(self.file, item),
            label="unknown device",
            help=f"{suggestion}a device is `cpu`, `cuda`, `cuda:N` or `auto:N` "
            "(`auto:N`: `cuda:N` where CUDA is available, else `cpu`)",
        )

    def hosts(self, entry, world: int) -> tuple[tuple[int, str], ...]:
        if entry is None:
            return ()
        _, node = entry
        if not self.map_(node, "`hosts`"):
            return ()
        out: dict[int, str] = {}
        for k, v in node.value:
            rank = self.int_(k, "a `hosts` key (a rank)")
            host = self.str_(v, "a host name")
            if rank is None or host is None:
                continue
            if not 0 <= rank < world:
                self.error(
                    "WG819",
                    f"`hosts` names rank {rank}, which does not exist",
                    span(self.file, k),
                    label=f"no rank {rank}",
                    help=f"this placement has {ranks_phrase(world)}: remove this entry "
                    "or add a device for it",
                )
                continue
            if rank in out:
                self.error("WG805", f"rank {rank} appears twice in `hosts`", span(self.file, k))
                continue
            if host.strip().strip("[]") in _WILDCARD_HOSTS:
                self.error(
                    "WG829",
                    f"`{host}` is not a machine: `hosts` names where rank {rank} runs",
                    span(self.file, v),
                    label="an address that means every interface",
                    help="name the machine (its host name or address, e.g. `10.0.0.1`); "
                    "`wgc serve --host 0.0.0.0` is how the HTTP server listens on every interface",
                )
                continue
            out[rank] = host
        return tuple(sorted(out.items()))

    def params(self, entry) -> tuple[ParamOverride, ...]:
        if entry is None:
            return ()
        _, node = entry
        if not self.map_(node, "`params`"):
            return ()
        out = []
        seen: dict[str, yaml.Node] = {}
        for k, v in node.value:
            name = self.str_(k, "a param name")
            if name is None:
                continue
            if name in seen:
                self.duplicate(k, seen[name], f"param `{name}`")
                continue
            seen[name] = k
            if kind(v) not in ("int", "float", "bool", "str"):
                self.wrong(v, f"param `{name}`", "a number, boolean or string")
                continue
            value = scalar(v)
            assert isinstance(value, int | float | str)  # what those kinds construct to
            out.append(
                ParamOverride(name, value, span(self.file, k), value_span=span(self.file, v))
            )
        return tuple(out)

    # ------------------------------------------------------------------ M* format
    def mstar(self, root: yaml.Node, top: Entries) -> Placement:
        return mstar.load(self, root, top)

    # ------------------------------------------------------------------ serving settings
    def kv_cache(self, entry) -> KvCache:
        if entry is None:
            return KvCache()
        _, node = entry
        if not self.map_(node, "`kv_cache`"):
            return KvCache()
        e = self.keys(node, KV["wgc"], KV["mstar"], "in `kv_cache`")
        page_size = self.positive(e.get("page_size"), "`page_size`", "WG817")
        pages = self.positive(e.get("pages"), "`pages`", "WG817")
        dtype = _KV_DEFAULT.dtype
        if "dtype" in e:
            d = self.str_(e["dtype"][1], "`dtype`")
            if d is not None and d not in DTYPE_NAMES:
                self.choice_error(e["dtype"][1], d, "`kv_cache.dtype`", DTYPE_NAMES)
            elif d is not None:
                dtype = d
        return KvCache(
            page_size=page_size or _KV_DEFAULT.page_size,
            pages=pages or _KV_DEFAULT.pages,
            dtype=dtype,
            span=span(self.file, node),
        )

    def batching(self, entry) -> Batching:
        if entry is None:
            return Batching()
        _, node = entry
        if not self.map_(node, "`batching`"):
            return Batching()
        e = self.keys(node, BATCHING, (), "in `batching`")
        max_batch = self.positive(e.get("max_batch"), "`max_batch`", "WG817")
        capture = self.capture(e.get("capture"), max_batch, e.get("max_batch"))
        if max_batch is None:
            max_batch = max(capture) if "capture" in e and capture else _BATCHING_DEFAULT.max_batch
        if "capture" not in e:
            capture = (*(b for b in DEFAULT_CAPTURE if b < max_batch), max_batch)
        backend = self.choice(e.get("backend"), "a capture backend", CAPTURE_BACKENDS)
        return Batching(
            max_batch=max_batch, capture=capture, backend=backend, span=span(self.file, node)
        )

    def graphs_need_cuda(self, batching: Batching, devices: tuple[str, ...], entry) -> None:
        """`backend: cuda_graph` records CUDA graphs: every device must be able to be CUDA."""
        cpus = [i for i, d in enumerate(devices) if d == "cpu"]
        if batching.backend != "cuda_graph" or not cpus or entry is None:
            return
        node = next(
            (
                v
                for k, v in getattr(entry[1], "value", ())
                if getattr(k, "value", None) == "backend"
            ),
            None,
        )
        self.error(
            "WG817",
            f"`backend: cuda_graph` records CUDA graphs, but rank {cpus[0]} runs on `cpu`",
            span(self.file, node if node is not None else entry[1]),
            label="needs a CUDA device",
            help="use `backend: inductor` (compiled on the CPU) or `auto` (CUDA graphs where "
            "there is a GPU, eager elsewhere), or put the ranks on `cuda:N`/`auto:N`",
        )

    def capture(self, entry, max_batch: int | None, max_entry) -> tuple[int, ...]:
        if entry is None:
            return ()
        _, node = entry
        items = self.list_(node, "`capture`")
        if items is None:
            return ()
        if len(items) > MAX_CAPTURE_BUCKETS:
            # refused before any bucket is read: each one is a graph captured per unit and rank
            self.error(
                "WG816",
                f"{len(items):,} capture buckets: at most {MAX_CAPTURE_BUCKETS} are captured",
                span(self.file, node),
                label="too many buckets",
                help="capture a few sizes (e.g. `[1, 2, 4, 8, 16, 32]`): a batch between two "
                "buckets runs in the next larger one",
            )
            return ()
        out: list[int] = []
        last: tuple[int, Span] | None = None
        for item in items:
            b = self.int_(item, "a capture bucket")
            if b is None:
                continue
            s = span(self.file, item)
            if b < 1:
                self.error(
                    "WG816",
                    f"capture bucket {b} is not a positive batch size",
                    s,
                    label="not a batch size",
                    help="buckets are batch sizes to capture graphs for: 1 or more",
                )
            elif last is not None and b <= last[0]:
                self.error(
                    "WG816",
                    f"capture buckets must be strictly ascending: {b} follows {last[0]}",
                    s,
                    label="out of order" if b < last[0] else "repeated",
                    labels=[Label(last[1], "previous bucket")],
                    help="list each bucket once, smallest first, e.g. `[1, 2, 4, 8]`",
                )
            elif max_batch is not None and b > max_batch:
                self.error(
                    "WG816",
                    f"capture bucket {b} exceeds `max_batch: {max_batch}`",
                    s,
                    label="larger than any batch",
                    labels=[Label(self.value_span(max_entry), "the largest batch")],
                    help=f"drop buckets above {max_batch}, or raise `max_batch`",
                )
            else:
                out.append(b)
                last = (b, s)
        return tuple(out)

    def max_concurrent(self, entry) -> int:
        got = self.positive(entry, "`max_concurrent_requests`", "WG817")
        return got or DEFAULT_MAX_CONCURRENT

    def attention(self, entry) -> str:
        return self.choice(entry, "an attention backend", ATTENTION)


def _detect(root: yaml.MappingNode) -> tuple[str, yaml.Node | None]:
    """The format the first key only one format knows picks (wgc when there is none)."""
    only = {f: set(TOP[f]) - set(TOP[other(f)]) for f in TOP}
    for k, _ in root.value:
        if isinstance(k, yaml.ScalarNode):
            for fmt, keys in only.items():
                if k.value in keys:
                    return fmt, k
    return "wgc", None


def _derived_world(groups: tuple[Group, ...]) -> int:
    return max((r for g in groups for r in g.ranks), default=0) + 1
