#!/usr/bin/env bash
# The GPU measurements, on a machine that has a CUDA GPU, PyTorch and Triton but may reach no
# package index: sets the machine up, then runs a stage.
#
#   bash benchmarks/gpu_session.sh              # benchmarks/gpu_session.py: the `gpu` tests,
#                                               # the layer table, the 125M LM, in ~7.5 min
#   bash benchmarks/gpu_session.sh session --budget 300 --stages tests layers
#                                               # extra arguments go to the stage's script
#   bash benchmarks/gpu_session.sh probe        # us per chunk step and error per variant
#   TITANS_SEQ_COMMIT=<commit> bash benchmarks/gpu_session.sh forecasting \
#       --models lmm,mag,attention --seeds 0,1 --jobs 8
#                                               # grid cells into benchmarks/results/forecasting
#   bash benchmarks/gpu_session.sh long_documents --segment 4096 --steps 300 \
#       --set model.dim=256 model.depth=4 model.heads=4
#                                               # benchmarks/studies/long_documents.py
#   bash benchmarks/gpu_session.sh long_context --mixers swa,lmm,gdn --tasks babilong_qa1,...
#                                               # benchmarks/grids/lm_long_context.py
#   GRID_OUT_DIR=benchmarks/results/forecasting_lookback/<name> TITANS_SEQ_COMMIT=<commit> \
#       bash benchmarks/gpu_session.sh forecasting --lookback 512 --set eval.every=50 ...
#                                               # a grid with overrides, in its own store
#
# Setup, once per machine: the wheels in a folder .whl/, when there is one, go to /tmp/site
# (the anchors, titans-pytorch and flash-linear-attention, see ../shared/wheels/README.md;
# biopython, which `titans_seq.data` imports and such an image may lack), then the project
# is installed without its dependencies (the rest is in a CUDA PyTorch image). Results go
# to $OUT (or runs/gpu). A copy of the checkout without `.git` names its commit in
# TITANS_SEQ_COMMIT. The session's precision stage reads tinyshakespeare from
# $TITANS_SEQ_DATA, or from `.data/text/` carried with the call.
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

stage_session() {
    # the driver writes its own logs and JSON (at most eight files) into $out
    python3 benchmarks/gpu_session.py --out "$out" "$@"
}

stage_probe() {
    python3 benchmarks/triton_chunk_step.py --json "$out/chunk_step.json" "$@" 2>&1 \
        | tee "$out/chunk_step.log"
}

# Grid cells on the GPU: the memory op on the eager `torch` backend, one thread per process,
# cells side by side (--jobs); each finished cell is a record in the repository's store, and
# the store comes back as one archive, also when GRID_SECONDS (default 480) cuts the grid
# short. The data: $TITANS_SEQ_DATA, else .data/ (a copy of the mirror's timeseries/ folder
# carried with the call); a checkout copied without .git names its commit in
# TITANS_SEQ_COMMIT for the records. GRID_OUT_DIR: the store (a grid run with --set
# overrides needs its own, since the cells' names do not show them).
stage_forecasting() {
    export TITANS_SEQ_DATA="${TITANS_SEQ_DATA:-$PWD/.data}"
    local store="${GRID_OUT_DIR:-benchmarks/results/forecasting}"
    timeout "${GRID_SECONDS:-480}" python3 benchmarks/grids/forecasting.py --device cuda \
        --memory-backend torch --threads 1 --out-dir "$store" "$@" 2>&1 \
        | tee "$out/forecasting.log"
    tar czf "$out/forecasting_cells.tgz" "$store/cells"
}

# Whole documents with the state carried (benchmarks/studies/long_documents.py): the runs'
# folders stay on the machine, the table and the rows come back. The data: WikiText-2 from
# $TITANS_SEQ_DATA, else .data/text/ carried with the call.
stage_long_documents() {
    export TITANS_SEQ_DATA="${TITANS_SEQ_DATA:-$PWD/.data}"
    timeout "${STUDY_SECONDS:-460}" python3 benchmarks/studies/long_documents.py \
        --out-dir /tmp/long_documents --json "$out/long_documents.json" \
        --out "$out/long_documents.md" "$@" 2>&1 | tee "$out/long_documents.log"
}

# The long-context suite (benchmarks/grids/lm_long_context.py): the runs' folders stay on
# the machine (/tmp/<name>), the log, the rows (<name>.json) and each mixer's scores by depth
# (<name>-<mixer>.json) come back; <name> is LONG_CONTEXT_NAME, default long_context, so two
# grids in one call (a run continued by another with `--set train.init_from=/tmp/<first
# name>/<mixer>`) keep their files apart. KEEP_WEIGHTS=1 also brings back each mixer's best
# weights (<name>-<mixer>.safetensors), which a later call continues from with `--set
# train.init_from=<carried folder>/<name>-<mixer>.safetensors`. At most eight files come
# back from a call. bAbI and WikiText-2 from $TITANS_SEQ_DATA, else .data/text/ carried
# with the call.
stage_long_context() {
    export TITANS_SEQ_DATA="${TITANS_SEQ_DATA:-$PWD/.data}"
    local name="${LONG_CONTEXT_NAME:-long_context}"
    local dir="/tmp/$name"
    timeout "${STUDY_SECONDS:-460}" python3 benchmarks/grids/lm_long_context.py \
        --out-dir "$dir" --json "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log"
    local status=${PIPESTATUS[0]}
    for scores in "$dir"/*.json; do
        [ -f "$scores" ] && cp "$scores" "$out/$name-$(basename "$scores")"
    done
    if [ "${KEEP_WEIGHTS:-0}" = 1 ]; then
        for best in "$dir"/*/best_model.safetensors; do
            [ -f "$best" ] && cp "$best" "$out/$name-$(basename "$(dirname "$best")").safetensors"
        done
    fi
    return "$status"
}

stage="${1:-session}"
shift || true
case "$stage" in
    session) stage_session "$@" ;;
    probe) stage_probe "$@" ;;
    forecasting) stage_forecasting "$@" ;;
    long_documents) stage_long_documents "$@" ;;
    long_context) stage_long_context "$@" ;;
    *) echo "usage: $0 session|probe|forecasting|long_documents|long_context [arguments]" >&2
       exit 2 ;;
esac
