#!/usr/bin/env bash
# `make gpu-check` on a lent GPU machine that starts bare (no venv, no make target's prerequisites):
# run ON that machine from the project root, with .whl/ (../shared/gpu/fetch-wheels.sh plus the kit's
# extra wheels, docs/tas.md "Checking the kit on a GPU") and build/release carried along.
#
# The wheels go into the machine's own interpreter, not a PYTHONPATH folder: the grader's sandbox
# shows a kernel only the interpreter's prefix and passes no PYTHONPATH, so packages anywhere else
# would be missing inside every kernel. Everything it prints, and the check's report, lands in
# $OUT (the device tool brings that folder back).
set -uo pipefail
OUT=${OUT:-build/gpu-machine}
mkdir -p "$OUT"
exec > >(tee "$OUT/machine.log") 2>&1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PIP_BREAK_SYSTEM_PACKAGES=1
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "cores: $(nproc); $(python3 --version); unshare: $(command -v unshare || echo missing)"
python3 -m pip install --quiet --no-index --no-deps --no-compile .whl/*.whl || exit 10
python3 - <<'PY' || exit 11
import cloudpickle, ipykernel, jinja2, nbclient, nbgrader, psutil, torch, tqdm
import dlkit
print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available(),
      "nbgrader", nbgrader.__version__, "dlkit at", dlkit.__file__)
PY
timeout "${GPU_CHECK_SECONDS:-480}" python3 -m autograder.verify.gpu_check "$OUT/gpu-check"
status=$?
echo "gpu_check exit status: $status"
# The grader's own files that say what happened, without the copied class.
rm -rf "$OUT/gpu-check/class" "$OUT/gpu-check/grades/autograded"
exit $status
