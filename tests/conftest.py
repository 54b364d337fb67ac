"""Shared test configuration: hypothesis profiles.

`dev` (the default) runs 200 examples per property; `ci` (loaded when `CI` is set, as every CI
service does) runs the same count derandomized, so a CI failure reproduces exactly, and without
a deadline, because shared CI machines stall. `HYPOTHESIS_PROFILE` picks a profile explicitly.
"""

import os

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
