"""A seeded subset of the nightly command-line fuzz (`benchmarks/fuzz_front_end.py`).

The nightly run is `-n 100000` (README, Reliability); CI runs the first 100 inputs of two seeds:
every command exits 0, or 1 with an `error:` line, within its time limit; never 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "fuzz_front_end", ROOT / "benchmarks" / "fuzz_front_end.py"
)
assert _spec is not None and _spec.loader is not None
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_front_end"] = fuzz
_spec.loader.exec_module(fuzz)


@pytest.mark.parametrize("seed", [34, 3400])
def test_seeded_cli_fuzz_has_no_internal_error(seed: int, tmp_path: Path) -> None:
    report = fuzz.run(100, seed, timeout=60.0, save=tmp_path)
    assert report.n == 100
    assert report.failed == 0, fuzz.markdown(report, seed)
    # the inputs reach past the parser: some commands succeed, most are refused with a reason
    outcomes = {o for _, o in report.codes}
    assert {"0", "1"} <= outcomes, report.codes


def test_an_input_replays_by_its_index(tmp_path: Path) -> None:
    a = fuzz.run(0, 7, only=[5, 11], save=tmp_path)
    b = fuzz.run(0, 7, only=[5, 11], save=tmp_path)
    assert a.codes == b.codes and a.n == 2
