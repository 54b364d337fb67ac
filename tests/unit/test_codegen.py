"""Code generation: the layout printer, flow translation, spec parity, and the generated modules
behaving as the source says (flows yield the walks a request needs; RANK matches plan.json)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.narrow import present
from wgc.cli import main
from wgc.codegen import pyfmt
from wgc.codegen.flows import cond_py
from wgc.diagnostics.diagnostic import Span
from wgc.driver import CompileResult, Driver
from wgc.ir import flow as F
from wgc.lower.flowplan import fold
from wgc.lower.plan import plain
from wgc_runtime.contract import conductor as CC
from wgc_runtime.contract import flow as S
from wgc_runtime.contract import spec as C

ROOT = Path(__file__).resolve().parents[2]
BAGEL = "wgc_models/bagel/bagel.walk"
SP = Span("t.walk", 1, 1, 1, 2)

CPU_BAGEL = """\
devices: [cpu]
place:
  - nodes: [vit_encoder, vae_encoder, LLM, combine_cfg, vae_decoder]
    ranks: [0]
"""
CFG_BAGEL = """\
devices: [cpu, cpu, cpu]
place:
  - nodes: [vit_encoder, vae_encoder, LLM, combine_cfg, vae_decoder]
    ranks: [0]
  - nodes: [LLM_cfg_text]
    ranks: [1]
    walks: [image_gen_cfg, image_edit_cfg]
  - nodes: [LLM_cfg_img]
    ranks: [2]
    walks: [image_gen_cfg, image_edit_cfg]
"""


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # generated files name sources relative to the repository root, as the CLI is run there
    monkeypatch.chdir(ROOT)


def _compile(tmp_path: Path, yaml_text: str, name: str = "p") -> tuple[Path, CompileResult]:
    placement = tmp_path / f"{name}.yaml"
    placement.write_text(yaml_text, encoding="utf-8")
    result = Driver().compile(BAGEL, str(placement))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    out = tmp_path / "out" / name
    out.mkdir(parents=True)
    for fname, text in result.files.items():
        (out / fname).write_text(text, encoding="utf-8")
    return out, result


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the printer


def test_fits_on_one_line_or_one_item_per_line() -> None:
    short = pyfmt.call("F", kwargs=[("a", pyfmt.literal(1)), ("b", pyfmt.literal("x"))])
    assert pyfmt.statement("X = ", short, 0) == 'X = F(a=1, b="x")'
    long = pyfmt.call("F", kwargs=[(f"name{i}", pyfmt.literal("v" * 10)) for i in range(8)])
    text = pyfmt.statement("X = ", long, 0)
    assert text.splitlines()[0] == "X = F("
    assert text.splitlines()[-2].endswith(",") and text.endswith(")")


def test_one_tuple_and_comments() -> None:
    assert pyfmt.flat(pyfmt.literal((1,))) == "(1,)"
    doc = pyfmt.tuple_([pyfmt.literal(1)], [["a.walk:3"]])
    assert pyfmt.statement("X = ", doc, 0) == "X = (\n    # a.walk:3\n    1,\n)"


def test_strings_are_quoted_like_ruff() -> None:
    assert pyfmt.string("plain").text == '"plain"'
    assert pyfmt.string('say "hi"').text == "'say \"hi\"'"
    assert pyfmt.string("both \" and '").text == '"both \\" and \'"'
    assert pyfmt.string("a\\b\n").text == '"a\\\\b\\n"'


# ---------------------------------------------------------------- conditions


def test_placed_folds_and_simplifies() -> None:
    wants = F.RequestPred("wants", "image", SP)
    placed = F.Placed("LLM_cfg_text", SP)
    both = F.BoolOp("and", wants, placed, SP)
    assert cond_py(fold(both, frozenset({"LLM_cfg_text"}))) == 'req.wants("image")'
    assert fold(both, frozenset()) is False
    either = F.BoolOp("or", placed, wants, SP)
    assert fold(either, frozenset({"LLM_cfg_text"})) is True
    assert cond_py(fold(F.Not(either, SP), frozenset())) == 'not req.wants("image")'


def test_conditions_keep_reader_parentheses() -> None:
    a, b, c = (F.RequestPred("wants", m, SP) for m in ("text", "image", "audio"))
    cond = F.BoolOp("or", a, F.BoolOp("and", b, F.OptionCond("think", SP), SP), SP)
    text = cond_py(fold(cond, frozenset()))
    assert text == 'req.wants("text") or (req.wants("image") and req.option("think"))'
    neg = F.Not(F.BoolOp("or", a, c, SP), SP)
    assert cond_py(fold(neg, frozenset())) == 'not (req.wants("text") or req.wants("audio"))'


# ---------------------------------------------------------------- spec parity


def test_the_plan_is_made_of_the_contract_records(tmp_path: Path) -> None:
    out, result = _compile(tmp_path, CFG_BAGEL, "cfg")
    plan = present(result.plan, "plan")
    assert all(type(r) is C.RankSpec for r in plan.ranks)
    assert all(type(w) is CC.WalkSpec for w in plan.walks)
    assert type(plan.kv_cache) is C.KvCacheSpec and type(plan.attention) is C.AttentionSpec
    assert json.loads((out / "plan.json").read_text())["version"] == C.SPEC_VERSION
    for name in ("conductor.py", "rank_0.py", "rank_1.py", "rank_2.py"):
        text = (out / name).read_text(encoding="utf-8")
        assert f"\nSPEC_VERSION = {C.SPEC_VERSION}  #" in text, name


@pytest.mark.slow
def test_spec_module_does_not_import_the_compiler() -> None:
    code = (
        "import sys, wgc_runtime.contract.spec; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('wgc', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- generated modules


def _run(conductor, segments, outputs, options=None) -> list:
    req = conductor.CONDUCTOR.request(segments, outputs, options)
    steps = []
    for flow in conductor.CONDUCTOR.flows:
        if flow.kind == "always" or (flow.kind == "when" and flow.when(req)):
            steps += list(flow.body(req))
    return steps


def _walks(steps) -> list[str]:
    return [s.walk if isinstance(s, S.RunWalk) else f"fail: {s.message}" for s in steps]


def test_bagel_flows_pick_walks_by_request(tmp_path: Path) -> None:
    out, _ = _compile(tmp_path, CFG_BAGEL, "cfg")
    conductor = _load(out / "conductor.py", "bagel_cfg_conductor")
    text, image = S.Segment("text", "a cat"), S.Segment("image", b"png")
    # text-to-image: the CFG-parallel walk, since both CFG nodes are placed
    assert _walks(_run(conductor, [text], ["image"])) == ["prefill_text", "image_gen_cfg"]
    # image understanding: no VAE prefill (no image wanted), then decode
    steps = _run(conductor, [image, text], ["text"])
    assert _walks(steps) == ["prefill_vit", "prefill_text", "decode"]
    assert steps[0].args == {"image": image}
    assert steps[2].args == {"token": S.Persisted("new_token")}
    # editing with a text plan first: the edit walk, at the input image's grid
    steps = _run(conductor, [image, text], ["image"], {"think": True})
    assert _walks(steps) == [
        "prefill_vae",
        "prefill_vit",
        "prefill_text",
        "decode",
        "image_edit_cfg",
    ]
    # an unsupported input fails the request and stops the flow
    assert _walks(_run(conductor, [S.Segment("audio")], ["text"])) == [
        "fail: BAGEL takes text and image inputs"
    ]


def test_bagel_on_one_rank_uses_the_fused_walk(tmp_path: Path) -> None:
    out, _ = _compile(tmp_path, CPU_BAGEL, "cpu")
    conductor = _load(out / "conductor.py", "bagel_cpu_conductor")
    assert _walks(_run(conductor, [S.Segment("text")], ["image"])) == [
        "prefill_text",
        "image_gen",
    ]
    steps = _run(conductor, [S.Segment("image", b"png"), S.Segment("text")], ["image"])
    assert _walks(steps)[-1] == "image_edit"
    source = (out / "conductor.py").read_text(encoding="utf-8")
    assert "placed(LLM_cfg_text) is False" in source


def test_rank_modules_match_plan_json(tmp_path: Path) -> None:
    out, _ = _compile(tmp_path, CFG_BAGEL, "cfg")
    assert sorted(p.name for p in out.iterdir()) == [
        "__init__.py",
        "conductor.py",
        "plan.json",
        "rank_0.py",
        "rank_1.py",
        "rank_2.py",
    ]
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    for r, rank_plan in enumerate(plan["ranks"]):
        rank = _load(out / f"rank_{r}.py", f"bagel_cfg_rank_{r}").RANK
        assert json.loads(json.dumps(plain(rank))) == rank_plan
        assert (rank.model, rank.placement, rank.world_size) == ("bagel", "cfg", 3)
    conductor = _load(out / "conductor.py", "bagel_cfg_conductor2").CONDUCTOR
    walks = json.loads(json.dumps([plain(w) for w in conductor.walks]))
    assert walks == plan["walks"]
    assert list(conductor.placed) == plan["placed"]
    assert conductor.world_size == len(plan["ranks"])


def test_generated_code_is_annotated_and_readable(tmp_path: Path) -> None:
    out, _ = _compile(tmp_path, CFG_BAGEL, "cfg")
    rank0 = (out / "rank_0.py").read_text(encoding="utf-8")
    lines = rank0.splitlines()
    assert lines[0].startswith("# @generated by wgc ")
    assert "wgc_models/bagel/bagel.walk (sha256 " in lines[0]
    assert "DO NOT EDIT." in lines[1]
    assert "\nNODE_LLM = NodeSpec(\n" in rank0
    assert "\nPIECE_IMAGE_GEN_CFG = PieceSpec(\n" in rank0
    assert "# wgc_models/bagel/bagel.walk:" in rank0
    assert str(ROOT) not in rank0  # paths stay relative, as given
    conductor = (out / "conductor.py").read_text(encoding="utf-8")
    assert "def flow_main(req: Request) -> FlowGen:" in conductor
    assert 'yield RunWalk("decode", {"token": Persisted("new_token")})' in conductor


@pytest.mark.slow
def test_output_is_the_same_under_other_hash_seeds(tmp_path: Path) -> None:
    placement = tmp_path / "cfg.yaml"
    placement.write_text(CFG_BAGEL, encoding="utf-8")
    code = (
        "import hashlib, sys; from wgc.driver import Driver; "
        f"r = Driver().compile({BAGEL!r}, sys.argv[1]); "
        "print(hashlib.sha256(repr(sorted(r.files.items())).encode()).hexdigest())"
    )
    digests = set()
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, str(placement)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


# ---------------------------------------------------------------- the command


def test_compile_command_writes_checks_and_prunes(tmp_path: Path) -> None:
    placement = tmp_path / "cfg.yaml"
    placement.write_text(CFG_BAGEL, encoding="utf-8")
    out = tmp_path / "gen"
    args = ["compile", BAGEL, "--placement", str(placement), "-o", str(out)]
    assert main.main(args, standalone_mode=False) == 0
    assert (out / "rank_2.py").is_file()
    assert main.main([*args, "--check"], standalone_mode=False) == 0
    (out / "rank_9.py").write_text("# old\n", encoding="utf-8")
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    assert main.main([*args, "--check"], standalone_mode=False) == 1
    assert main.main(args, standalone_mode=False) == 0
    assert not (out / "rank_9.py").exists()
    assert (out / "notes.txt").exists()  # not a generated name: left alone


def test_compile_command_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    placement = tmp_path / "bad.yaml"
    placement.write_text(CPU_BAGEL.replace("ranks:", "rank:"), encoding="utf-8")
    args = ["compile", BAGEL, "--placement", str(placement), "-o", str(tmp_path / "o")]
    assert main.main(args, standalone_mode=False) == 1
    err = capsys.readouterr().err
    assert "unknown key `rank`" in err and "could not compile" in err
    assert not (tmp_path / "o").exists()
    placement.write_text(CPU_BAGEL, encoding="utf-8")
    assert main.main([*args, "--set", "stepz=3"], standalone_mode=False) == 1


# ---------------------------------------------------------------- every flow construct

SMALL = """\
model small

option n: int = 2
option loud: bool = false

node Embed: stateless {
  impl "demo.nodes:Embed"
  in  tokens: i64[T]
  out hidden: f32[T, 64]
}

walk encode(tokens: i64[T]) {
  Embed(tokens) -> hidden
  emit hidden as tensor
  persist tokens
}

flow main {
  for seg in request.inputs {
    match seg.modality {
      text | image => {
        encode(tokens = seg)
        repeat option.n * 2 { encode(tokens = seg) }
      }
      audio => encode(tokens = seg)
      video => encode(tokens = seg)
      _ => fail "no \\"tensor\\" inputs"
    }
  }
  if request.wants(text) {
    if option.loud { if not placed(Embed) or request.has(audio) { repeat 3 { encode(tokens) } } }
  }
}

flow side = "demo.flows:side"
"""
SMALL_PLACEMENT = "devices: [cpu]\nplace:\n  - nodes: [Embed]\n    ranks: [0]\n"


@pytest.mark.slow
def test_every_flow_construct_renders_clean_and_runs(tmp_path: Path) -> None:
    (tmp_path / "small.walk").write_text(SMALL, encoding="utf-8")
    (tmp_path / "one.yaml").write_text(SMALL_PLACEMENT, encoding="utf-8")
    result = Driver().compile(str(tmp_path / "small.walk"), str(tmp_path / "one.yaml"))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    source = (out / "conductor.py").read_text(encoding="utf-8")
    assert 'elif v_seg.modality in ("audio", "video"):' in source  # same arms merged
    assert 'if req.wants("text") and req.option("loud") and req.has("audio"):' in source
    assert 'for _ in range(req.option("n") * 2):' in source
    assert 'extern="demo.flows:side"' in source
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():
        config = ["--config", str(ROOT / "pyproject.toml")]
        for args in (["format", "--check"], ["check"]):
            run = subprocess.run([str(ruff), *args, *config, str(out)], capture_output=True)
            assert run.returncode == 0, run.stdout.decode() + run.stderr.decode()
    conductor = _load(out / "conductor.py", "small_conductor")
    steps = _run(
        conductor, [S.Segment("text"), S.Segment("audio")], ["text"], {"n": 1, "loud": True}
    )
    assert _walks(steps) == ["encode"] * 3 + ["encode"] + ["encode"] * 3
    assert steps[-1].args == {"tokens": S.Persisted("tokens")}
    assert _walks(_run(conductor, [S.Segment("tensor")], [])) == ['fail: no "tensor" inputs']
    side = conductor.CONDUCTOR.flow("side")
    assert side.kind == "extern" and side.body is None


def test_qwen3_omni_when_and_stream_flows() -> None:
    result = Driver().compile(
        "wgc_models/qwen3_omni/qwen3_omni.walk", "wgc_models/qwen3_omni/placements/cpu.yaml"
    )
    if not result.ok:
        pytest.skip("qwen3_omni cpu placement does not compile")
    namespace: dict = {}
    exec(compile(result.files["conductor.py"], "conductor.py", "exec"), namespace)
    spec = namespace["CONDUCTOR"]
    talker, code2wav = spec.flow("talker"), spec.flow("code2wav")
    assert talker.kind == "when" and code2wav.kind == "on_stream" and code2wav.stream == "codes"
    req = spec.request([S.Segment("text"), S.Segment("image")], ["audio"])
    assert talker.when(req) and not talker.when(spec.request([S.Segment("text")], ["text"]))
    assert _walks(talker.body(req)) == [
        "talker_prefill",  # once per segment
        "talker_prefill",
        "talker_prefill",  # the reply's opening
        "talker_last_prefill",
        "talker_decode",
    ]
    assert _walks(code2wav.body(req)) == ["code2wav_chunk"]
    assert spec.flow("text").kind == "on_stream" and spec.flow("text").stream == "text_tokens"
