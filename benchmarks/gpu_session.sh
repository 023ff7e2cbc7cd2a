#!/usr/bin/env bash
# The GPU measurements, in the order they are needed, on a machine that has a CUDA GPU,
# PyTorch and Triton but may reach no package index.
#
#   bash benchmarks/gpu_session.sh tests        # the `gpu` tests (~the kernels' first builds)
#   bash benchmarks/gpu_session.sh probe        # us per chunk step and error, split / fused
#   bash benchmarks/gpu_session.sh throughput   # benchmarks/mixer_throughput.py, anchors too
#   bash benchmarks/gpu_session.sh throughput --rows op/triton lmm/triton   # extra arguments
#                                               # go to the stage's script
#   bash benchmarks/gpu_session.sh all          # the three, one after the other
#   TITANS_SEQ_COMMIT=<commit> bash benchmarks/gpu_session.sh forecasting \
#       --models lmm,mag,attention --seeds 0,1 --jobs 8
#                                               # grid cells into benchmarks/results/forecasting
#
# Setup, once per machine: the wheels in a folder .whl/, when there is one, go to /tmp/site
# (the anchors, titans-pytorch and flash-linear-attention, see ../shared/wheels/README.md;
# biopython, which `titans_seq.data` imports and such an image may lack), then the project
# is installed without its dependencies (the rest is in a CUDA PyTorch image). Results go
# to $OUT (or runs/gpu): a log per stage, the probe's and the throughput table's JSON, the
# forecasting cells as one archive, and `nvidia-smi`'s report.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-runs/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# asked from / : from the checkout itself `import titans_seq` would find the folder, not an
# install (the benchmarks and titans_seq.domains need the install)
if ! (cd / && python3 -c "import titans_seq.domains") 2>/dev/null; then
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . \
        || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
    | tee "$out/versions.txt"

stage_tests() {
    # a case spends most of its time compiling its kernels, on the CPU: with pytest-xdist
    # (in the CUDA images seen so far) eight workers compile side by side
    local workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    python3 -m pytest -q -m gpu -p no:cacheprovider -rf "${workers[@]}" \
        tests/ops/test_lmm_triton.py tests/test_attention.py "$@" 2>&1 | tee "$out/gpu_tests.log"
}

stage_probe() {
    python3 benchmarks/triton_chunk_step.py --json "$out/chunk_step.json" "$@" 2>&1 \
        | tee "$out/chunk_step.log"
}

stage_throughput() {
    python3 benchmarks/mixer_throughput.py --device cuda --lift-fla-guard \
        --json "$out/mixer_throughput.json" "$@" 2>&1 | tee "$out/mixer_throughput.log"
}

# Grid cells on the GPU: the memory op on the eager `torch` backend, one thread per process,
# cells side by side (--jobs); each finished cell is a record in the repository's store, and
# the store comes back as one archive, also when GRID_SECONDS (default 480) cuts the grid
# short. The data: $TITANS_SEQ_DATA, else .data/ (a copy of the mirror's timeseries/ folder
# carried with the call); a checkout copied without .git names its commit in
# TITANS_SEQ_COMMIT for the records.
stage_forecasting() {
    export TITANS_SEQ_DATA="${TITANS_SEQ_DATA:-$PWD/.data}"
    timeout "${GRID_SECONDS:-480}" python3 benchmarks/forecasting.py --device cuda \
        --memory-backend torch --threads 1 --out-dir benchmarks/results/forecasting "$@" 2>&1 \
        | tee "$out/forecasting.log"
    tar czf "$out/forecasting_cells.tgz" benchmarks/results/forecasting/cells
}

stage="${1:-all}"
shift || true
case "$stage" in
    tests) stage_tests "$@" ;;
    probe) stage_probe "$@" ;;
    throughput) stage_throughput "$@" ;;
    forecasting) stage_forecasting "$@" ;;
    all) stage_tests; stage_probe; stage_throughput ;;
    *) echo "usage: $0 tests|probe|throughput|all|forecasting [arguments]" >&2; exit 2 ;;
esac
