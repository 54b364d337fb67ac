"""The verbose transcript's segments (`transcriptions._text`, `window_counts`): a model's
``window`` records (one per window: its index, how many text items it emitted) cut the text
outputs into windows, whatever order the records arrive in among them; anything short of one
record per window leaves the transcript in one piece."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fastapi")

from wgc_runtime.contract.messages import Output
from wgc_runtime.host.server.transcriptions import (
    _text,
    detected_language,
    timed_segments,
    window_counts,
)


def text(piece: bytes) -> Output:
    return Output("r", "text", "detokenize", "text", "text", (), torch.tensor(list(piece)))


def window(index: int, count: int, channel: str = "window") -> Output:
    return Output("r", "main", "decode", "tensor", channel, (), torch.tensor([index, count]))


def test_records_cut_the_text_into_windows_whatever_their_order() -> None:
    outs = [text(b"he"), text(b"llo"), window(1, 2), text(b" wo"), window(0, 2), text(b"rld")]
    assert window_counts(outs, 2) == [2, 2]
    assert _text(outs, 2) == ("hello world", ["hello", " world"])
    silent = [text(b"a"), window(2, 1), window(0, 0), window(1, 0)]  # windows without text
    assert _text(silent, 3) == ("a", ["", "", "a"])


def test_counts_that_disagree_with_the_text_items_leave_one_piece() -> None:
    outs = [text(b"a"), text(b"b"), text(b"c"), window(0, 1), window(1, 1)]
    assert window_counts(outs, 2) == [1, 1]
    assert _text(outs, 2) == ("abc", None)


def test_a_multibyte_character_is_decoded_within_its_window() -> None:
    e = "é".encode()
    outs = [text(e[:1]), text(e[1:]), window(0, 2), text(b"a"), window(1, 1)]
    assert _text(outs, 2) == ("éa", ["é", "a"])


@pytest.mark.parametrize(
    "records",
    [
        [(0, 1)],  # one window unaccounted for
        [(0, 1), (1, 1), (2, 0)],  # one too many
        [(0, 1), (0, 1)],  # the same window twice
        [(0, 3), (1, -1)],  # a negative count
    ],
)
def test_short_of_one_record_per_window_is_one_piece(records) -> None:
    outs = [text(b"a"), text(b"b")] + [window(i, n) for i, n in records]
    assert _text(outs, 2) == ("ab", None)


def test_other_tensors_and_channels_are_not_records() -> None:
    outs = [text(b"a"), window(0, 1, channel="latent"), text(b"b")]
    assert window_counts(outs, 1) is None
    odd = Output("r", "main", "decode", "tensor", "window", (), torch.tensor([0.0, 2.0]))
    assert window_counts([text(b"a"), text(b"b"), odd], 1) is None


def detected(code: bytes, channel: str = "detected") -> Output:
    data = torch.tensor(list(code), dtype=torch.uint8)
    return Output("r", "main", "report", "tensor", channel, (), data)


def test_the_language_is_the_first_windows_detected_record() -> None:
    outs = [text(b"hi"), window(0, 1), detected(b"de"), detected(b"fr"), window(1, 0)]
    assert detected_language(outs) == "de"
    assert detected_language([detected(b"yue")]) == "yue"


@pytest.mark.parametrize(
    "outs",
    [
        [text(b"hi"), window(0, 1)],  # a model that says nothing about it
        [detected(b"")],  # the node knew no code for the language token
        [detected(b"e n")],  # not a code
        [detected(b"de", channel="other")],
        [Output("r", "main", "report", "tensor", "detected", (), torch.tensor([100, 101]))],
    ],
)
def test_no_detected_code_leaves_the_language_unknown(outs: list[Output]) -> None:
    assert detected_language(outs) is None


def stamps(index: int, *pairs: int) -> Output:
    return Output("r", "main", "report", "tensor", "stamps", (), torch.tensor([index, *pairs]))


CUTS = [(0.0, 30.0, torch.zeros(1)), (30.0, 31.5, torch.zeros(1))]


def test_timestamp_tokens_cut_each_window_into_segments() -> None:
    # window 0: <|0.00|> " hi" <|1.20|><|1.20|> " yo" <|2.00|> <eos>; window 1: <|0.00|> " x" <eos>
    items = [b"", b" hi", b"", b"", b" yo", b"", b"", b"", b" x", b""]
    outs = [text(p) for p in items] + [window(0, 7), window(1, 3)]
    outs += [stamps(0, 0, 0, 2, 120, 3, 120, 5, 200), stamps(1, 0, 0)]
    assert timed_segments(outs, CUTS) == [
        (0.0, 1.2, " hi"),
        (1.2, 2.0, " yo"),
        (30.0, 31.5, " x"),  # no closing timestamp: to the window's end
    ]


@pytest.mark.parametrize(
    "records",
    [
        [stamps(0, 0, 0)],  # one window without its record
        [stamps(0, 0, 0), stamps(1, 0)],  # an unpaired item
        [stamps(0, 0, 0), stamps(0, 0, 0)],  # a window twice
    ],
)
def test_without_one_stamps_record_per_window_there_are_no_timed_segments(
    records: list[Output],
) -> None:
    outs = [text(b" a"), text(b" b"), window(0, 1), window(1, 1), *records]
    assert timed_segments(outs, CUTS) is None
