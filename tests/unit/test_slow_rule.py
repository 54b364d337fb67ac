"""The `slow` rule of tests/conftest.py: a test that starts a process without the `slow` mark
fails, naming what it started; a marked one, or one that starts nothing, passes. Run on a
scratch suite with a copy of the conftest, in a child pytest (so it is itself `slow`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import multiprocessing
import subprocess
import sys

import pytest


def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_multiprocessing():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()


@pytest.fixture
def child():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_fixture_starts_one(child):
    assert child.returncode == 0


@pytest.mark.slow
def test_marked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_starts_nothing():
    assert sum(range(4)) == 6
"""


@pytest.mark.slow
def test_a_test_that_starts_a_process_unmarked_fails(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_suite.py").write_text(SUITE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    slow: starts processes\n", encoding="utf-8"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 1, out
    assert "FAILED test_suite.py::test_unmarked_subprocess" in out
    assert "FAILED test_suite.py::test_unmarked_multiprocessing" in out
    assert "ERROR test_suite.py::test_unmarked_fixture_starts_one" in out
    assert "PASSED test_suite.py::test_marked_subprocess" in out
    assert "PASSED test_suite.py::test_unmarked_starts_nothing" in out
    assert "started 1 process(es) in its call but is not marked `@pytest.mark.slow`" in out
    assert "started 1 process(es) in its setup" in out
