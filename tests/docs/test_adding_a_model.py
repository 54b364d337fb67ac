"""docs/adding-a-model.md builds the GPT-2 family from its own blocks, and its commands run.

The page's file blocks (a fence with ``title="PATH"``) are the repository's files byte for byte,
every file of ``wgc_models/gpt2`` among them; written into an empty folder, they pass the page's
``wgc fmt`` / ``check`` / ``show`` / ``compile`` commands there (in this process), and (slow) its
``wgc run`` commands on tiny random weights, and a ``wgc run`` of a checkpoint transformers
saved, whose reply is transformers' greedy tokens. ``checkpoint.py`` reads the published
layout (no ``transformer.`` prefix, ``Conv1D`` weights ``[in, out]``, causal-mask buffers) and
lists every problem of a checkpoint that does not fit; a folder in the published layout with a
``tokenizer.json`` (the real GPT-2's path, at a tiny size) replies with transformers' text.
The page's entry-point line (step 7) is ``pyproject.toml``'s own, and its ``wgc run gpt2``
(the family by name) runs from a folder holding nothing.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from wgc.cli import main
from wgc.driver import Driver
from wgc_models.gpt2.checkpoint import load
from wgc_models.gpt2.model import GPT2, GPT2Config
from wgc_models.layers.loading import CheckpointError
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding-a-model.md"
FAMILY = "wgc_models/gpt2"
FILE = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```$', re.S | re.M)
SHELL = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)


def guide_files() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    found = FILE.findall(text)
    files = dict(found)
    assert len(files) == len(found), "a file appears twice in the guide"
    return files


def guide_commands(verb: str) -> list[list[str]]:
    """The page's ``wgc VERB ...`` command lines, as argument lists."""
    blocks = SHELL.findall(DOC.read_text(encoding="utf-8"))
    lines = [line for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith(f"wgc {verb} ")]


def test_the_guides_files_are_the_repository_files() -> None:
    files = guide_files()
    folder = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / FAMILY).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    shown = {name for name in files if name.startswith(FAMILY + "/")}
    # every file of the folder is in the guide (a package marker may be left out)
    assert {name for name in folder if not name.endswith("/__init__.py")} <= shown <= folder
    for name, text in files.items():
        assert text == (ROOT / name).read_text(encoding="utf-8"), f"{name} differs from the guide"


def test_the_guides_entry_point_is_the_projects() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    group, line = blocks[0].strip().splitlines()
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert group in project.splitlines()
    assert any(row.startswith(line) for row in project.splitlines())


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder holding only the guide's files, as the working directory."""
    for name, text in guide_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # `--imports` adds the folder to it
    return tmp_path


def test_the_guides_fmt_check_show_and_compile_commands_pass(built: Path) -> None:
    commands = [c for verb in ("fmt", "check", "show", "compile") for c in guide_commands(verb)]
    assert len(commands) == 6
    for args in commands:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    for placement in ("cpu", "cpu-pd"):
        assert (built / "generated" / "gpt2" / placement / "conductor.py").is_file()


def wgc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_guides_tiny_runs_agree_and_a_saved_checkpoint_speaks_transformers(
    built: Path,
) -> None:
    runs = [args for args in guide_commands("run") if not any("ckpt/" in a for a in args)]
    assert len(runs) == 3  # one rank, the prefill/decode split, and the split by name
    replies = []
    for args in runs:
        by_name = args[1] == "gpt2"
        folder = built / "elsewhere" if by_name else built  # a name needs no files around it
        folder.mkdir(exist_ok=True)
        done = wgc(*args, cwd=folder)
        assert done.returncode == 0, done.stderr
        replies.append((folder / "out" / "text.txt").read_bytes())
    assert replies[0] == replies[1] == replies[2] and replies[0]

    from tests.docs import test_gpt2_parity as parity

    tiny = parity.save_tiny_gpt2(built / "tiny-gpt2")
    done = wgc(
        "run", f"{FAMILY}/gpt2.walk", "--set", f"checkpoint={tiny}", "--set", "eos=-1",
        "--input", f"text={parity.PROMPT}", "-o", "out2/", cwd=built,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    want = bytes(parity.transformers_tokens(tiny)).decode("utf-8", errors="replace")
    assert (built / "out2" / "text.txt").read_text(encoding="utf-8") == want


def published(model: GPT2) -> dict[str, torch.Tensor]:
    """``model``'s weights as the published folder stores them."""
    out = {}
    for name, t in model.state_dict().items():
        conv = name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        out[name] = (t.t() if conv else t).contiguous()
    n = model.config.positions
    for i in range(model.config.layers):
        out[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    return out


CFG = GPT2Config(vocab=256, positions=32, hidden=16, layers=2, heads=2)


def test_checkpoint_reads_the_published_layout(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = GPT2(CFG)
    save_file(published(source), str(tmp_path / "model.safetensors"))
    got = load(GPT2(CFG), tmp_path)
    for name, t in source.state_dict().items():
        assert torch.equal(got.state_dict()[name], t), name


def test_a_checkpoint_that_does_not_fit_lists_every_problem(tmp_path: Path) -> None:
    weights = published(GPT2(CFG))
    del weights["h.1.mlp.c_fc.weight"]
    weights["h.0.attn.c_proj.weight"] = torch.zeros(16, 8)
    weights["h.0.adapter.weight"] = torch.zeros(2)
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load(GPT2(CFG), tmp_path)
    message = str(err.value)
    for problem in ("missing (1): h.1.mlp.c_fc.weight", "unexpected (1): h.0.adapter.weight",
                    "shape (1): h.0.attn.c_proj.weight (16, 8)"):  # fmt: skip
        assert problem in message, message


TOKENIZER = ROOT / "wgc_models" / "orpheus" / "tokenizer.json"
TEXT = "The meaning of life is"


def test_the_published_layout_with_a_tokenizer_replies_with_transformers_text(
    tmp_path: Path,
) -> None:
    """As the published folder (``config.json``, ``model.safetensors`` without the
    ``transformer.`` prefix and with the mask buffers, ``tokenizer.json``), at a tiny size: the
    prompt is tokenized and the reply is the text of transformers' greedy tokens."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    config = transformers.GPT2Config(
        vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4
    )
    torch.manual_seed(1)
    reference = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.add_(0.1 * torch.randn_like(p))
    folder = tmp_path / "gpt2"
    folder.mkdir()
    weights = {
        name.removeprefix("transformer."): t.contiguous()
        for name, t in reference.state_dict().items()
        if name != "lm_head.weight"
    }
    for i in range(config.n_layer):
        weights[f"h.{i}.attn.bias"] = torch.tril(torch.ones(128, 128)).view(1, 1, 128, 128)
    save_file(weights, str(folder / "model.safetensors"))
    config.to_json_file(str(folder / "config.json"))
    (folder / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())

    sets = {"checkpoint": str(folder), "vocab": "512", "eos": "-1"}
    result = Driver().compile(
        str(ROOT / FAMILY / "gpt2.walk"), str(ROOT / FAMILY / "placements" / "cpu.yaml"), sets
    )
    assert result.ok, [d.message for d in result.errors]
    plan = tmp_path / "plan"
    plan.mkdir()
    for name, text in result.files.items():
        (plan / name).write_text(text)
    cluster = LocalCluster(plan, strict=True)
    prompt = torch.tensor(list(TEXT.encode()))
    handle = cluster.submit(cluster.request([Segment("text", prompt)], ["text"])).result()
    assert handle.ok, handle.error
    reply = b"".join(bytes(o.tensor.tolist()) for o in handle.outputs)

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    ids = torch.tensor([tokenizer.encode(TEXT, add_special_tokens=False).ids])
    out = reference.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
        pad_token_id=0,
    )  # fmt: skip
    new = out[0, ids.shape[1] :].tolist()
    assert len(set(new)) > 1  # the tokens vary: a real comparison
    assert reply.decode("utf-8", errors="replace") == tokenizer.decode(new)
