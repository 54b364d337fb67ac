"""Inputs that were internal errors (exit 2) and are now user errors (exit 1 with a reason).

Issue 34, point 4: a placement param whose YAML value is a date, a `.walk` file name with a byte
that is not UTF-8, an every-interface address in `hosts`, a duration of `nan`, a `cuda` device
on a machine without one, and a node that cannot be built under `--local`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgc.cli import main
from wgc.config import Env
from wgc.driver import Driver
from wgc.placement.check import check_placement

ROOT = Path(__file__).resolve().parents[2]
ORPHEUS = ROOT / "wgc_models" / "orpheus" / "orpheus.walk"
TINY = (
    'model tiny\n\nnode A: stateless {\n  impl "m:A"\n  in  x: f32[4]\n  out x: f32[4]\n}\n\n'
    "walk w(x?: f32[4]) {\n  A(x) -> y = x\n  emit y as tensor\n}\n\nflow main { w() }\n"
)
ONE_RANK = "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"


def _invoke(args: list[str]):
    return CliRunner().invoke(main, args, obj=Env())


def _codes(placement: str) -> list[str]:
    model = Driver().front_end(str(ORPHEUS)).model
    return [d.code for d in check_placement(model, "p.yaml", placement).diagnostics]


def test_a_date_as_a_param_value_is_the_string_it_reads_as(tmp_path: Path) -> None:
    placement = tmp_path / "date.yaml"
    placement.write_text(
        "devices: [cpu]\nplace:\n  - nodes: [LLM, snac_decoder]\n    ranks: [0]\n"
        "params: {frame: 2001-12-14}\n",
        encoding="utf-8",
    )
    res = _invoke(["compile", str(ORPHEUS), "--placement", str(placement), "-o", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "error[WG815]: param `frame` is an integer, but the override is a string" in res.stderr
    assert "2001-12-14" in res.stderr and "internal" not in res.stderr


def test_a_file_name_that_is_not_utf8_compiles(tmp_path: Path) -> None:
    walk = tmp_path / os.fsdecode(b"bad\xff.walk")  # the byte decodes to a lone surrogate
    try:
        walk.write_text(TINY, encoding="utf-8")
    except (UnicodeEncodeError, OSError):
        pytest.skip("this file system takes only UTF-8 names")
    placement = tmp_path / "p.yaml"
    placement.write_text(ONE_RANK, encoding="utf-8")
    out = tmp_path / "out"
    res = _invoke(["compile", str(walk), "--placement", str(placement), "-o", str(out)])
    assert res.exit_code == 0, res.output
    module = (out / "rank_0.py").read_text(encoding="utf-8")
    assert 'source="bad\\udcff.walk:' in module  # the escape, which Python reads back as it was
    compile(module, "rank_0.py", "exec")


@pytest.mark.parametrize("host", ["0.0.0.0", "'::'", "'*'", "'[::]'"])
def test_an_every_interface_address_is_not_a_host(host: str) -> None:
    placement = (
        f"devices: [cpu, cpu]\nhosts: {{0: {host}, 1: 10.0.0.2}}\nplace:\n"
        "  - nodes: [LLM]\n    ranks: [0]\n  - nodes: [snac_decoder]\n    ranks: [1]\n"
    )
    assert _codes(placement) == ["WG829"]
    assert _codes(placement.replace(host, "10.0.0.1")) == []


@pytest.mark.parametrize(
    "args",
    [
        ["run", "x.walk", "--timeout", "nan"],
        ["run", "x.walk", "--timeout", "inf"],
        ["run", "x.walk", "--timeout", "-1"],
        ["run", "x.walk", "--ready-timeout", "NaN"],
        ["serve", "x.walk", "--ready-timeout", "nan"],
        ["serve", "x.walk", "--join-timeout", "nan"],
        ["worker", "--join", "j.json", "--rank", "0", "--wait", "nan"],
    ],
)
def test_a_duration_is_a_finite_number_above_zero(args: list[str]) -> None:
    res = _invoke(args)
    assert res.exit_code == 1, res.output
    assert "give a finite number of seconds above 0" in res.output


def test_a_duration_takes_a_plain_number() -> None:
    from wgc.cli.seconds import SECONDS

    assert SECONDS.convert("2.5", None, None) == 2.5
    assert SECONDS.convert(3, None, None) == 3.0


def test_a_cuda_device_on_a_machine_without_one_is_a_deployment_error() -> None:
    torch = pytest.importorskip("torch")
    from wgc_runtime.host.loading import DeploymentError, resolve_device

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        with pytest.raises(DeploymentError, match=f"has {count} CUDA device"):
            resolve_device(f"cuda:{count}")
        return
    with pytest.raises(DeploymentError, match="puts a rank on `cuda:1`, but"):
        resolve_device("cuda:1")
    assert resolve_device("auto:1") == "cpu" and resolve_device("cpu") == "cpu"


def test_a_node_that_cannot_be_built_locally_is_a_deployment_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from wgc_runtime.host.loading import DeploymentError
    from wgc_runtime.host.local import LocalCluster

    walk, placement = tmp_path / "tiny.walk", tmp_path / "p.yaml"
    walk.write_text(TINY, encoding="utf-8")
    placement.write_text(ONE_RANK, encoding="utf-8")
    result = Driver().compile(str(walk), str(placement))
    assert not result.errors and result.plan is not None

    def factory(rank):
        raise ValueError("checkpoint `x`: layers 2 (checkpoint: 3)")

    from wgc_runtime.host.loading import load_plan

    out = tmp_path / "plan"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    with pytest.raises(DeploymentError, match=r"rank 0 failed to start: ValueError: checkpoint"):
        LocalCluster(load_plan(out), nodes_factory=factory)


@pytest.mark.parametrize("name", [b"q\xff.yaml", b"a\nimport os.yaml"])
def test_a_placement_name_reaches_generated_comments_escaped(tmp_path: Path, name: bytes) -> None:
    # found by benchmarks/fuzz_front_end.py: `placed(...)` notes quote the placement's name
    placement = tmp_path / os.fsdecode(name)
    try:
        placement.write_text(
            (ROOT / "wgc_models/bagel/placements/cpu.yaml").read_text(encoding="utf-8"),
            encoding="utf-8",
        )
    except (UnicodeEncodeError, OSError):
        pytest.skip("this file system takes only UTF-8 names")
    bagel = ROOT / "wgc_models/bagel/bagel.walk"
    res = _invoke(["compile", str(bagel), "--placement", str(placement), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    conductor = (tmp_path / "o" / "conductor.py").read_text(encoding="utf-8")
    assert "\nimport os" not in conductor
    compile(conductor, "conductor.py", "exec")
