"""The registry of every diagnostic code wgc can emit, grouped by pipeline stage.

Codes are never reused: a retired code stays here with ``retired=True``. Every live code has an
explanation file ``wgc/diagnostics/explanations/<CODE>.md`` (a failing and a fixed example that
the test-suite compiles) and at least one UI test under ``tests/ui/``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class Code:
    code: str
    stage: str
    severity: Severity
    title: str
    retired: bool = False


E = Severity.ERROR
W = Severity.WARNING

_STAGES = {
    "0": "syntax",
    "1": "names",
    "2": "types",
    "3": "loop-shape staticity",
    "4": "channel disjointness",
    "5": "chunk-policy types",
    "6": "dataflow",
    "7": "flows",
    "8": "placement",
    "9": "lints",
}

_TABLE: tuple[tuple[str, Severity, str], ...] = (
    # -- syntax (WG0xx): the file does not parse, or a parsed word is not one the language knows
    ("WG001", E, "syntax error"),
    ("WG002", E, "unexpected end of file"),
    ("WG003", E, "invalid character"),
    ("WG004", E, "unknown dtype"),
    ("WG005", E, "unknown stream option value"),
    ("WG006", E, "unknown chunk policy"),
    ("WG007", E, "malformed flow construct"),
    ("WG008", E, "unknown modality"),
    ("WG009", E, "invalid option declaration"),
    ("WG010", E, "cannot read source file"),
    ("WG011", E, "unknown node engine or engine argument"),
    ("WG012", E, "construct nested too deeply"),
    # -- names (WG1xx): every name resolves, none is declared twice
    ("WG101", E, "duplicate declaration"),
    ("WG102", E, "unknown node"),
    ("WG103", E, "unknown port"),
    ("WG104", E, "unknown type name"),
    ("WG105", E, "unknown name in expression"),
    ("WG106", E, "unknown walk"),
    ("WG107", E, "unknown stream"),
    ("WG108", E, "unknown option"),
    ("WG109", E, "duplicate port"),
    ("WG110", E, "invalid `like` base"),
    ("WG111", E, "invalid kv-cache label"),
    ("WG112", E, "duplicate binding in one call or signature"),
    ("WG113", E, "port used in the wrong direction"),
    ("WG114", E, "unknown walk argument"),
    ("WG115", E, "node has no `impl`"),
    ("WG116", E, "wrong subflow arguments"),
    ("WG117", E, "subflow calls itself"),
    ("WG118", E, "node `impl` does not import"),
    ("WG119", E, "node class does not fit its node"),
    # -- types (WG2xx): producer and consumer types agree; expressions are well typed
    ("WG201", E, "channel type mismatch"),
    ("WG202", E, "invalid dimension"),
    ("WG203", E, "invalid compile-time expression"),
    ("WG204", E, "option used with the wrong type"),
    ("WG205", E, "option in a dim is not a shape bucket"),
    ("WG206", E, "value is not one the option can take"),
    # -- loop-shape staticity (WG3xx): what a loop carries or calls has a static shape
    ("WG301", E, "loop-carried channel has a dynamic shape"),
    ("WG302", E, "node called in a loop has a dynamic port shape"),
    ("WG303", E, "loop bound is not a static positive integer"),
    ("WG304", W, "eager loop with dynamic shapes will not be graph-captured"),
    # -- channel disjointness (WG4xx): who writes a channel is never ambiguous
    ("WG401", E, "`par` branches write the same channel"),
    ("WG402", E, "channel bound twice in one scope"),
    ("WG403", E, "channel yielded both `last` and `all`"),
    ("WG404", E, "yielded channel is not bound in the loop body"),
    ("WG405", E, "`par` branch reads a channel written by a sibling branch"),
    ("WG406", E, "loop-local channel read after the loop"),
    # -- chunk-policy types (WG5xx): streams deliver what their consumers declare
    ("WG501", E, "chunk-policy parameter out of range"),
    ("WG502", E, "wrong chunk-policy parameters"),
    ("WG503", E, "consumer leading dimension does not match the chunk policy"),
    ("WG504", E, "consumer item type does not match the producer"),
    ("WG505", E, "static consumer can receive a short chunk"),
    ("WG506", E, "stream endpoint has the wrong direction"),
    ("WG507", E, "consumer port fed twice"),
    ("WG508", E, "`after_done continue` needs a consumer that accepts empty chunks"),
    # -- dataflow (WG6xx): every port is fed, no cycle outside a loop, `until` is sound
    ("WG601", E, "port reads a channel that is never bound"),
    ("WG602", E, "dataflow cycle outside a loop"),
    ("WG603", E, "`until` channel is not `bool[]`"),
    ("WG604", E, "`until` channel is not bound in the loop body"),
    ("WG605", E, "loop-carried channel has no initial value"),
    ("WG606", E, "emitted or persisted channel is never bound"),
    ("WG607", E, "inner loop starts from a value an outer loop carries"),
    ("WG608", W, "calls of one kv-cache node are not ordered by data"),
    # -- flows (WG7xx): the per-request state machine is well formed
    ("WG701", E, "walk is not reachable from any flow"),
    ("WG702", E, "persisted channel may be used before it is persisted"),
    ("WG703", E, "walk argument type mismatch"),
    ("WG704", E, "missing walk argument"),
    ("WG705", E, "unknown value in walk argument"),
    ("WG706", E, "model declares walks but no flow"),
    ("WG707", E, "`request.first(m)` may find no segment"),
    ("WG708", E, "flow nested too deeply or too large once subflows are expanded"),
    # -- placement (WG8xx): reserved for the placement stage
    ("WG801", E, "placement file is not valid YAML"),
    ("WG802", E, "unknown placement key"),
    ("WG803", E, "placement value has the wrong type"),
    ("WG804", E, "missing required placement entry"),
    ("WG805", E, "duplicate placement key"),
    ("WG806", E, "placement mixes the wgc and M* formats"),
    ("WG807", E, "unknown node in placement"),
    ("WG808", E, "unknown walk in placement"),
    ("WG809", E, "invalid rank"),
    ("WG810", E, "tensor-parallel size does not divide the rank group"),
    ("WG811", E, "node is not placed for a walk that runs it"),
    ("WG812", E, "node placed twice for one walk"),
    ("WG813", E, "kv cache shared by rank groups with different tensor-parallel sizes"),
    ("WG814", E, "stream consumer placed on several rank groups"),
    ("WG815", E, "invalid param override"),
    ("WG816", E, "invalid capture buckets"),
    ("WG817", E, "invalid serving setting"),
    ("WG818", E, "invalid device"),
    ("WG819", E, "host names a rank that does not exist"),
    ("WG820", W, "placement entry never takes effect"),
    ("WG821", W, "rank runs no node"),
    ("WG822", E, "sequence-parallel size does not fit the rank group"),
    ("WG823", W, "residency the runtime does not honour"),
    ("WG824", E, "placement nested too deeply"),
    ("WG825", E, "placement names a device this machine does not have"),
    ("WG826", E, "rank does not fit its device"),
    ("WG827", E, "real-size weights without a checkpoint"),
    ("WG828", E, "writable KV copy not on its owner's only rank group"),
    ("WG829", E, "host is an every-interface address, not a machine"),
    ("WG853", E, "unknown walk in `on_restart`"),
    ("WG898", E, "`on_restart` names a rank the walk has no piece on"),
    ("WG899", E, "`on_restart` names a piece by something other than its rank"),
    # -- command arguments: a model or placement given by name (`wgc run orpheus -p cpu-2rank`)
    ("WG840", E, "no model file or registered model family by that name"),
    ("WG841", E, "no placement file or placement by that name"),
    # bounded dims (`i64[<=K]`, a variable-length emission captured at its bound): numbered in
    # a range handed out with the placement's, but their stages are their own (`_OWN_STAGE`)
    ("WG863", E, "bounded dim's bound is not a positive integer"),
    ("WG864", E, "node returned more values than a bounded dim allows"),
    # a checkpoint's text files, found as its nodes are built (`_OWN_STAGE`: "run")
    ("WG879", E, "checkpoint without the tokenizer its vocabulary needs"),
    ("WG880", E, "checkpoint's chat template does not render part by part"),
    # the conductor's client port (`wgc_runtime.host.transport.client_port`; `_OWN_STAGE`: "run")
    ("WG893", E, "client not allowed at the client port"),
    ("WG894", E, "unknown client port kind"),
    # -- lints (WG9xx): warnings for declarations nothing uses
    ("WG901", W, "unused node"),
    ("WG902", W, "unused param"),
    ("WG903", W, "unused type"),
    ("WG904", W, "unused stream"),
    ("WG905", W, "channel bound but never read"),
    ("WG906", W, "unused option"),
    ("WG907", W, "unused walk input"),
    ("WG908", W, "unused subflow"),
)

# codes `wgc run` / `wgc serve` report when they check a compiled plan against the machine,
# before any weight is built (`wgc.cli.preflight`): numbered with the placement's codes, whose
# devices and sizes they are about, but found at launch, so their explanations show commands
# (tests/unit/test_preflight.py runs them) instead of a placement the checker rejects
LAUNCH = frozenset({"WG825", "WG826", "WG827"})
# codes of a command's arguments (`wgc.cli.targets`): a name that is neither a file nor a
# registered model family / a placement of the model's folder; their explanations show commands
# (tests/unit/test_targets.py runs them)
COMMAND = frozenset({"WG840", "WG841"})

# codes whose stage is not their number's: WG863 is a type error; WG864, WG879, WG880, WG893
# and WG894 are found while a plan runs (a node's outputs; a checkpoint's text files as its node
# is built; a client at the client port), so their explanations show no failing check
_OWN_STAGE = {
    "WG863": "types",
    "WG864": "run",
    "WG879": "run",
    "WG880": "run",
    "WG893": "run",
    "WG894": "run",
}


def stage_of(code: str) -> str:
    if code in _OWN_STAGE:
        return _OWN_STAGE[code]
    if code in LAUNCH:
        return "launch"
    return "command" if code in COMMAND else _STAGES[code[2]]


REGISTRY: dict[str, Code] = {
    code: Code(code, stage_of(code), sev, title) for code, sev, title in _TABLE
}


def lookup(code: str) -> Code:
    """The registered code ``code`` (KeyError if it was never registered)."""
    return REGISTRY[code]
