#!/usr/bin/env bash
# Builds .gpu_wheels/: what the lent GPU machine's image (Python 3.12, CUDA 13 torch, transformers,
# accelerate, peft) lacks to run bench/gpu_check.py, at the versions this venv runs, as Python 3.12
# manylinux wheels (36 MB). bitsandbytes is repacked with its CUDA 13 and CPU libraries only (43 -> 7 MB):
# the whole tree that travels to that machine must stay under 64 MiB. Then, with the device tool:
#   git archive HEAD | (mkdir -p .gpu_tree && tar x -C .gpu_tree)     # a clean copy: no work in progress
#   run: cd .gpu_tree && ln -sfn ../.gpu_wheels .gpu_wheels && LIMIT=450 bash bench/gpu_device_run.sh
#        carry [".gpu_wheels", ".gpu_tree"], timeout_s 540
# Checked here (2026-12-04) by running --cpu-smoke with every module outside that image and this list
# made unimportable: swift's argument list needs cryptography (through modelscope-hub); oss2 is not needed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DEST=.gpu_wheels
mkdir -p "$DEST"
PACKAGES="addict annotated-types attrdict binpacking cpm-kernels dacite datasets defusedxml dill fastapi
httpcore2 httpx2 importlib-metadata jiter jmespath json-repair modelscope modelscope-hub ms-swift msgspec
multiprocess nltk nvitop openai opentelemetry-api pydantic pydantic-core rouge sniffio starlette tomlkit trl
truststore typing-inspection uvicorn zstandard platformdirs cryptography cffi pycparser peft bitsandbytes"
for name in $PACKAGES; do
    version=$($PY -c "from importlib.metadata import version; print(version('$name'))")
    pip download -q --no-deps --only-binary=:all: -d "$DEST" --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 "$name==$version"
done
pip wheel -q --no-deps -w "$DEST" transformers-stream-generator==0.0.5  # an sdist only
$PY - "$DEST" <<'PY'
import glob, os, sys, zipfile
(src,) = glob.glob(os.path.join(sys.argv[1], "bitsandbytes-*.whl"))
def keep(name: str) -> bool:
    return not name.startswith("bitsandbytes/libbitsandbytes_") or any(k in name for k in ("cuda13", "cpu"))
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(src + ".new", "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        if keep(info.filename):
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(f"{line}\n" for line in data.decode().splitlines() if keep(line.split(",")[0])).encode()
            zout.writestr(info, data)
os.replace(src + ".new", src)
PY
du -sh "$DEST"
