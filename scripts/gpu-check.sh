#!/usr/bin/env bash
# The GPU check, for a fresh machine with one NVIDIA GPU and no network (docs/gpu.md):
#   1. installs openclaw_dask's dependencies from the wheels in .whl/ (fill it with scripts/fetch-gpu-wheels.sh),
#   2. runs the tests marked gpu,
#   3. runs benchmarks/gpu.py and prints its table.
# Under 8 minutes on one H200. --dry-run checks everything that needs no GPU, on any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dry=0
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac
say() { printf 'gpu-check: %s\n' "$*"; }

bash -n "$0"
"$python" -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 (dask-cuda needs it)"' \
  || { say "needs Python >= 3.11, found $("$python" -V)"; exit 2; }
wheels=(.whl/*.whl)
if [ -e "${wheels[0]}" ]; then
  say "${#wheels[@]} wheels in .whl/"
elif [ "$dry" = 1 ]; then
  say "no wheels in .whl/ yet (scripts/fetch-gpu-wheels.sh fills it); fine for --dry-run"
else
  say "no wheels in .whl/: run scripts/fetch-gpu-wheels.sh where pip works, and carry .whl"; exit 2
fi

if [ "$dry" = 0 ]; then
  site=/tmp/openclaw-gpu-site
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$python" - <<'PY'
import importlib.util
import openclaw_dask
from openclaw_dask.cluster import gpu
info = gpu.discover()
print("gpu-check: openclaw_dask", openclaw_dask.__version__, "|", gpu.cupy_version() or "no CuPy",
      "| dask_cuda", "installed" if importlib.util.find_spec("dask_cuda") else "missing",
      "|", [f"{d.index}: {d.name} {d.memory_bytes / 1e9:.0f} GB" for d in info.devices] or info.none_found())
PY

# pyproject's addopts name --nbmake, a plugin the GPU image lacks: these are the options the tests need
tests=(-m pytest -q -p no:cacheprovider -o "addopts=--strict-markers -ra" -m gpu tests/test_gpu.py)
if [ "$dry" = 1 ]; then
  "$python" "${tests[@]}" --collect-only | tail -1
  "$python" benchmarks/gpu.py --dry-run
  say "dry run passed: the script, its Python, the gpu tests' collection and the benchmark's plan"
  exit 0
fi
status=0  # the benchmark runs even when a test fails: both are what the GPU says
timeout 240 "$python" "${tests[@]}" || status=$?
timeout 240 "$python" benchmarks/gpu.py --size 8GiB --repeat 5 || status=$?
say "exit $status"
exit $status
