"""Bounded ports at run time (`wgc_runtime.engines.capture.bounded`): values padded to their
bound with their lengths, and cut back; a value that does not fit the bound (too long, other
dims, dtype, not a tensor) is None (the call runs `forward`); lengths that do not fit the rows
are an error."""

from __future__ import annotations

import pytest
import torch

from wgc_runtime.contract.capture import length_key
from wgc_runtime.engines.capture.bounded import cut_rows, pad_rows


def test_values_are_padded_to_the_bound_and_cut_back_to_their_lengths() -> None:
    values = [torch.tensor([7]), torch.tensor([1, 2, 3]), torch.tensor([], dtype=torch.int64)]
    got = pad_rows(values, (3,), torch.int64)
    assert got is not None
    padded, lengths = got
    assert padded.tolist() == [[7, 0, 0], [1, 2, 3], [0, 0, 0]]
    assert lengths.tolist() == [1, 3, 0]
    back = cut_rows(padded, lengths)
    assert [v.tolist() for v in back] == [[7], [1, 2, 3], []]
    padded[1, 0] = 99  # the cut rows are copies: the runner reuses its buffers
    assert back[1].tolist() == [1, 2, 3]


def test_trailing_dims_are_kept() -> None:
    values = [torch.ones(2, 4), torch.full((1, 4), 2.0)]
    got = pad_rows(values, (3, 4), torch.float32)
    assert got is not None
    padded, lengths = got
    assert padded.shape == (2, 3, 4) and lengths.tolist() == [2, 1]
    assert [tuple(v.shape) for v in cut_rows(padded, lengths)] == [(2, 4), (1, 4)]
    assert torch.equal(cut_rows(padded, lengths)[1], values[1])


@pytest.mark.parametrize(
    "value",
    [
        torch.arange(4),  # longer than the bound
        torch.arange(2, dtype=torch.int32),  # another dtype
        torch.zeros(2, 1, dtype=torch.int64),  # another rank
        [1, 2],  # not a tensor
        None,
    ],
)
def test_a_value_that_does_not_fit_the_bound_runs_forward(value) -> None:
    assert pad_rows([torch.tensor([1]), value], (3,), torch.int64) is None


@pytest.mark.parametrize("lengths", [[1, 4], [1, -1], [1]])
def test_lengths_that_do_not_fit_are_an_error(lengths) -> None:
    with pytest.raises(ValueError, match="do not fit"):
        cut_rows(torch.zeros(2, 3), torch.tensor(lengths))


def test_a_bounded_ports_lengths_go_by_one_name() -> None:
    assert length_key("accepted") == "accepted:len"
