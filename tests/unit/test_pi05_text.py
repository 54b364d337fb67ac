"""π0.5's text prompt (`wgc_models.pi05.text`): openpi's recipe (stripped, ``_`` and ``"\\n"`` as
spaces, ``<bos>``, the text's pieces, then ``"\\n"``'s) over a Gemma-style ``tokenizer.json``
written here with its ids spelled out, and over the tiny one the random weights speak through;
a checkpoint folder without ``tokenizer.json`` is refused (WG879) before any weight is built;
ids sent with option ``token_ids`` go in as they are; what is not text, too long or outside the
vocabulary is the request's error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from wgc_models.pi05.text import (
    MAX_TOKENS,
    TINY_FILE,
    PromptTokenizer,
    clean,
    prompt_ids,
    tokenizer_file,
)
from wgc_runtime.contract.node import NodeContext, NodeError, NodeInputError

# a SentencePiece-like vocabulary as Gemma's tokenizer.json spells it: its specials first (0-3),
# "▁" for a space, no space added before the first word, "\n" a piece of its own
GEMMA_LIKE = {
    "<pad>": 0,
    "<eos>": 1,
    "<bos>": 2,
    "<unk>": 3,
    "▁up": 4,
    "▁the": 5,
    "▁cup": 6,
    "\n": 7,
    "pick": 8,
    "▁pick": 9,
    "▁red": 10,
}


def _text(s: str) -> torch.Tensor:
    """A text field as the runtime hands it to a node: its UTF-8 bytes as i64."""
    return torch.tensor(list(s.encode("utf-8")), dtype=torch.long)


@pytest.fixture
def gemma_like(tmp_path: Path) -> Path:
    tok = Tokenizer(models.WordLevel(GEMMA_LIKE, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def test_openpi_cleaning() -> None:
    assert clean("  pick_up the\ncup \n") == "pick up the cup"


def test_a_gemma_vocabulary_gives_openpis_ids(gemma_like: Path) -> None:
    tok = PromptTokenizer.load(tokenizer_file(str(gemma_like), "LLM"), "LLM")
    got = prompt_ids(tok, _text(" pick_up the\nred cup\n"), False, 300, "LLM")
    # <bos>, "pick" (no dummy prefix), "▁up", "▁the", "▁red", "▁cup", then "\n" on its own
    assert got.tolist() == [2, 8, 4, 5, 10, 6, 7]


def test_the_tiny_tokenizer_equals_tokenizers_on_its_file() -> None:
    tok = PromptTokenizer.load(tokenizer_file("", "LLM"), "LLM")
    assert tok.path == str(TINY_FILE)
    ref = Tokenizer.from_file(str(TINY_FILE))
    body = ref.encode("put the cup on the table", add_special_tokens=False).ids
    want = [ref.token_to_id("<bos>"), *body, ref.token_to_id("Ċ")]  # Ċ: byte-level "\n"
    got = prompt_ids(tok, _text("put_the cup\non the table "), False, 512, "LLM").tolist()
    assert got == want
    assert ref.decode(got, skip_special_tokens=False) == "<bos>put the cup on the table\n"


def test_token_ids_go_in_as_they_are() -> None:
    tok = PromptTokenizer.load(TINY_FILE, "LLM")
    ids = torch.tensor([2, 5, 17, 3, 99, 511])
    assert prompt_ids(tok, ids, True, 512, "LLM").tolist() == ids.tolist()


@pytest.mark.parametrize(
    ("value", "token_ids", "says"),
    [
        (torch.arange(12), False, "control characters"),  # ids sent without the option
        (torch.tensor([300, 5]), False, "not text"),
        (torch.tensor([0xC3, 0x28]), False, "not UTF-8"),
        (torch.tensor([5, 512]), True, "token id 512 is outside the model's vocabulary"),
        (torch.zeros(MAX_TOKENS + 1, dtype=torch.long), True, f"over π0.5's {MAX_TOKENS}"),
        (_text("cup " * MAX_TOKENS), False, f"over π0.5's {MAX_TOKENS}"),
        (torch.zeros(0, dtype=torch.long), False, "an empty prompt"),
    ],
)
def test_what_cannot_be_a_prompt_is_the_requests_error(value, token_ids, says) -> None:
    tok = PromptTokenizer.load(TINY_FILE, "LLM")
    with pytest.raises(NodeInputError, match=says):
        prompt_ids(tok, value, token_ids, 512, "LLM")


@pytest.mark.parametrize(("node", "cls"), [("LLM", "LLM"), ("vit_encoder", "VitEncoder")])
def test_a_checkpoint_without_tokenizer_json_is_refused_before_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, cls: str
) -> None:
    from wgc_models.pi05 import nodes

    def build(*args: object) -> None:
        raise AssertionError("weights built before the tokenizer was checked")

    monkeypatch.setattr(nodes, "load_policy", build)
    monkeypatch.setattr(nodes, "load_vision", build)
    (tmp_path / "model.safetensors").write_bytes(b"")
    config = {"checkpoint": str(tmp_path), "layers": 2, "kv_heads": 1, "head_dim": 16}
    with pytest.raises(NodeError) as info:
        getattr(nodes, cls)(NodeContext(name=node, config=config))
    msg = str(info.value)
    assert msg.startswith(f"WG879: node `{node}`: checkpoint `{tmp_path}` has no `tokenizer.json`")
    assert "paligemma" in msg and "docs/checkpoints.md" in msg
