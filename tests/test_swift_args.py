"""swift's own argument schema, the extra_swift_args rules, secrets, and swift's parser on shipped profiles (#11).

The schema and every parse come from ms-swift itself (child processes, cached for the session):
expected values below are written by hand from ms-swift 4.6's documentation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.launch.command import build_launch
from backend.launch.managed_flags import managed_flags
from backend.launch.swift_schema import SwiftSchema, require_schema, swift_parse
from backend.launch.validate import validate
from backend.profile import LaunchProfile, ProfileError, load_profile, parse_profile
from tests.fakes import CPU_BOX, gpu_box
from tests.faults.helpers import cli

SHIPPED = sorted(p.stem for p in SHIPPED_PROFILES_DIR.glob("*.toml"))
CPU_PROFILES = {"quickstart", "cpu-ddp-2proc", "cpu-fp16-loss-scale"}


@pytest.fixture(scope="session")
def schema() -> SwiftSchema:
    return require_schema()


def swift_words(argv: list[str]) -> list[str]:
    """The arguments after `-m swift.cli.sft` (what swift's own parser receives)."""
    return argv[argv.index("-m", argv.index("--config_file")) + 2:]


def _errors(profile: LaunchProfile) -> dict[str, str]:
    return {p.field: p.message + " " + p.fix for p in validate(profile, CPU_BOX) if p.severity == "error"}


# ---------------------------------------------------------------- schema


def test_schema_is_read_from_swift(schema: SwiftSchema) -> None:
    sft = schema.fields("sft")
    assert schema.swift_version.startswith("4.")
    assert sft["tuner_type"].default == "lora"
    assert sft["learning_rate"].default is None  # swift decides per tuner (1e-4 LoRA, 1e-5 full)
    assert sft["num_train_epochs"].default == 3.0
    assert sft["target_modules"].is_list and sft["target_modules"].default == ["all-linear"]
    assert sft["dataset"].is_list and not sft["learning_rate"].is_list
    assert sft["lora_rank"].type == "int" and sft["use_liger_kernel"].type == "bool"
    assert "adamw_torch" in sft["optim"].choices
    assert set(sft["quant_method"].choices) == {"bnb", "hqq", "eetq", "quanto", "fp8"}
    assert "train_type" not in sft  # renamed to tuner_type in 4.x
    assert {"export", "infer", "pt"} <= set(schema.commands)
    assert "merge_lora" in schema.fields("export") and "stream" in schema.fields("infer")
    assert {"zero2", "zero3", "zero3_offload"} <= set(schema.deepspeed_presets)


def test_defaults_swift_decides_by_tuner_come_from_its_own_code(schema: SwiftSchema) -> None:
    # ms-swift 4.6's SftArguments._init_override: 1e-5 for full fine-tuning, 1e-4 for every adapter
    assert schema.default_for("learning_rate", "full") == (True, 1e-5)
    assert schema.default_for("learning_rate", "lora") == (True, 1e-4)
    assert schema.tuner_defaults["learning_rate"]["adalora"] == 1e-4
    assert set(schema.tuner_defaults) == {"learning_rate"}  # nothing else depends on the tuner there
    assert schema.default_for("num_train_epochs", "lora") == (True, 3.0)
    assert schema.default_for("max_length", "lora") == (False, None)  # the model's: decided later


def test_managed_flags_come_from_the_builder() -> None:
    managed = managed_flags()
    assert managed["seed"] == "training.seed"
    assert managed["lora_rank"] == "tuner.lora_rank"
    assert managed["learning_rate"] == "training.learning_rate"
    assert managed["use_cpu"] == "distribution.device"
    assert managed["add_version"].startswith("the workbench")
    assert "use_liger_kernel" not in managed and "optim" not in managed


# ---------------------------------------------------------------- extra_swift_args


@pytest.mark.parametrize(("extra", "field", "words"), [
    ({"seed": 7}, "extra_swift_args.seed", ["training.seed"]),
    ({"lora_rank": 64}, "extra_swift_args.lora_rank", ["tuner.lora_rank"]),
    ({"use_liger_kernal": True}, "extra_swift_args.use_liger_kernal", ["use_liger_kernel"]),
    ({"output_d": "/tmp/elsewhere"}, "extra_swift_args.output_d", ["--output_dir"]),
    ({"lora_bias": "maybe"}, "extra_swift_args.lora_bias", ["'maybe'", "none, all"]),
    ({"max_new_tokens": "many"}, "extra_swift_args.max_new_tokens", ["not an integer"]),
    ({"use_liger_kernel": "perhaps"}, "extra_swift_args.use_liger_kernel", ["not a boolean"]),
    ({"warmup_steps": "-1"}, "extra_swift_args.warmup_steps", ["begins with '-'"]),
    ({"modules_to_save": ["embed_tokens", "--output_dir=/tmp/x"]}, "extra_swift_args.modules_to_save",
     ["begins with '-'"]),
    ({"optim": ["adamw_torch", "sgd"]}, "extra_swift_args.optim", ["takes one value"]),
    ({"hub_token": "hf_abc"}, "extra_swift_args.hub_token", ["MODELSCOPE_API_TOKEN", "secret"]),
    ({"swanlab_secret": "s3"}, "extra_swift_args.swanlab_secret", ["secret"]),
])
def test_extra_args_refused(extra: dict, field: str, words: list[str], schema: SwiftSchema) -> None:
    message = _errors(LaunchProfile.model_validate({"extra_swift_args": extra})).get(field)
    assert message is not None, field
    for word in words:
        assert word in message


def test_good_extra_args_pass_as_key_equals_value(tmp_path: Path, schema: SwiftSchema) -> None:
    extra = {"use_liger_kernel": True, "optim": "adamw_torch", "modules_to_save": ["embed_tokens", "lm_head"],
             "model_kwargs": '{"a": 1, "b": [1, 2]}'}
    profile = LaunchProfile.model_validate({"extra_swift_args": extra})
    assert not _errors(profile)
    argv = build_launch(profile, tmp_path, CPU_BOX).argv
    tail = argv[argv.index("--use_liger_kernel=true"):]
    assert tail == ["--use_liger_kernel=true", "--optim=adamw_torch", "--modules_to_save", "embed_tokens",
                    "lm_head", '--model_kwargs={"a": 1, "b": [1, 2]}']


def test_validate_cli_names_the_profile_key(tmp_path: Path, schema: SwiftSchema) -> None:
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n[extra_swift_args]\nseed = 7\nuse_liger_kernal = true\n')
    done = cli("validate", str(path))  # in this process: the command's words are the subject, not its start-up
    assert done.exit_code == 1, done.output
    assert "training.seed" in done.stdout and "use_liger_kernel" in done.stdout


def test_schema_swift_lists_managed_and_free(schema: SwiftSchema) -> None:
    done = cli("schema", "--swift")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert len(lines) == len(schema.fields("sft")) + 1
    assert any(line.startswith("lora_rank (int, swift default 8) [managed by tuner.lora_rank]") for line in lines)
    assert any(line.startswith("use_liger_kernel (bool") and "[free: extra_swift_args]" in line for line in lines)
    assert lines[-1].startswith(f"# ms-swift {schema.swift_version} sft: {len(schema.fields('sft'))} flags")


# ---------------------------------------------------------------- secrets


def test_secret_env_is_taken_at_launch_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_very_secret")
    profile = parse_profile('name = "s"\n[env]\nHF_TOKEN = ""\nNCCL_DEBUG = "INFO"\n')
    plan = build_launch(profile, tmp_path, CPU_BOX)
    assert plan.env["HF_TOKEN"] == "hf_very_secret" and plan.env["NCCL_DEBUG"] == "INFO"
    assert 'HF_TOKEN="$HF_TOKEN"' in plan.shell_line() and "hf_very_secret" not in plan.shell_line()
    assert plan.as_json()["env"]["HF_TOKEN"] == "***"
    from backend.rundir.layout import RunFolder
    from backend.runs.start import write_run_files

    run = RunFolder(tmp_path)
    write_run_files(run, profile, plan)
    stored = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "hf_very_secret" not in stored and "HF_TOKEN" in stored


def test_secret_value_in_profile_is_refused() -> None:
    with pytest.raises(ProfileError, match="HF_TOKEN looks like a secret"):
        parse_profile('name = "s"\n[env]\nHF_TOKEN = "hf_abc"\n')
    # a name that only contains TOKEN is not a secret
    assert parse_profile('[env]\nTOKENIZERS_PARALLELISM = "true"\n').env["TOKENIZERS_PARALLELISM"] == "true"


# ---------------------------------------------------------------- swift's own parser


def test_every_shipped_profile_is_accepted_by_swifts_parser(tmp_path: Path) -> None:
    argvs = []
    for name in SHIPPED:
        profile = load_profile(SHIPPED_PROFILES_DIR / f"{name}.toml")
        hardware = CPU_BOX if name in CPU_PROFILES else gpu_box(count=4)
        argvs.append(swift_words(build_launch(profile, tmp_path / name, hardware,
                                              base_dir=SHIPPED_PROFILES_DIR).argv))
    extra = LaunchProfile.model_validate({"extra_swift_args": {"use_liger_kernel": True, "lora_bias": "all"},
                                          "model": {"system": "- starts with a dash, has, commas"}})
    argvs.append(swift_words(build_launch(extra, tmp_path / "extra", CPU_BOX).argv))
    argvs.append(["--output_d", "/tmp/elsewhere"])  # why abbreviations are refused
    results = swift_parse(argvs)
    for name, result in zip([*SHIPPED, "extra", "abbrev"], results, strict=True):
        assert result["error"] is None and result["unknown"] == [], (name, result)
    by_name = dict(zip(SHIPPED, results, strict=False))
    assert by_name["quickstart"]["args"]["learning_rate"] == 0.003
    assert by_name["quickstart"]["args"]["use_cpu"] is True
    assert by_name["qwen2.5-7b-full-zero3"]["args"]["tuner_type"] == "full"
    assert by_name["llama2-70b-fsdp-qlora-2x24gb"]["args"]["quant_method"] == "bnb"
    assert results[-2]["args"]["use_liger_kernel"] is True and results[-2]["args"]["lora_bias"] == "all"
    assert results[-2]["args"]["system"] == "- starts with a dash, has, commas"
    assert results[-1]["args"]["output_dir"] == "/tmp/elsewhere"


def test_show_json_and_explain(tmp_path: Path) -> None:
    shown = cli("show", "quickstart", "--json", "--run-dir", str(tmp_path))
    assert shown.exit_code == 0 and shown.exception is None, shown.output
    data = json.loads(shown.stdout)
    assert set(data) == {"argv", "env", "accelerate_config", "launcher"}
    assert data["launcher"] == "accelerate" and data["accelerate_config"]["use_cpu"] is True
    assert "--learning_rate" in data["argv"] and "--seed" not in data["argv"]  # quickstart sets no seed
    result = cli("show", "quickstart", "--explain", "--run-dir", str(tmp_path))
    assert result.exit_code == 0 and result.exception is None, result.output
    explained = result.stdout
    assert "--learning_rate 0.003  <- training.learning_rate" in explained
    assert "--add_version false  <- forced: otherwise swift writes into a v0-<timestamp> subfolder" in explained
    assert "--use_cpu true  <- forced: CPU run" in explained


def test_unset_keys_leave_swift_its_defaults(tmp_path: Path) -> None:
    full = LaunchProfile.model_validate({"tuner": {"type": "full"}})
    argv = build_launch(full, tmp_path, gpu_box()).argv
    for flag in ("--learning_rate", "--max_length", "--num_train_epochs", "--save_steps", "--bf16", "--fp16",
                 "--dataloader_num_workers", "--gradient_accumulation_steps", "--lora_rank"):
        assert flag not in argv, flag
    qlora = LaunchProfile.model_validate({"tuner": {"type": "qlora", "quant_bits": 4}})
    argv = build_launch(qlora, tmp_path, gpu_box()).argv
    assert "--quant_method" not in argv and argv[argv.index("--quant_bits") + 1] == "4"


# ---------------------------------------------------------------- profile keys of #11


def test_main_process_port_is_honoured_on_one_machine(tmp_path: Path) -> None:
    profile = parse_profile('[distribution]\nstrategy = "ddp"\nnproc_per_node = 2\nmain_process_port = 29611\n')
    argv = build_launch(profile, tmp_path, gpu_box()).argv
    assert argv[argv.index("--main_process_port") + 1] == "29611"
    assert argv.index("--main_process_port") < argv.index("swift.cli.sft")  # accelerate's flag, not swift's
    unset = parse_profile('[distribution]\nstrategy = "ddp"\nnproc_per_node = 2\n')
    assert "--main_process_port" not in build_launch(unset, tmp_path, gpu_box()).argv


def test_deepspeed_preset_own_json_and_zero_stages(tmp_path: Path, schema: SwiftSchema) -> None:
    preset = parse_profile('[distribution]\nstrategy = "deepspeed"\nnproc_per_node = 2\n'
                           '[distribution.deepspeed]\nconfig = "zero3_offload"\n')
    plan = build_launch(preset, tmp_path / "a", gpu_box())
    assert plan.argv[plan.argv.index("--deepspeed") + 1] == "zero3_offload" and plan.deepspeed_config is None
    own = tmp_path / "ds.json"
    own.write_text("{}")
    mine = parse_profile(f'[distribution]\nstrategy = "deepspeed"\nnproc_per_node = 2\n'
                         f'[distribution.deepspeed]\nconfig = "{own}"\n')
    plan = build_launch(mine, tmp_path / "b", gpu_box())
    assert plan.argv[plan.argv.index("--deepspeed") + 1] == str(own)
    for stage in (0, 1):
        staged = parse_profile(f'[distribution]\nstrategy = "deepspeed"\nnproc_per_node = 2\n'
                               f'[distribution.deepspeed]\nstage = {stage}\n')
        assert build_launch(staged, tmp_path / f"s{stage}", gpu_box()).deepspeed_config["zero_optimization"][
            "stage"] == stage
    wrong = parse_profile('[distribution]\nstrategy = "deepspeed"\nnproc_per_node = 2\n'
                          '[distribution.deepspeed]\nconfig = "zero4"\n')
    found = {p.field: p.message for p in validate(wrong, gpu_box()) if p.severity == "error"}
    assert "'zero4' is not one of swift's presets" in found["distribution.deepspeed.config"]


def test_env_names_a_profile_key_decides_are_refused() -> None:
    profile = parse_profile('[env]\nCUDA_VISIBLE_DEVICES = "0"\nMASTER_PORT = "29555"\nMAX_PIXELS = "1003520"\n')
    found = {p.field: p.fix for p in validate(profile, CPU_BOX) if p.severity == "error"}
    assert "distribution.gpu_ids" in found["env.CUDA_VISIBLE_DEVICES"]
    assert "distribution.main_process_port" in found["env.MASTER_PORT"]
    assert "env.MAX_PIXELS" not in found


def test_task_pt_runs_swift_pt(tmp_path: Path) -> None:
    plan = build_launch(parse_profile('task = "pt"\n[tuner]\ntype = "full"\n'), tmp_path, gpu_box())
    assert plan.argv[plan.argv.index("swift.cli.pt") - 1] == "-m"


def test_form_help_comes_from_swift(schema: SwiftSchema) -> None:
    from backend.launch.swift_schema import key_help

    text = key_help("training.learning_rate", schema, managed_flags())
    assert text.startswith("swift --learning_rate (default None): The learning rate.")
    assert "1e-5 for full-parameter training and 1e-4 for tuners like LoRA" in text
    assert key_help("training.num_train_epochs", schema, managed_flags()).startswith(
        "swift --num_train_epochs (default 3.0)")
