"""Shared test configuration: hypothesis profiles.

`dev` (the default) runs 200 examples per property; `ci` (loaded when `CI` is set, as every CI
service does) runs the same count derandomized, so a CI failure reproduces exactly, and without
a deadline, because shared CI machines stall. `HYPOTHESIS_PROFILE` picks a profile explicitly.

Threads: the tests' models are tiny, so torch's intra-op threads only contend for the cores (on
a loaded 2-core machine a 2-thread op can be 10-100x slower than on one); every test process and
the workers it starts run one intra-op thread unless `OMP_NUM_THREADS` says otherwise (set here,
before anything imports torch; the workers inherit the environment).

The `slow` rule: a test that starts a process (a `subprocess.Popen`, a `multiprocessing`
process, hence also `wgc run`'s workers, a server, a process pool) during its setup or its call
must carry `@pytest.mark.slow`, so `pytest -m "not slow"` stays the few-minute inner loop. The
hooks below watch both phases and fail a test that breaks the rule, naming what it started.
"""

import contextlib
import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from hypothesis import settings

settings.register_profile("dev", max_examples=200)
settings.register_profile("ci", max_examples=200, derandomize=True, deadline=None, print_blob=True)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


def pytest_addoption(parser):
    parser.addoption(
        "--bless",
        action="store_true",
        default=False,
        help="rewrite golden files (.stderr snapshots, IR dumps, generated code) from output",
    )


@contextlib.contextmanager
def _watching_processes(started: list[str]) -> Iterator[None]:
    """Record every child process started (from any thread) while the block runs."""
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def watched_popen_init(self, args, *rest, **kwargs):
        started.append(f"subprocess {str(args)[:120]}")
        popen_init(self, args, *rest, **kwargs)

    def watched_process_start(self):
        started.append(f"multiprocessing {self.name}")
        process_start(self)

    subprocess.Popen.__init__ = watched_popen_init
    multiprocessing.process.BaseProcess.start = watched_process_start
    try:
        yield
    finally:
        subprocess.Popen.__init__ = popen_init
        multiprocessing.process.BaseProcess.start = process_start


def _enforce_slow_mark(item: pytest.Item, phase: str):
    started: list[str] = []
    with _watching_processes(started):
        result = yield
    if started and item.get_closest_marker("slow") is None:
        shown = "\n  ".join(started[:5]) + ("\n  ..." if len(started) > 5 else "")
        pytest.fail(
            f"{item.nodeid} started {len(started)} process(es) in its {phase} but is not "
            f"marked `@pytest.mark.slow` (the fast lane, `pytest -m 'not slow'`, starts none):\n"
            f"  {shown}",
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _enforce_slow_mark(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _enforce_slow_mark(item, "call"))
