"""π0.5's example on its real (tiny) architecture against the components called directly, on a
checkpoint this test writes (``PI0ForConditionalGeneration``'s names with π0.5's weights),
loaded by the nodes' own loader:

* an observation's action chunk through `LocalCluster` on every CPU placement equals the
  reference action flow (`tests.reference.pi05_reference`): SigLIP and the
  projector on the cameras, the prefix (image tokens, the prompt) prefilled once into a dense
  cache, then ``flow_steps`` Euler steps of the action expert against it from the request's
  noise (``t`` from 1 down by ``1 / steps``);
* the MPC fan-out (option ``mpc``): four chunks, each its own noise, denoised against ONE
  prefix, and the consensus chunk, equal to four reference flows and the selection by hand;
* observations side by side on processes (a conductor and a worker per rank) each equal their
  reference run alone;
* the checkpoint is what runs: the default seeded weights give other actions;
* a text prompt goes through the folder's ``tokenizer.json`` as openpi tokenizes it: the chunk
  equals the reference run on the ids `tokenizers` gives for the cleaned text between
  ``<bos>`` and ``"\n"`` (the observations above send ids, request option ``token_ids``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from tests.e2e.real_support import (
    PLACEMENTS,
    compile_to,
    noise,
    run_local,
    run_processes,
    save_module,
    start,
)
from tests.reference.pi05_reference import action_chunks
from wgc.interp import segment
from wgc_models.layers.random_init import init_seeded
from wgc_models.pi05.config import TINY
from wgc_models.pi05.model import Pi0
from wgc_models.pi05.text import TINY_FILE

TOL = 1e-4  # fp32; ten steps over a paged vs a dense cache round apart by ~3e-5
STEPS = 10  # the .walk's `flow_steps`
CAMERAS = torch.arange(3 * 20 * 20 * 3).reshape(3, 20, 20, 3).mul(5).remainder(253).to(torch.uint8)
PROMPT = torch.tensor([5, 17, 3, 99, 42, 7, 250, 12])


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """(checkpoint folder, the policy with its vision side): π0.5 weights under HF's names."""
    path = tmp_path_factory.mktemp("pi05")
    policy = init_seeded(Pi0(TINY), 31).eval()
    save_module(policy, path / "model.safetensors")
    shutil.copy(TINY_FILE, path / "tokenizer.json")  # PaliGemma's, as the folder must carry
    return path, policy


@pytest.fixture(scope="module")
def plans(weights, tmp_path_factory):
    sets = {"checkpoint": str(weights[0])}
    return {p: compile_to(tmp_path_factory.mktemp(p), "pi05", p, sets) for p in PLACEMENTS}


def reference(policy: Pi0, cameras, prompt, rid: str, samples: int = 1) -> list[torch.Tensor]:
    """The action chunks of samples ``0 .. samples-1`` of one observation, each from the noise
    the example's sample ``k`` draws."""
    cfg = policy.config
    noises = [
        noise((cfg.chunk_size, cfg.max_action_dim), f"actions{k}", rid) for k in range(samples)
    ]
    return action_chunks(policy, cameras, prompt, noises, STEPS)


def consensus(chunks: list[torch.Tensor]) -> tuple[int, torch.Tensor]:
    """The chunk nearest the others (RMS distance per number) and every chunk's mean distance."""
    n = len(chunks)
    dist = [[((a - b).pow(2).mean().sqrt()) for b in chunks] for a in chunks]
    spread = torch.stack([sum(row, torch.tensor(0.0)) / (n - 1) for row in dist])
    return int(spread.argmin()), spread


def observation(cameras=CAMERAS, prompt=PROMPT, mpc: bool = False):
    return [segment("image", cameras, prompt=prompt)], ["action"], {"mpc": mpc, "token_ids": True}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_an_action_chunk_equals_the_reference_action_flow(weights, plans, placement) -> None:
    got = run_local(plans[placement], *observation(), rid="obs")
    (chunk,) = got[("main", "action_gen", "action")]
    (want,) = reference(weights[1], CAMERAS, PROMPT, "obs")
    assert chunk.shape == (50, 32) and (chunk - want).abs().max() <= TOL


def test_a_text_prompt_is_tokenized_as_openpi_does(weights, plans) -> None:
    folder, policy = weights
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    body = tok.encode("pick up the red cup", add_special_tokens=False).ids
    ids = torch.tensor([tok.token_to_id("<bos>"), *body, tok.token_to_id("Ċ")])  # Ċ: "\n"
    text = "  pick_up the\nred cup \n"  # stripped, "_" and "\n" as spaces
    seg = segment("image", CAMERAS, prompt=text)
    got = run_local(plans["cpu-2rank"], [seg], ["action"], {}, rid="obs")
    (chunk,) = got[("main", "action_gen", "action")]
    (want,) = reference(policy, CAMERAS, ids, "obs")
    assert (chunk - want).abs().max() <= TOL


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_the_mpc_fan_out_samples_four_chunks_from_one_prefix(weights, plans, placement) -> None:
    got = run_local(plans[placement], *observation(mpc=True), rid="obs")
    (chunk,) = got[("main", "action_gen_mpc", "action")]
    best, spread = got[("main", "action_gen_mpc", "tensor")]
    chunks = reference(weights[1], CAMERAS, PROMPT, "obs", samples=4)
    want_best, want_spread = consensus(chunks)
    assert int(best) == want_best and (spread - want_spread).abs().max() <= TOL
    assert (chunk - chunks[want_best]).abs().max() <= TOL
    assert min((a - b).abs().max() for a in chunks for b in chunks if a is not b) > 1e-2


def test_the_checkpoint_is_what_runs(plans, tmp_path) -> None:
    default = compile_to(tmp_path / "default", "pi05", "cpu", {})
    key = ("main", "action_gen", "action")
    ours = run_local(plans["cpu"], *observation(), rid="obs")[key][0]
    other = run_local(default, *observation(), rid="obs")[key][0]
    assert (ours - other).abs().max() > 1e-2


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")
def test_observations_side_by_side_on_processes_equal_each_alone(weights, plans) -> None:
    cams = [CAMERAS, CAMERAS.flip(1), CAMERAS // 2, CAMERAS]
    prompts = [PROMPT, PROMPT[:5], PROMPT.flip(0), PROMPT]
    mpc = [False, False, True, False]
    reqs = [
        (*observation(c, p, m), f"o{i}")
        for i, (c, p, m) in enumerate(zip(cams, prompts, mpc, strict=True))
    ]
    cluster = start(plans["cpu-3rank"])  # prefill on rank 1, the action loops on rank 2
    try:
        outs = run_processes(cluster, reqs)
    finally:
        cluster.stop()
    for i, got in enumerate(outs):
        chunks = reference(weights[1], cams[i], prompts[i], f"o{i}", samples=4 if mpc[i] else 1)
        if mpc[i]:
            (chunk,) = got[("main", "action_gen_mpc", "action")]
            want = chunks[consensus(chunks)[0]]
        else:
            (chunk,) = got[("main", "action_gen", "action")]
            want = chunks[0]
        assert (chunk - want).abs().max() <= TOL, i
