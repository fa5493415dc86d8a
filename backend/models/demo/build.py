"""Build the embedded tiny model offline: a real Qwen2 causal LM and a BPE tokenizer.

Nothing is downloaded. The tokenizer is trained on the shipped dataset, the weights are
random-initialised from a fixed seed, so the same seed always gives the same files.

The heavy work (torch, transformers) runs in a child of the oracle's service (this module is the
question `backend.models.demo.build`), started by `ensure_builtin_model`, so callers such as the TUI never
import torch themselves.
Run directly: `python -m backend.models.demo.build --name tiny-qwen2 --out DIR`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from backend.core.paths import BUILTIN_DATASETS, cache_dir

BUILDER_VERSION = 1
BUILD_QUESTION = "backend.models.demo.build"  # this module, run in the oracle's child
BUILD_TIMEOUT = 600.0
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of an embedded model; small enough to train on two CPU cores in seconds."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int = 2000
    max_position_embeddings: int = 1024
    # larger than transformers' 0.02: with a frozen, tied random embedding the logits of a
    # 0.02-initialised tiny model cannot leave the uniform distribution, so LoRA could not learn
    initializer_range: float = 0.2
    seed: int = 0


BUILTIN_MODELS: dict[str, TinyModelSpec] = {
    # about 0.4 M parameters: a LoRA step takes a few ms on CPU
    "tiny-qwen2": TinyModelSpec(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2),
    # about 10 M parameters: slow enough to watch the panels move
    "small-qwen2": TinyModelSpec(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                                 num_attention_heads=8, num_key_value_heads=4),
}

ProgressCallback = Callable[[str, float], None]


def builtin_model_path(name: str) -> Path:
    """Where the built model lives; does not build it."""
    if name not in BUILTIN_MODELS:
        raise KeyError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    spec = BUILTIN_MODELS[name]
    return cache_dir() / "models" / f"{name}-s{spec.seed}-v{BUILDER_VERSION}"


def is_built(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def ensure_builtin_model(name: str, on_progress: ProgressCallback | None = None, *,
                         cancelled: Callable[[], bool] | None = None) -> Path:
    """Return the built model folder, building it in a child (the oracle's service) when missing.

    Builders of one model wait for each other (a file lock beside the folder): the one that waited
    finds the folder built and returns it."""
    from backend.oracle import OracleCancelled, OracleError, file_lock, run_child

    target = builtin_model_path(name)
    if is_built(target):
        return target

    def progress(line: str) -> None:
        fraction, _, stage = line.partition(" ")
        if on_progress is not None:
            on_progress(stage, float(fraction))

    with file_lock(target.parent / f".{target.name}.lock", cancelled):
        if is_built(target):
            return target
        try:
            run_child(BUILD_QUESTION, {"name": name, "out": str(target)}, progress=progress,
                      timeout=BUILD_TIMEOUT, cancelled=cancelled)
        except OracleCancelled:
            raise
        except OracleError as err:
            raise RuntimeError(f"building the built-in model {name!r} failed: {err}\n{err.detail[-2000:]}") from err
    return target


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    """The child's side of the build (question `backend.models.demo.build`): progress as 'FRACTION stage'."""
    target = Path(payload["out"])
    _build_into(payload["name"], target, lambda stage, fraction: progress(f"{fraction:.2f} {stage}"))
    return {"path": str(target)}


def training_corpus() -> list[str]:
    """Texts the tokenizer learns from: the shipped dataset plus some everyday English."""
    texts: list[str] = []
    for path in BUILTIN_DATASETS.values():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.extend(m["content"] for m in json.loads(line)["messages"])
    texts += [
        "The quick brown fox jumps over the lazy dog.",
        "What is your name? Who made you? Can you help me with a question?",
        "Hello, how are you today? Thank you very much. Please tell me more.",
        "one two three four five six seven eight nine ten, 0 1 2 3 4 5 6 7 8 9",
    ]
    return texts


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(spec: TinyModelSpec, out: Path, report: ProgressCallback) -> None:
    """Write a complete HF model folder (config, safetensors weights, tokenizer) to `out`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report("training the tokenizer", 0.1)
    tokenizer = build_tokenizer(spec.vocab_size)
    report("initialising the weights", 0.5)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=spec.initializer_range,
        dtype="float32",
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    report("saving", 0.8)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "workbench_builtin.json").write_text(json.dumps({"builder_version": BUILDER_VERSION, **asdict(spec)}))
    report("done", 1.0)


def weights_sha256(model_dir: Path) -> str:
    """Hash of the weight files; equal for equal seeds."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _build_into(name: str, target: Path, report: ProgressCallback) -> None:
    """Build in a temporary sibling folder, then rename: a half-built model is never seen."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        build_model(BUILTIN_MODELS[name], staging, report)
        if target.exists():  # another process finished first; keep its copy
            shutil.rmtree(staging)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="tiny-qwen2", choices=sorted(BUILTIN_MODELS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    _build_into(args.name, args.out, lambda stage, fraction: print(f"{fraction:.2f} {stage}", flush=True))


if __name__ == "__main__":
    main()
