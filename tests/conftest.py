"""Shared test configuration: hypothesis profiles.

`dev` (the default) runs 200 examples per property; `ci` (loaded when `CI` is set, as every CI
service does) runs the same count derandomized, so a CI failure reproduces exactly, and without
a deadline, because shared CI machines stall. `HYPOTHESIS_PROFILE` picks a profile explicitly.

Threads: the tests' models are tiny, so torch's intra-op threads only contend for the cores (on
a loaded 2-core machine a 2-thread op can be 10-100x slower than on one); every test process and
the workers it starts run one intra-op thread unless `OMP_NUM_THREADS` says otherwise (set here,
before anything imports torch; the workers inherit the environment).
"""

import os

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
