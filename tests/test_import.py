"""`workbench import`: scripts as people write them -> profile -> `show --json` -> the same arguments in
swift's own parser (#11).

Each case is a script in one of the shapes of ms-swift's examples, and the swift arguments it means in
ms-swift 4.x names (written by hand; for 3.x scripts that is the migrated form). Both argument lists are
parsed by swift's own parser in one child process per command; they must be equal except for the fields
the workbench manages, named in MANAGED.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from backend.importing.swift_flags import ImportError_, import_script
from backend.launch.command import build_launch
from backend.launch.swift_schema import SwiftSchema, require_schema, swift_parse
from tests.fakes import gpu_box
from tests.faults.helpers import cli

# the workbench passes its own value for these (run folder, event plugin, logging): not compared
MANAGED = {"output_dir", "external_plugins", "callbacks", "add_version", "check_model", "report_to", "logging_dir"}
FSDP_YAML = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: true
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_use_orig_params: false
machine_rank: 0
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
use_cpu: false
"""
FSDP_JSON = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_processes": 2,
             "num_machines": 1, "machine_rank": 0, "mixed_precision": "bf16", "use_cpu": False,
             "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_cpu_ram_efficient_loading": True,
                             "fsdp_offload_params": True, "fsdp_sharding_strategy": "FULL_SHARD",
                             "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_sync_module_states": True,
                             "fsdp_use_orig_params": False}}
DS_JSON = {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}}


@dataclass
class Case:
    name: str
    script: str  # {args} is replaced by `args` (or by `written` when the script uses old names)
    args: str  # the swift arguments in 4.x names
    profile: dict[str, Any] = field(default_factory=dict)  # expected profile values, "section.key": value
    written: str | None = None  # the arguments as the script writes them (3.x names)
    task: str = "sft"


LORA = ("--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'AI-ModelScope/alpaca-gpt4-data-zh#500' "
        "'AI-ModelScope/alpaca-gpt4-data-en#500' 'swift/self-cognition#500' --torch_dtype bfloat16 "
        "--num_train_epochs 1 --per_device_train_batch_size 1 --per_device_eval_batch_size 1 --learning_rate 1e-4 "
        "--lora_rank 8 --lora_alpha 32 --target_modules all-linear --gradient_accumulation_steps 16 --eval_steps 50 "
        "--save_steps 50 --save_total_limit 2 --logging_steps 5 --max_length 2048 --output_dir output "
        "--system 'You are a helpful assistant. Answer briefly, politely, and in English.' --warmup_ratio 0.05 "
        "--dataloader_num_workers 4 --model_author swift --model_name swift-robot")

CASES = [
    Case("lora", "CUDA_VISIBLE_DEVICES=0 \\\nswift sft {args}\n", LORA,
         {"tuner.type": "lora", "distribution.gpu_ids": [0], "training.learning_rate": 1e-4,
          "model.system": "You are a helpful assistant. Answer briefly, politely, and in English."}),
    Case("qlora", "# QLoRA, 4-bit bnb\nCUDA_VISIBLE_DEVICES=0 swift sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'AI-ModelScope/alpaca-gpt4-data-en#500' "
         "--torch_dtype bfloat16 --quant_method bnb --quant_bits 4 --bnb_4bit_compute_dtype bfloat16 "
         "--bnb_4bit_quant_storage bfloat16 --lora_rank 64 --lora_alpha 128 --gradient_checkpointing true "
         "--output_dir output",
         {"tuner.type": "qlora", "tuner.quant_bits": 4, "tuner.quant_method": "bnb", "tuner.lora_rank": 64}),
    Case("full", "swift sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type full --dataset 'AI-ModelScope/alpaca-gpt4-data-en#500' "
         "--torch_dtype bfloat16 --learning_rate 1e-5 --num_train_epochs 2 --gradient_checkpointing_kwargs "
         "'{\"use_reentrant\": false}' --freeze_vit true --max_length 4096 --lr_scheduler_type linear "
         "--attn_impl flash_attn --padding_free true --packing true",
         {"tuner.type": "full", "training.gradient_checkpointing_use_reentrant": False,
          "extra_swift_args": {"freeze_vit": True, "attn_impl": "flash_attn", "padding_free": True, "packing": True}}),
    Case("ddp", "# DDP on four GPUs\nnproc_per_node=4\n\nNPROC_PER_NODE=4 \\\nCUDA_VISIBLE_DEVICES=0,1,2,3 \\\n"
                "swift sft \\\n{args}  # a comment; the '#' in the dataset is not one\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset swift/self-cognition#1000 "
         "--gradient_accumulation_steps 4 --ddp_find_unused_parameters false --seed 7",
         {"distribution.strategy": "ddp", "distribution.nproc_per_node": 4, "distribution.gpu_ids": [0, 1, 2, 3],
          "training.seed": 7, "data.train": ["swift/self-cognition#1000"]}),
    Case("fsdp", "accelerate launch --config_file {dir}/fsdp.yaml -m swift.cli.sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#1000' "
         "--torch_dtype bfloat16 --bf16 true --quant_method bnb --quant_bits 4 --bnb_4bit_quant_storage bfloat16 "
         "--bnb_4bit_compute_dtype bfloat16 --gradient_checkpointing true",
         {"distribution.strategy": "fsdp", "distribution.nproc_per_node": 2, "distribution.fsdp.cpu_offload": True,
          "distribution.fsdp.use_orig_params": False, "precision.bf16": True}),
    Case("deepspeed-preset", "NPROC_PER_NODE=2 swift sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type full --dataset 'swift/self-cognition#1000' "
         "--deepspeed zero3_offload --torch_dtype bfloat16",
         {"distribution.strategy": "deepspeed", "distribution.deepspeed.config": "zero3_offload"}),
    Case("deepspeed-own-json", "export NPROC_PER_NODE=2\nswift sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#1000' "
         "--deepspeed {dir}/ds_zero1.json",
         {"distribution.strategy": "deepspeed", "distribution.nproc_per_node": 2}),
    Case("multi-node", "# node 0\nNNODES=2 \\\nNODE_RANK=0 \\\nMASTER_ADDR=10.0.0.1 \\\nMASTER_PORT=29500 \\\n"
                       "NPROC_PER_NODE=8 \\\nswift sft {args}\n",
         "--model Qwen/Qwen2.5-72B-Instruct --tuner_type lora --dataset 'swift/self-cognition#1000' "
         "--deepspeed zero2 --torch_dtype bfloat16",
         {"distribution.num_machines": 2, "distribution.main_process_ip": "10.0.0.1",
          "distribution.nproc_per_node": 8, "distribution.main_process_port": 29500}),
    Case("env-vars", "export MAX_PIXELS=1003520\nexport HF_HUB_OFFLINE=1\nNCCL_DEBUG=INFO HF_TOKEN=hf_abc swift sft "
                     "{args}\n",
         "--model Qwen/Qwen2.5-VL-7B-Instruct --tuner_type lora --dataset 'AI-ModelScope/LaTeX_OCR#2000' "
         "--max_pixels 1003520 --freeze_vit true --vit_lr 1e-5",
         {"env": {"MAX_PIXELS": "1003520", "HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "INFO", "HF_TOKEN": ""}}),
    Case("3.x-names", "swift sft {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#500' "
         "--deepspeed zero2 --per_device_train_batch_size 2 --eval_strategy steps",
         {"tuner.type": "lora", "distribution.deepspeed.config": "zero2", "training.per_device_train_batch_size": 2},
         written="--model Qwen/Qwen2.5-7B-Instruct --train_type lora --dataset 'swift/self-cognition#500' "
                 "--deepspeed default-zero2 --batch_size 2 --evaluation_strategy steps"),
    Case("pt", "NPROC_PER_NODE=2 swift pt {args}\n",
         "--model Qwen/Qwen2.5-7B --tuner_type full --dataset 'swift/chinese-c4#100000' --streaming true "
         "--max_steps 1000 --packing true --learning_rate 1e-5 --deepspeed zero3",
         {"task": "pt", "distribution.deepspeed.config": "zero3"}, task="pt"),
    Case("torchrun", "torchrun --nproc_per_node 2 --master_port 29601 swift/cli/sft.py {args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#500' --lora_rank 16",
         {"distribution.nproc_per_node": 2, "distribution.main_process_port": 29601, "tuner.lora_rank": 16}),
    # the shapes of ms-swift's own examples: a shell variable, $(expr ...), PYTHONPATH, default-zero2, 3.x names
    Case("example-zero2-shape",
         "nproc=2\n\nPYTHONPATH=../.. \\\nCUDA_VISIBLE_DEVICES=0,1 \\\nNPROC_PER_NODE=$nproc \\\nswift sft \\\n{args}\n",
         "--model Qwen/Qwen2.5-3B-Instruct --tuner_type lora --dataset 'swift/self-cognition#800' "
         "--num_train_epochs 2 --per_device_train_batch_size 2 --lora_rank 16 --lora_alpha 64 --learning_rate 2e-4 "
         "--gradient_accumulation_steps 16 --eval_steps 20 --save_steps 20 --save_total_limit 3 --logging_steps 2 "
         "--model_author me --model_name my-bot --deepspeed zero2",
         {"distribution.nproc_per_node": 2, "distribution.gpu_ids": [0, 1], "env": {"PYTHONPATH": "../.."},
          "training.gradient_accumulation_steps": 16, "model.model_author": "me"},
         written="--model Qwen/Qwen2.5-3B-Instruct \\\n --train_type lora \\\n --dataset 'swift/self-cognition#800' "
                 "\\\n --num_train_epochs 2 --per_device_train_batch_size 2 --lora_rank 16 --lora_alpha 64 "
                 "--learning_rate 2e-4 --gradient_accumulation_steps $(expr 32 / $nproc) --eval_steps 20 "
                 "--save_steps 20 --save_total_limit 3 --logging_steps 2 --model_author me --model_name my-bot "
                 "\\\n --deepspeed default-zero2"),
    Case("example-fsdp-qlora-shape",
         "# two GPUs\nn=2\n\nCUDA_VISIBLE_DEVICES=0,1 \\\naccelerate launch --config_file \"./fsdp.json\" \\\n"
         "    swift/cli/sft.py \\\n{args}\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#1000' --max_length 1024 "
         "--quant_bits 4 --bnb_4bit_compute_dtype bfloat16 --bnb_4bit_quant_storage bfloat16 "
         "--gradient_checkpointing true --weight_decay 0.1 --gradient_accumulation_steps 8",
         {"distribution.strategy": "fsdp", "distribution.nproc_per_node": 2, "tuner.type": "qlora",
          "tuner.quant_method": None, "distribution.fsdp.state_dict_type": "FULL_STATE_DICT"},
         written="--model Qwen/Qwen2.5-7B-Instruct --train_type lora --dataset 'swift/self-cognition#1000' "
                 "--max_length 1024 --quant_bits 4 --bnb_4bit_compute_dtype bfloat16 --bnb_4bit_quant_storage "
                 "bfloat16 --gradient_checkpointing true --weight_decay 0.1 --gradient_accumulation_steps "
                 "$(expr 16 / $n)"),
    Case("example-pt-shape",
         "# pre-training\nn=8\n\nNPROC_PER_NODE=$n \\\nswift pt \\\n{args}\n",
         "--model Qwen/Qwen2.5-7B --tuner_type full --dataset swift/chinese-c4 --torch_dtype bfloat16 "
         "--streaming true --learning_rate 1e-5 --gradient_accumulation_steps 16 --packing true --max_length 8192 "
         "--dataset_num_proc 8 --save_only_model true --output_dir output/pt --attn_impl flash_attn "
         "--deepspeed zero3",
         {"task": "pt", "distribution.nproc_per_node": 8,
          "extra_swift_args": {"streaming": True, "packing": True, "dataset_num_proc": 8, "save_only_model": True,
                               "attn_impl": "flash_attn"}},
         written="--model Qwen/Qwen2.5-7B --train_type full --dataset swift/chinese-c4 --torch_dtype bfloat16 "
                 "--streaming true --learning_rate 1e-5 --gradient_accumulation_steps $(expr 128 / $n) --packing true "
                 "--max_length 8192 --dataset_num_proc 8 --save_only_model true --output_dir output/pt "
                 "--attn_impl flash_attn --deepspeed zero3", task="pt"),
    Case("accelerate-which-swift", "accelerate launch --multi_gpu --num_processes 2 $(which swift) sft {args} "
                                   "&& echo done\n",
         "--model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --dataset 'swift/self-cognition#500' "
         "--neftune_noise_alpha 5 --lr_scheduler_kwargs '{\"min_lr\": 1e-6}'",
         {"distribution.strategy": "ddp", "distribution.nproc_per_node": 2,
          "extra_swift_args": {"neftune_noise_alpha": 5.0, "lr_scheduler_kwargs": '{"min_lr": 1e-6}'}}),
]


@pytest.fixture(scope="session")
def schema() -> SwiftSchema:
    return require_schema()


@pytest.fixture(scope="module")
def script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scripts")
    (folder / "fsdp.yaml").write_text(FSDP_YAML)
    (folder / "ds_zero1.json").write_text(json.dumps(DS_JSON))
    (folder / "fsdp.json").write_text(json.dumps(FSDP_JSON))
    return folder


def _get(profile: Any, dotted: str) -> Any:
    value = profile
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _swift_words(argv: list[str]) -> list[str]:
    start = next(i for i, w in enumerate(argv) if w.startswith("swift.cli."))
    return argv[start + 1:]


def test_import_round_trip_through_swifts_parser(schema: SwiftSchema, script_dir: Path) -> None:
    imported: dict[str, tuple[list[str], list[str]]] = {}
    for case in CASES:
        args = case.args.replace("{dir}", str(script_dir))
        script = case.script.replace("{dir}", str(script_dir)).replace(
            "{args}", (case.written or case.args).replace("{dir}", str(script_dir)))
        result = import_script(script, schema, base_dir=script_dir)
        profile = result.profile
        for dotted, expected in case.profile.items():
            assert _get(profile, dotted) == expected, (case.name, dotted)
        plan = build_launch(profile, script_dir / "run" / case.name, gpu_box(count=8))
        assert plan.argv[plan.argv.index("-m", 4) + 1] == f"swift.cli.{case.task}"
        imported[case.name] = (shlex.split(args), _swift_words(plan.as_json()["argv"]))
    for task in ("sft", "pt"):
        names = [c.name for c in CASES if c.task == task]
        parsed = swift_parse([w for name in names for w in imported[name]], command=task)
        for i, name in enumerate(names):
            original, shown = parsed[2 * i], parsed[2 * i + 1]
            assert original["error"] is None and original["unknown"] == [], (name, original)
            assert shown["error"] is None and shown["unknown"] == [], (name, shown)
            differ = {k for k in original["args"] if original["args"][k] != shown["args"][k]}
            assert differ <= MANAGED, (name, {k: (original["args"][k], shown["args"][k]) for k in differ - MANAGED})


def test_migration_notes_name_each_change(schema: SwiftSchema) -> None:
    case = next(c for c in CASES if c.name == "3.x-names")
    notes = import_script(case.script.replace("{args}", case.written or ""), schema).notes
    assert "--train_type renamed to --tuner_type (ms-swift 4.x)" in notes
    assert "--batch_size renamed to --per_device_train_batch_size (ms-swift 4.x)" in notes
    assert "--deepspeed default-zero2 renamed to zero2 (ms-swift 3.x+ preset name)" in notes


def test_secrets_from_a_script_are_not_written(schema: SwiftSchema) -> None:
    result = import_script("HF_TOKEN=hf_abc swift sft --model m --dataset d --hub_token ms_secret", schema)
    assert result.profile.env == {"HF_TOKEN": "", "MODELSCOPE_API_TOKEN": ""}
    assert "hub_token" not in result.profile.extra_swift_args


@pytest.mark.parametrize(("script", "reason"), [
    ("deepspeed --hostfile hosts.txt swift/cli/sft.py --model m --dataset d", "`deepspeed` launcher"),
    ("swift sft --model m --dataset d --lora_rnak 8", "did you mean lora_rank"),
    ("swift sft --model m --dataset d --tuner_type adalora", "--tuner_type adalora"),
    ("swift sft --model m --dataset d --lora_bias maybe", "'maybe' is not one of none, all"),
    ("NPROC_PER_NODE=$N swift sft --model m --dataset d", "NPROC_PER_NODE=$N"),
    ("swift infer --adapters ckpt", "not a training command"),
    ("echo hello", "no `swift sft|pt` command"),
])
def test_what_cannot_be_carried_is_refused(script: str, reason: str, schema: SwiftSchema) -> None:
    with pytest.raises(ImportError_) as caught:
        import_script(script, schema)
    assert any(reason in r for r in caught.value.reasons), caught.value.reasons


def test_cli_exit_2_writes_nothing_and_lists_commands(tmp_path: Path, schema: SwiftSchema) -> None:
    script = tmp_path / "train.sh"
    script.write_text("swift sft --model a --dataset d\nswift sft --model b --dataset d\n")
    out = tmp_path / "p.toml"
    done = cli("import", str(script), "-o", str(out))  # in this process: the command, not an interpreter, is tested
    assert done.exit_code == 2 and not out.exists()
    assert "[1] line 1: swift sft --model a --dataset d" in done.stderr
    assert "[2] line 2: swift sft --model b --dataset d" in done.stderr
    done = cli("import", str(script), "-o", str(out), "--command", "2")
    assert done.exit_code == 0, done.stderr
    assert 'source = "b"' in out.read_text()
    done = cli("import", "-", input="swift sft --model c --dataset d --use_liger_kernal true")
    assert done.exit_code == 2 and "use_liger_kernel" in done.stderr and "nothing was written" in done.stderr
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception


def test_launcher_details_are_carried(schema: SwiftSchema) -> None:
    torchrun = import_script("torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint "
                             "10.1.2.3:29400 swift/cli/sft.py --model m --dataset d", schema).profile.distribution
    assert (torchrun.num_machines, torchrun.nproc_per_node, torchrun.rdzv_backend) == (2, 4, "c10d")
    assert (torchrun.main_process_ip, torchrun.main_process_port) == ("10.1.2.3", 29400)
    accelerate = import_script("accelerate launch --multi_gpu --num_processes 2 --gpu_ids 2,3 -m swift.cli.sft "
                               "--model m --dataset d", schema).profile.distribution
    assert (accelerate.strategy, accelerate.nproc_per_node, accelerate.gpu_ids) == ("ddp", 2, [2, 3])


def test_shell_wrappers_and_redirections_are_the_shells(schema: SwiftSchema) -> None:
    script = ("nohup env HF_HUB_OFFLINE=1 swift sft --model m --dataset d#5 --system 'a > b; c' > train.log 2>&1 &\n"
              "CUDA_VISIBLE_DEVICES=0 swift sft --model m --dataset d 2>&1 | tee log.txt\n")
    first = import_script(script, schema, pick=1).profile
    assert (first.data.train, first.model.system, first.env) == (["d#5"], "a > b; c", {"HF_HUB_OFFLINE": "1"})
    second = import_script(script, schema, pick=2).profile
    assert (second.data.train, second.distribution.gpu_ids) == (["d"], [0])
