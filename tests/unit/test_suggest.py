"""The shared did-you-mean helper: what counts as close, and deterministic ties."""

from __future__ import annotations

import difflib

from wgc.diagnostics.suggest import closest, did_you_mean, ranked


def test_closest_matches_difflib_scoring() -> None:
    names = ["tokens", "hidden", "audio", "text"]
    for word in ["token", "hiden", "audo", "txt", "zzz"]:
        want = difflib.get_close_matches(word, names, n=1)
        assert closest(word, names) == (want[0] if want else None)


def test_nothing_close_is_none() -> None:
    assert closest("zzz", ["tokens", "hidden"]) is None
    assert closest("x", []) is None
    assert did_you_mean("zzz", ["tokens"]) == ""


def test_ties_break_in_sorted_order_whatever_the_input_order() -> None:
    # `vocoder` is exactly as close to `decoder` as to `encoder`
    assert closest("vocoder", ["encoder", "decoder"]) == "decoder"
    assert closest("vocoder", ["decoder", "encoder"]) == "decoder"
    assert closest("vocoder", {"encoder", "decoder"}) == "decoder"


def test_ranked_is_best_first_without_duplicates() -> None:
    assert ranked("WG4O1", ["WG411", "WG401", "WG401", "WG999"], n=3) == ["WG401", "WG411"]
    assert ranked("WG4O1", ["WG411", "WG401"], n=1) == ["WG401"]


def test_did_you_mean_phrase() -> None:
    assert did_you_mean("tokns", ["tokens"]) == "did you mean `tokens`?"
    assert did_you_mean("tokns", ["tokens"], end=" ") == "did you mean `tokens`? "
