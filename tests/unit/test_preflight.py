"""The deployment checked before any weight is built (`wgc.cli.preflight`,
`wgc_runtime.host.preflight`): a device the machine lacks (WG825), a rank past its device's
memory with the numbers (WG826), real sizes without a checkpoint (WG827), and the weights
counted from the config's sizes or the checkpoint's safetensors headers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from wgc.cli import main
from wgc.cli.preflight import Refused, check_deployment
from wgc.cli.run_plan import prepare
from wgc.config import Env
from wgc_models.pi05.config import TINY
from wgc_models.pi05.model import Pi0
from wgc_runtime.contract.weights import WeightParts
from wgc_runtime.host.preflight import Machine, part_bytes

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc_models.pi05.nodes import LLM, VitEncoder, load_policy  # noqa: E402

PI05 = str(ROOT / "wgc_models" / "pi05" / "pi05.walk")
GIB = 1 << 30


def _machine(gpus: int = 0, gpu_gib: float = 80, host_gib: float = 512) -> Machine:
    return Machine(gpus, (int(gpu_gib * GIB),) * gpus, int(host_gib * GIB), "2.13.0+cpu")


def _plan(tmp_path: Path, placement: str, *sets: str) -> str:
    out = tmp_path / "plan"
    return prepare(PI05, str(ROOT / "wgc_models" / "pi05" / "placements" / placement), sets, out)


def _codes(exc: pytest.ExceptionInfo[Refused]) -> list[str]:
    return [r.code for r in exc.value.refusals]


def test_a_cuda_placement_without_cuda_is_one_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    np = pytest.importorskip("numpy")
    cams, prompt = tmp_path / "cams.npy", tmp_path / "prompt.npy"
    np.save(cams, np.zeros((2, 16, 16, 3), np.uint8))
    np.save(prompt, np.arange(7))
    placement = str(ROOT / "wgc_models" / "pi05" / "placements" / "real-1gpu.yaml")
    args = ["run", PI05, "-p", placement, "-i", f"images={cams}", "-i", f"prompt={prompt}"]
    result = CliRunner().invoke(main, args, obj=Env())
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[WG825]: rank 0 is placed on `cuda:0`")


def test_a_device_index_past_the_gpus_is_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "2gpu.yaml")
    with pytest.raises(Refused) as exc:
        check_deployment(plan, machine=_machine(gpus=1))
    assert _codes(exc) == ["WG825"]
    assert "has 1 CUDA device (`cuda:0`…`cuda:0`)" in exc.value.refusals[0].message


def test_real_sizes_without_a_checkpoint_are_refused_unless_asked(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "cpu.yaml", "model=real")
    with pytest.raises(Refused) as exc:
        check_deployment(plan, machine=_machine())
    assert _codes(exc) == ["WG827"]
    assert "`vit_encoder`, `LLM`" in exc.value.refusals[0].message
    check_deployment(plan, random_weights=True, machine=_machine())  # asked for: accepted
    check_deployment(_plan(tmp_path / "tiny", "cpu.yaml"), machine=_machine())  # tiny: fine


@pytest.mark.slow
def test_a_rank_past_its_device_is_refused_with_the_numbers(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "real-1gpu.yaml")
    with pytest.raises(Refused) as exc:
        check_deployment(plan, random_weights=True, machine=_machine(gpus=1, gpu_gib=8))
    (r,) = exc.value.refusals
    assert r.code == "WG826"
    # π0.5 at f32: 3.35 B parameters (12.5 GiB); KV: 2048 pages x 16 tokens x 18 layers x (k, v)
    # x 256 x 2 bytes (0.56 GiB)
    assert r.message.startswith("rank 0 needs 13.1 GiB on `cuda:0`, which has 8.0 GiB: ")
    assert "weights 12.5 GiB, KV cache 0.6 GiB" in r.message
    check_deployment(plan, random_weights=True, machine=_machine(gpus=1, gpu_gib=80))


def test_the_config_count_is_the_models(tmp_path: Path) -> None:
    config = {"model": "tiny", "checkpoint": "", "seed": 0}
    (policy,) = LLM.weights(config)
    model = load_policy("LLM", config, torch.device("cpu"))
    assert policy.params == sum(p.numel() for p in model.parameters())
    assert policy.dtype_bytes == 4 and not policy.checkpoint


def test_a_checkpoint_is_counted_from_its_headers(tmp_path: Path) -> None:
    """A sharded checkpoint (index + shards): each part counts its own tensors, from the
    headers, whatever their stored dtype; the unused expert head is left out."""
    sd = {k: v.to(torch.bfloat16) for k, v in Pi0(TINY).state_dict().items()}
    sd["paligemma_with_expert.gemma_expert.lm_head.weight"] = torch.zeros(300, 32)
    names = sorted(sd)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: sd[k].contiguous() for k in keys}, tmp_path / file)
        weight_map |= dict.fromkeys(keys, file)
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    config = {"model": "tiny", "checkpoint": str(tmp_path), "seed": 0}
    (vision,), (policy,) = VitEncoder.weights(config), LLM.weights(config)
    n_vision = sum(v.numel() for k, v in sd.items() if "vision_tower." in k or "projector." in k)
    n_policy = sum(v.numel() for k, v in sd.items() if "lm_head" not in k) - n_vision
    assert part_bytes(vision) == (4 * n_vision, True)
    assert part_bytes(policy) == (4 * n_policy, True)
    assert policy.params == n_policy  # the config's sizes say the same


def test_a_part_without_safetensors_falls_back_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    part = WeightParts(key="k", params=10, dtype_bytes=2, checkpoint=str(tmp_path))
    assert part_bytes(part) == (20, False)


@pytest.mark.parametrize("command", ["run", "serve"])
def test_the_commands_refuse_at_the_door_in_one_line(tmp_path: Path, command: str) -> None:
    """`wgc run` and `wgc serve` exit 1 before any weight is built: real sizes without a
    checkpoint (WG827: the error and its help), and, on a machine without CUDA, a `cuda`
    placement (WG825, one line)."""
    np = pytest.importorskip("numpy")
    cams = tmp_path / "cams.npy"
    np.save(cams, np.zeros((2, 16, 16, 3), np.uint8))
    inputs = ["-i", f"images={cams}", "-i", "prompt=[1,2]"] if command == "run" else []
    cpu = str(ROOT / "wgc_models" / "pi05" / "placements" / "cpu.yaml")
    args = [command, PI05, "-p", cpu, "--set", "model=real", *inputs]
    if command == "serve":
        args += ["--port", "0"]
    result = CliRunner().invoke(main, args, obj=Env())
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()  # the error, then its help: no traceback
    assert lines[0].startswith("error[WG827]") and "12.5 GiB of random weights" in lines[0]
    assert [ln.strip()[:7] for ln in lines[1:]] == ["= help:"], lines
    if torch.cuda.is_available():
        return
    gpu = str(ROOT / "wgc_models" / "pi05" / "placements" / "real-1gpu.yaml")
    result = CliRunner().invoke(main, [command, PI05, "-p", gpu, *inputs], obj=Env())
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[WG825]"), lines
