"""GPT-2 against transformers: a tiny ``GPT2LMHeadModel`` with random weights, saved by
transformers as a checkpoint folder, is loaded through ``wgc_models/gpt2/checkpoint.py`` and run
on the compiled runtime (in this process); its greedy tokens equal transformers' ``generate``,
token for token, on both placements (a token of the tiny vocabulary is one byte of the reply's
text)."""

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from wgc.driver import Driver
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.local import LocalCluster

FOLDER = Path(__file__).resolve().parents[2] / "wgc_models" / "gpt2"
PROMPT = "Hello, GPT-2"
NEW = 16  # the .walk's max_new_tokens


def save_tiny_gpt2(path: Path) -> Path:
    """The .walk's tiny sizes as a GPT2LMHeadModel with random weights, saved by transformers."""
    config = transformers.GPT2Config(
        vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():  # larger than GPT-2's own init, so the tokens vary
        for p in model.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))


def transformers_tokens(path: Path) -> list[int]:
    model: Any = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    ids = torch.tensor([list(PROMPT.encode())])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
        pad_token_id=0,
    )  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("placement", ["cpu", "cpu-pd"])
def test_greedy_tokens_equal_transformers(checkpoint: Path, tmp_path: Path, placement) -> None:
    sets = {"checkpoint": str(checkpoint), "eos": "-1"}  # -1: all NEW tokens, as transformers
    walk, place = FOLDER / "gpt2.walk", FOLDER / "placements" / f"{placement}.yaml"
    result = Driver().compile(str(walk), str(place), sets)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp_path / name).write_text(text)
    cluster = LocalCluster(tmp_path, strict=True)
    prompt = torch.tensor(list(PROMPT.encode()))
    handle = cluster.submit(cluster.request([Segment("text", prompt)], ["text"])).result()
    assert handle.ok, handle.error
    pieces = [bytes(o.tensor.tolist()) for o in handle.outputs]  # each token's text
    assert [p for p in pieces if p] == [bytes([t]) for t in transformers_tokens(checkpoint)]
