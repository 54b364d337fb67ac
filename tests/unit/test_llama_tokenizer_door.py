"""A Llama checkpoint folder without its ``tokenizer.json`` (`wgc_models.llama.text`): a real
vocabulary is refused (WG879) before any weight is built; a byte vocabulary, and no checkpoint
at all (the tiny random model), keep the prompt's bytes as its ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wgc_models.llama.detokenizer import load_tokenizer
from wgc_models.llama.text import prompt_format, prompt_ids, tokenizer_file
from wgc_runtime.contract.node import NodeContext, NodeError


def _folder(tmp_path: Path, config: dict[str, object] | None) -> Path:
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("config", [{"vocab_size": 128256}, {"vocab_size": 257}, {}, None])
def test_a_real_vocabulary_without_its_tokenizer_is_refused(
    tmp_path: Path, config: dict[str, object] | None
) -> None:
    path = str(_folder(tmp_path, config))
    for build in (
        lambda: prompt_format({"checkpoint": path}, "LLM"),
        lambda: load_tokenizer(path, "detokenizer"),
    ):
        with pytest.raises(NodeError) as info:
            build()
        msg = str(info.value)
        assert msg.startswith("WG879: node `")
        assert f"checkpoint `{path}` has no `tokenizer.json`" in msg
        assert "docs/checkpoints.md" in msg
        if config and "vocab_size" in config:
            assert f"a vocabulary of {config['vocab_size']} ids" in msg


@pytest.mark.parametrize("checkpoint", ["", "byte-vocabulary"])
def test_bytes_stay_ids_without_a_checkpoint_or_with_a_byte_vocabulary(
    tmp_path: Path, checkpoint: str
) -> None:
    path = str(_folder(tmp_path, {"vocab_size": 256})) if checkpoint else ""
    assert tokenizer_file(path, "LLM") is None
    assert load_tokenizer(path, "detokenizer") is None
    fmt = prompt_format({"checkpoint": path}, "LLM")
    assert fmt is None
    prompt = torch.tensor(list("héllo".encode()), dtype=torch.long)
    assert prompt_ids(fmt, prompt, "LLM").tolist() == list("héllo".encode())


def test_the_refusal_comes_before_the_weights_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder node asks for its prompt format first: a refused folder builds nothing."""
    from wgc_models.llama import nodes

    def build_model(*args: object) -> None:
        raise AssertionError("weights built before the tokenizer was checked")

    monkeypatch.setattr(nodes, "build_model", build_model)
    config = {"checkpoint": str(_folder(tmp_path, {"vocab_size": 32000})), "kv_tokens": 64}
    with pytest.raises(NodeError, match="WG879"):
        nodes.Decoder(NodeContext(name="LLM", config=config))
