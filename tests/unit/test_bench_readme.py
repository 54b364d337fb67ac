"""`benchmarks/readme_blocks.py`: rewriting the generated blocks of benchmarks/README.md leaves
everything outside them as it was, and bad markers are errors (no benchmark is run here)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "readme_blocks", ROOT / "benchmarks/readme_blocks.py"
)
assert _spec is not None and _spec.loader is not None
rb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rb)

DOC = (
    "# Title\n\nprose before\n\n"
    + rb.block("alpha", "| a |\n|---|\n| 1 |")
    + "\nprose between, | not a table row of a block\n\n"
    + rb.block("beta", "old beta")
    + "\n### Earlier runs\n\n| kept | table |\n|---|---|\n| 1 | 2 |\n"
)


def test_rewrite_replaces_only_the_named_body() -> None:
    new = rb.rewrite(DOC, {"alpha": "| a |\n|---|\n| 9 |\n\n"})
    assert "| 9 |\n<!-- end alpha -->" in new and "| 1 |\n<!-- end alpha" not in new
    assert new.replace("| 9 |", "| 1 |") == DOC  # nothing else moved, beta untouched
    assert "old beta" in new


def test_rewrite_all_blocks_and_idempotent() -> None:
    bodies = {"alpha": "A", "beta": "B\nB2"}
    once = rb.rewrite(DOC, bodies)
    assert rb.rewrite(once, bodies) == once
    assert rb.spans(once).keys() == {"alpha", "beta"}
    start, end = rb.spans(once)["beta"]
    assert once[start:end] == "B\nB2\n"
    assert once.startswith("# Title\n\nprose before\n\n") and once.endswith("| 1 | 2 |\n")


def test_missing_block_is_an_error() -> None:
    with pytest.raises(rb.BlockError, match="gamma"):
        rb.rewrite(DOC, {"gamma": "x"})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (rb.BEGIN.format(name="a") + "\nbody\n", "no '<!-- end a -->'"),
        ("x\n" + rb.END.format(name="a") + "\n", "without a begin"),
        (rb.block("a", "1") + rb.block("a", "2"), "twice"),
        (
            rb.BEGIN.format(name="a") + "\n" + rb.block("b", "x") + rb.END.format(name="a") + "\n",
            "inside",
        ),
        (rb.BEGIN.format(name="a") + "\n" + rb.END.format(name="b") + "\n", "no '<!-- end a"),
    ],
)
def test_unpaired_markers_are_errors(text: str, why: str) -> None:
    with pytest.raises(rb.BlockError, match=why):
        rb.rewrite(text, {})


def test_tables_are_runs_of_pipe_lines() -> None:
    out = "load 1.0\n| a | b |\n|---|---|\n| 1 | 2 |\nafter\n\n  | c |\n  |---|\n"
    assert rb.tables(out) == ["| a | b |\n|---|---|\n| 1 | 2 |", "| c |\n|---|"]
    assert rb.tables("no table here\n") == []


def load_all():
    """`benchmarks/all.py` as a module, leaving `sys.path` and `sys.modules` as they were."""
    all_spec = importlib.util.spec_from_file_location("bench_all", ROOT / "benchmarks/all.py")
    assert all_spec is not None and all_spec.loader is not None
    bench_all = importlib.util.module_from_spec(all_spec)
    path, modules = list(sys.path), set(sys.modules)
    sys.modules["bench_all"] = bench_all  # its dataclass looks its module up there
    try:
        all_spec.loader.exec_module(bench_all)
    finally:
        for name in set(sys.modules) - modules:  # plots, bagel_mixed, ...: benchmarks/'s own
            if (
                name == "bench_all"
                or Path(getattr(sys.modules[name], "__file__", None) or "/").parent
                == ROOT / "benchmarks"
            ):
                del sys.modules[name]
        sys.path[:] = path  # all.py puts benchmarks/ first; keep it off the other tests' path
    return bench_all


def test_the_readme_blocks_pair_up() -> None:
    """The real README parses, and every block it holds is one `benchmarks/all.py` writes."""
    bench_all = load_all()
    names = set(rb.spans((ROOT / "benchmarks/README.md").read_text()))
    assert names and names <= {b.name for b in bench_all.BENCHES}


@pytest.mark.slow
def test_the_benchmarks_do_not_import_matplotlib() -> None:
    """all.py and the scripts it imports load without matplotlib; only drawing imports it."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import all, plots, bagel_mixed; "
        "assert 'matplotlib' not in sys.modules, 'imported at load'"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _creator(svg: str) -> str:
    return svg.split("<dc:creator>", 1)[-1].split("</dc:creator>", 1)[0]


def test_plots_only_redraws_the_committed_figures(tmp_path) -> None:
    """`all.py --plots-only` draws every figure from benchmarks/results/, byte for byte the
    committed SVGs (when drawn by the same matplotlib), and a figure follows its data."""
    pytest.importorskip("matplotlib")
    bench_all = load_all()
    committed = ROOT / "benchmarks" / "plots"
    assert bench_all.main(["--plots-only", "--plots", str(tmp_path / "a")]) == 0
    drawn = sorted(p.name for p in (tmp_path / "a").glob("*.svg"))
    assert drawn == sorted(f"{n}.svg" for n in bench_all.plots.FIGURES)
    assert drawn == sorted(p.name for p in committed.glob("*.svg"))
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for name in drawn:
        assert f"](plots/{name})" in readme, f"the README shows no {name}"
        new, old = (tmp_path / "a" / name).read_text(), (committed / name).read_text()
        assert "<dc:date>" not in new
        if _creator(new) == _creator(old):  # the same matplotlib: the same bytes
            assert new == old, f"{name} differs from its data: run all.py --plots-only"
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    rows = json.loads((results / "vjepa_rollout.json").read_text())
    rows[-1]["native_over_runtime"] *= 3
    (results / "vjepa_rollout.json").write_text(json.dumps(rows))
    args = ["--plots-only", "--results", str(results), "--plots", str(tmp_path / "b")]
    assert bench_all.main(args) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    assert (b / "vjepa_rollout.svg").read_text() != (a / "vjepa_rollout.svg").read_text()
    assert (b / "pi05_actions.svg").read_text() == (a / "pi05_actions.svg").read_text()
