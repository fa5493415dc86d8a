#!/usr/bin/env bash
# bench/gpu_check.py on a lent GPU machine whose image has CUDA torch, transformers, accelerate and peft but
# not ms-swift and its own dependencies: those travel as wheels in .gpu_wheels/ (Python 3.12, manylinux;
# bitsandbytes repacked with its CUDA 13 libraries only, to fit the 64 MiB that travels), installed with
# --no-deps so that the image's torch and transformers stay as they are. Results go to $OUT.
#   .gpu_wheels is made here with `pip download --no-deps --only-binary=:all: --python-version 3.12 ...`
set -u
OUT=${OUT:-/tmp/gpu-check-out}
WORK=${WORK:-/tmp/gpu-check-work}
LIMIT=${LIMIT:-470}
mkdir -p "$OUT" "$WORK"
{
    date -u; nvidia-smi; python3 --version
    python3 -c "import peft, sys; from packaging.version import Version as V; sys.exit(V(peft.__version__) >= V('0.21'))" \
        || echo "peft outside ms-swift 4.6's range: the carried one replaces it"
} >"$OUT/env.txt" 2>&1
wheels=$(ls .gpu_wheels/*.whl | grep -v '/peft-')
python3 -c "import peft, sys; from packaging.version import Version as V; sys.exit(V(peft.__version__) >= V('0.21'))" \
    || wheels="$wheels $(ls .gpu_wheels/peft-*.whl)"
python3 -m pip install --no-index --no-deps -q $wheels >>"$OUT/env.txt" 2>&1
python3 - >>"$OUT/env.txt" 2>&1 <<'PY'
from importlib.metadata import version
for name in ("torch", "transformers", "accelerate", "peft", "ms-swift", "trl", "datasets", "bitsandbytes", "nvitop"):
    print(name, version(name))
import torch
print("cuda", torch.version.cuda, torch.cuda.get_device_name(0), "bf16", torch.cuda.is_bf16_supported())
PY
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
timeout "$LIMIT" python3 bench/gpu_check.py --out "$OUT" --work-dir "$WORK" "$@" 2>&1 | grep -v '^workbench: reading' | tee "$OUT/check.log" | tail -40
# every run's own record (not its checkpoints) for reading back: state, events, log, command, forecast
tar czf "$OUT/runs.tgz" --exclude='output' --exclude='*.safetensors' -C "$WORK" runs 2>/dev/null
ls -la "$OUT"
