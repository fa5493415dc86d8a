"""Quantized-model states under FSDP (#37 item 1): what bitsandbytes' 4-bit weights cost per GPU depends on the
FSDP version and on the storage dtype they are packed in.

accelerate's fsdp2_prepare_model (accelerate/utils/fsdp_utils.py) puts every frozen Params4bit that is not
floating point (bnb_4bit_quant_storage left at uint8, transformers' default) in fully_shard's ignored_params:
not sharded, not moved, not offloaded — each GPU keeps all of them, CPU offload or not, and the units'
all-gathers carry none of them. Packed as bf16 they are sharded like any parameter. FSDP1 flattens them
(a float storage dtype is required there). And FSDP2 skips its fp32 upcast of trainable parameters when the
model holds Params4bit, where FSDP1 upcasts every flat parameter that requires grad.

Same tiny Llama-shaped model as test_estimate_phases.py (hidden 64, MLP 128, 2 layers, 4 heads, vocab 256,
untied), QLoRA r=8 on all linears, 4 GPUs FULL_SHARD, one row of 16 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from test_estimate_phases import TINY
from typer.testing import CliRunner

from backend.cli.estimate import register
from backend.estimate import EstimateRequest, estimate
from backend.models.shape_formula import shape_from_config

# quantised linears: per layer q,k,v,o 4 * 64*64 = 16,384 and gate,up,down 3 * 64*128 = 24,576 -> 40,960
# weights, 2 layers = 81,920 at half a byte: 40,960 bytes for the whole model, 20,480 a layer
ALL_4BIT = 40_960
PER_GPU_4BIT = ALL_4BIT // 4  # 10,240 sharded over 4 GPUs
# an FSDP unit (one decoder layer) in bf16, less its 4-bit weights: 2 norms 128 params + LoRA r=8 on
# q,k,v,o 4 * 8*(64+64) = 4,096 and gate,up 2 * 8*(64+128) + down 8*(128+64) = 4,608 -> 8,832 params * 2 bytes
LAYER_16BIT = 17_664
LAYER_4BIT = 20_480
# the root unit (embeddings 16,384 + lm_head 16,384 + final norm 64) * 2 = 65,664; the LoRA gradients of one
# layer 8,704 * 2 = 17,408; FULL_SHARD gathers the root and two layers
ROOT, LORA_GRADS = 65_664, 17_408
runner = CliRunner()


def _gpu(**fields: object) -> dict[str, int]:
    request = EstimateRequest(tuner="qlora", distribution="fsdp", num_gpus=4, max_length=16, **fields)
    return estimate(shape_from_config(TINY), request).phase("steady_step").gpu


def test_fsdp2_keeps_uint8_packed_4bit_weights_whole_on_every_gpu() -> None:
    gpu = _gpu(fsdp_version=2)
    assert gpu["weights_quantized"] == ALL_4BIT
    # nothing 4-bit is all-gathered: the root and two layers' 16-bit parts, and one layer's LoRA gradients
    assert gpu["sharding_working"] == ROOT + 2 * LAYER_16BIT + LORA_GRADS  # 118,400


def test_fsdp2_shards_4bit_weights_packed_as_bf16_like_fsdp1() -> None:
    for fields in (
        {"fsdp_version": 2, "bnb_4bit_quant_storage": "bf16"},
        {"fsdp_version": 1, "bnb_4bit_quant_storage": "bf16"},
    ):
        gpu = _gpu(**fields)
        assert gpu["weights_quantized"] == PER_GPU_4BIT, fields
        assert gpu["sharding_working"] == ROOT + 2 * (LAYER_16BIT + LAYER_4BIT) + LORA_GRADS, fields  # 159,360


def test_cpu_offload_under_fsdp2_leaves_the_uint8_4bit_weights_on_the_gpu() -> None:
    request = EstimateRequest(
        tuner="qlora", distribution="fsdp", num_gpus=4, max_length=16, fsdp_version=2, offload=True
    )
    steady = estimate(shape_from_config(TINY), request).phase("steady_step")
    assert steady.gpu["weights_quantized"] == ALL_4BIT
    assert steady.host.get("weights_quantized", 0) == 0
    # the LoRA weights (fp32 by PEFT's default) still go to the host, which is counted per node: each of the 4
    # processes holds its shard 17,408 * 4 bytes / 4 GPUs = 17,408, so 69,632 on the node
    assert steady.gpu["adapter_weights"] == 0
    assert steady.host["adapter_weights"] == 69_632


def test_fsdp2_does_not_upcast_16bit_adapters_of_a_4bit_model_fsdp1_does() -> None:
    # bf16 adapters, 4 GPUs: FSDP2 keeps 2 bytes each (17,408 * 2 / 4), FSDP1 upcasts them to fp32 (17,408 * 4 / 4)
    assert _gpu(fsdp_version=2, adapter_dtype="bf16", bnb_4bit_quant_storage="bf16")["adapter_weights"] == 8_704
    assert _gpu(fsdp_version=1, adapter_dtype="bf16", bnb_4bit_quant_storage="bf16")["adapter_weights"] == 17_408
    # fp32 adapters under FSDP2 are cast by its MixedPrecisionPolicy when gathered: no autocast copy beside them
    assert _gpu(fsdp_version=2, bnb_4bit_quant_storage="bf16")["autocast_copies"] == 0


def test_workbench_estimate_on_an_fsdp2_profile_shows_the_whole_4bit_weights_and_says_why(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    app = typer.Typer()
    register(app)
    app.callback()(lambda: None)  # keeps `estimate` a sub-command, as in the real CLI

    def run(storage: str, *args: str) -> str:
        profile = tmp_path / f"{storage or 'uint8'}.toml"
        profile.write_text(
            f'[model]\nsource = "{model}"\ntorch_dtype = "bfloat16"\n[tuner]\ntype = "qlora"\n{storage}'
            '[precision]\nbf16 = true\n[distribution]\nstrategy = "fsdp"\nnproc_per_node = 4\n'
            "[distribution.fsdp]\nversion = 2\n[training]\nmax_length = 16\n"
        )
        result = runner.invoke(app, ["estimate", str(profile), *args], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return result.stdout

    table = run("")
    assert "weights_quantized 40.0 KiB" in table  # all 40,960 bytes on each GPU
    assert "FSDP2 does not shard 4-bit weights packed as uint8" in table
    sharded = json.loads(run('bnb_4bit_quant_storage = "bfloat16"\n', "--json"))
    assert sharded["breakdown"]["weights_quantized"] == PER_GPU_4BIT
    assert not any("FSDP2 does not shard" in note for note in sharded["notes"])


def test_fsdp1_cpu_offload_pins_a_gradient_buffer_for_every_frozen_shard_in_host_ram() -> None:
    def host(version: int) -> dict[str, int]:
        request = EstimateRequest(
            tuner="qlora",
            distribution="fsdp",
            num_gpus=4,
            max_length=16,
            offload=True,
            fsdp_version=version,
            bnb_4bit_quant_storage="bf16",
        )
        return estimate(shape_from_config(TINY), request).phase("steady_step").host

    # each process's frozen shard: embeddings + lm_head + norms 33,088 * 2 bytes / 4 = 16,544 and the 4-bit
    # linears 40,960 / 4 = 10,240 -> 26,784; FSDP1 pins a gradient buffer of that size beside it, on 4 processes
    assert host(1)["pinned_buffers"] == 4 * 26_784  # 107,136
    assert host(1)["weights"] == 4 * 16_544
    assert host(2)["pinned_buffers"] == 0  # FSDP2 moves a gradient to the host only when one is made
