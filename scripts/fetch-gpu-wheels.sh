#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what scripts/gpu-check.sh installs on a GPU machine that has no network.
# Run here, where pip reaches an index; the wheels are for CPython 3.12 on x86-64 Linux, the GPU image's
# Python. That image already holds numpy, CuPy (cupy-cuda13x), nvidia-ml-py, cuda-core, pandas, psutil,
# click, rich, pyyaml, jinja2, msgpack, cloudpickle, toolz, fsspec, sortedcontainers, pytest and
# pytest-timeout (docs/gpu.md); these are the rest. dask-cuda 26.10 pins dask and distributed to 2026.7.1
# (rapids-dask-dependency) and bokeh below 3.10. RMM (rmm-cu13, its librmm and rapids-logger) makes the pool RMM's.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  dask==2026.7.1 distributed==2026.7.1 dask-cuda==26.10.0 rapids-dask-dependency==26.10.0 \
  rmm-cu13==26.10.0 librmm-cu13==26.10.0 rapids-logger==0.3.0 \
  "bokeh==3.9.*" xyzservices partd locket tblib tornado zict ruamel.yaml ruamel.yaml.clib threadpoolctl
ls -1 .whl
du -sh .whl
