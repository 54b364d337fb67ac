"""Lowering the language's per-request constructs: option values and per-mode defaults in the
conductor's `OptionSpec`s, one capture entry per shape bucket, persisted channels as cross-rank
transfers, and the flow code for comparisons, `match option.NAME`, `request.count/first`."""

from __future__ import annotations

from pathlib import Path

from wgc.driver import Driver
from wgc_runtime.contract.kinds import OptionType

ROOT = Path(__file__).resolve().parents[2]
WAN = str(ROOT / "wgc_models" / "wan22" / "wan22.walk")
WAN_3 = str(ROOT / "wgc_models" / "wan22" / "placements" / "cpu-3rank.yaml")
DRIVER = Driver()


def _compiled():
    result = DRIVER.compile(WAN, WAN_3)
    assert result.ok and result.plan is not None, [d.message for d in result.errors]
    return result


def test_options_carry_their_values_and_per_mode_defaults() -> None:
    plan = _compiled().plan
    assert plan is not None
    options = {o.name: o for o in plan.options}
    assert options["frames"].choices == (17, 33) and options["frames"].type is OptionType.INT
    assert options["mode"].choices == ("t2v", "i2v")
    guidance = options["guidance"]
    assert (guidance.default_by, guidance.by_value, guidance.default) == (
        "mode",
        (("i2v", 3.5),),
        4.0,
    )


def test_a_loop_over_shape_buckets_is_captured_once_per_bucket() -> None:
    plan = _compiled().plan
    assert plan is not None
    caps = [c for r in plan.ranks for c in r.captures if c.walk == "generate"]
    high = [c for c in caps if "dit_high" in c.nodes]
    shapes = {c.shape for c in high}
    assert len(shapes) == 8  # frames x height x width
    first = next(c for c in high if dict(c.shape) == {"frames": 17, "height": 64, "width": 64})
    dims = {t.dims for name, t in first.ports if name.endswith("#latents")}
    assert dims == {(16, 5, 8, 8)}
    assert all(t.is_static for c in caps for _, t in c.ports)


def test_persisted_channels_read_on_other_ranks_are_transfers() -> None:
    plan = _compiled().plan
    assert plan is not None
    persisted = {
        (t.channel, t.src_rank, t.dst_rank) for t in plan.transfers if t.edge == "persisted"
    }
    assert ("context", 0, 1) in persisted and ("context", 0, 2) in persisted
    ctx = next(t for t in plan.transfers if t.edge == "persisted" and t.channel == "context")
    assert ctx.nbytes == 32 * 32 * 4
    latents = [t for t in plan.transfers if t.channel == "latents" and t.edge == "loop_carried"]
    assert latents and all(t.nbytes == 16 * 9 * 16 * 14 * 4 for t in latents)  # largest bucket


def test_flow_code_for_comparisons_option_match_and_segment_selection() -> None:
    conductor = _compiled().files["conductor.py"]
    assert 'if req.count("text") != 1:' in conductor
    assert '{"prompt": req.first("text"), "negative": req.option("negative_prompt")}' in conductor
    assert 'if req.option("mode") == "i2v":' in conductor
    assert 'elif req.option("mode") == "t2v":' in conductor
