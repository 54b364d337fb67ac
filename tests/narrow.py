"""Narrowing for tests: a value the test knows is there (`present`), with a clear failure if not."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "value") -> T:
    """``value``, which the test expects to be set; fails the test if it is None."""
    assert value is not None, f"expected a {what}, got None"
    return value


def all_present(values: Iterable[T | None], what: str = "value") -> list[T]:
    """``values`` as a list, every one of which the test expects to be set."""
    return [present(v, what) for v in values]
