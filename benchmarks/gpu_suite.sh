#!/bin/bash
# The GPU measurements of docs/benchmarks.md and docs/parity.md, one stage per call, on a machine with two GPUs
# (each stage fits a 10-minute limit; where ours and fla are both timed, they run on one machine in one call).
#
#   bash benchmarks/gpu_suite.sh STAGE OUTDIR     (from the repository root; fla's two wheels in .whl/)
#
#   check    GPU 0: the full-size Pallas tests; GPU 1: 1.3B parity, fp32 (IEEE) then bf16, gla beside gdn
#   kernels  GPU 0: benchmarks/kernels.py (ours, then fla) at T = 4096 and 16384, then KDA against chunk_kda at 4096;
#            GPU 1 then: fla's and our kernels one by one
#   train    our 1.3B presets, one process each, at the same time, the first on GPU 0 and the second on GPU 1
#            (PRESETS, default "ccq-gla-1.3b gla-1.3b"; then PRESETS="ccq-gdn-1.3b gdn-1.3b": a GDN preset took
#            about 4.5 minutes, mostly compiling: 2 min 40 s the initialisation as one program, since compiled per
#            kind of piece by ccq_jax.models.init_split, and 1 min the step; TRAIN_ARGS, e.g.
#            "--loss-chunk-len 1024", goes to train_throughput.py); then fla's anchor models()
#            (../shared/anchors/fla_baseline.py, copied to .whl/) on GPU 0, each model's result printed as it lands
#   hybrid   GPU 0 (one GPU is enough): a hybrid's 1.3B step, ours (PRESETS, default gdn-hybrid-1.3b; its attention
#            on cuDNN, SDPA_IMPL; the presets' default, XLA's, plans 64.4 against 33.9 GiB) and then fla's
#            model of its backbone (benchmarks/fla_train.py: fla's Attention on flash-attn, or on PyTorch's fused
#            kernels where flash-attn is not installed); its decode against fla's: the inference stage with
#            PRESETS=gdn-hybrid-1.3b INFERENCE_ARGS='--prefill "" --generate ""'
#   loop     GPU 0 (one GPU is enough): benchmarks/train_loop.py before (the checkout in $OLD_TREE, default
#            .device/old: `git archive COMMIT ccq_jax pallas_kernels train eval | tar x -C .device/old`) and after
#            (this tree): the 2.6M MQAR run, then ~100M GLA on packed text (byte-level shards of the docs; the
#            model keeps its 32K vocabulary); then the other 100M families after only (LOOP_MODELS)
#   inference  GPU 0: benchmarks/inference.py for PRESETS (default gla-1.3b), fla's model of its backbone first
#            (FLA="" leaves it out: one call per preset, fla with the first), profiles, decoding with XLA's
#            recurrence and with the one-token kernels (`--decode-impls`; the step counts come from
#            benchmarks/inference_kernels.py without a GPU), INFERENCE_ARGS added (e.g. "--generate 16:2048"),
#            stopped after LIMIT seconds (default 540); each record is written as it is measured, and the table of
#            what was is printed last
#   graphs   the same without fla, the decode loop as CUDA graphs (XLA command buffers for WHILE and CONDITIONAL),
#            PRESETS default gla-1.3b,ccq-gla-1.3b, prefill 1:2048 and decode 1:2048,16:2048 only
#
# With .triton/triton-VERSION.tar.xz carried (scripts/pack_triton.sh), fla runs on that Triton (its Hopper guard then
# stays in place from 3.7.1 on); the autotuning cache below is per Triton version.
# fla's Triton autotuning results are cached in $TRITON_CACHE_DIR (default /tmp/tcache), seeded from
# .whl/tcache.tgz when that exists and written to OUTDIR/tcache.tgz: copy it to .whl/ to skip minutes of
# autotuning on the next machine (only the *.autotune.json files, a few hundred KB).
set -u
STAGE=${1:?usage: gpu_suite.sh check|kernels|train|hybrid|loop|inference|graphs OUTDIR}
OUT=${2:?usage: gpu_suite.sh check|kernels|train|hybrid|loop|inference|graphs OUTDIR}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1
# a newer Triton for fla than the machine's, where one is carried (scripts/pack_triton.sh: .triton/)
for packed in .triton/triton-*.tar.xz; do
  [ -f "$packed" ] || continue
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/triton', filter='tar')" "$packed"
  export PYTHONPATH=$PWD:/tmp/triton:/tmp/site
done
python3 -c "import triton; print('Triton', triton.__version__, 'from', triton.__file__)" 2>&1 | tail -1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/tcache} XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$TRITON_CACHE_DIR" && [ -f .whl/tcache.tgz ] && tar xzf .whl/tcache.tgz -C "$TRITON_CACHE_DIR"
on() { local gpu=$1; shift; CUDA_VISIBLE_DEVICES=$gpu "$@"; }

case $STAGE in
check)
  on 0 python3 -m pytest -m gpu tests/pallas/test_gpu.py -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1 &
  for preset in gla-1.3b gdn-1.3b; do ( for dtype in float32 bfloat16; do
    on 1 python3 -m ccq_jax.convert parity --preset $preset --dtype $dtype --seq-len 512 \
      --json "$OUT/parity-$preset-$dtype.json" > "$OUT/parity-$preset-$dtype.log" 2>&1
  done ) & done
  wait; tail -3 "$OUT/gpu_tests.log"; for f in "$OUT"/parity-*.log; do echo "$f"; tail -7 "$f"; done ;;
kernels)
  on 0 python3 benchmarks/kernels.py --seqlens 4096 16384 --impls pallas --out "$OUT/kernels.json"
  on 0 python3 benchmarks/kernels.py --families kda --seqlens 4096 --impls pallas chunk --out "$OUT/kernels-kda.json"
  for who in fla ours; do on 1 python3 -m benchmarks.kernel_profile --who $who >> "$OUT/kernel_profile.md" 2>&1; done
  cat "$OUT/kernel_profile.md" ;;
train)
  presets=(${PRESETS:-ccq-gla-1.3b gla-1.3b})
  [ ${#presets[@]} -le 2 ] || { echo "PRESETS: at most two, one per GPU"; exit 2; }
  for i in "${!presets[@]}"; do
    on $i python3 benchmarks/train_throughput.py --presets ${presets[$i]} --attn-impl pallas --param-dtype bfloat16 \
      ${TRAIN_ARGS:-} --out "$OUT/train-${presets[$i]}.jsonl" > "$OUT/train-${presets[$i]}.log" 2>&1 &
  done
  wait; for p in "${presets[@]}"; do tail -1 "$OUT/train-$p.log"; done
  # fla's models() fills its dict model by model: print each result as it lands, so a time limit keeps the first
  ( cd .whl && on 0 python3 -c "
import json, threading, fla_baseline as f
r, shown = {}, set()
t = threading.Thread(target=f.models, args=(4, 4096, r), daemon=True)
t.start()
while t.is_alive() or shown != set(r):
    t.join(5)
    for key in sorted(set(r) - shown):
        shown.add(key)
        print(json.dumps({key: r[key]}), flush=True)
" 2>&1 | tee "$OUT/fla_models.log" ) ;;
hybrid)
  for preset in ${PRESETS:-gdn-hybrid-1.3b}; do
    on 0 python3 benchmarks/train_throughput.py --presets $preset --attn-impl pallas --param-dtype bfloat16 \
      --sdpa-impl ${SDPA_IMPL:-cudnn} ${TRAIN_ARGS:-} --out "$OUT/train-$preset.jsonl" > "$OUT/train-$preset.log" 2>&1
    tail -1 "$OUT/train-$preset.log"
    on 0 python3 benchmarks/fla_train.py --presets ${preset#ccq-} --out "$OUT/fla_train.jsonl" 2>&1 | tail -1
  done ;;
loop)
  old=${OLD_TREE:-.device/old} shards=/tmp/loop-shards
  python3 -m train.data.prepare --source text --paths 'docs/*.md' '*.md' 'ccq_jax/**/*.py' 'train/**/*.py' \
    'eval/**/*.py' --tokenizer byte --output $shards > "$OUT/prepare.log" 2>&1 || { cat "$OUT/prepare.log"; exit 1; }
  m100=(--set model.hidden_size=768 --set model.num_hidden_layers=12 --set model.num_heads=3 --set "data.paths=[$shards]")
  for who in before after; do
    tree=$PWD steps=4000; [ $who = before ] && tree=$old steps=400
    PYTHONPATH=$tree:/tmp/site on 0 python3 benchmarks/train_loop.py --case mqar-2.6m --label $who --set steps=$steps \
      --out "$OUT/loop.jsonl" 2>&1 | tail -1
    PYTHONPATH=$tree:/tmp/site on 0 python3 benchmarks/train_loop.py --case text-100m --label $who --set model=gla-340m \
      "${m100[@]}" --probe 5 --out "$OUT/loop.jsonl" 2>&1 | tail -1
  done
  for model in ${LOOP_MODELS:-}; do
    on 0 python3 benchmarks/train_loop.py --case text-100m --label after --set model=$model \
      --set "data.paths=[$shards]" --probe 0 --out "$OUT/loop.jsonl" 2>&1 | tail -1
  done ;;
inference)
  on 0 timeout -k 5 "${LIMIT:-540}" python3 benchmarks/inference.py --presets "${PRESETS:-gla-1.3b}" ${FLA---fla} \
    --profile ${INFERENCE_ARGS:-} --out "$OUT/inference.jsonl" > "$OUT/inference.log" 2>&1
  echo "inference.py rc $?"; grep -v '^{' "$OUT/inference.log" | tail -8
  [ -s "$OUT/inference.jsonl" ] && python3 benchmarks/inference.py --table "$OUT/inference.jsonl" ;;
graphs)
  XLA_FLAGS=--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL on 0 timeout -k 5 "${LIMIT:-540}" python3 \
    benchmarks/inference.py --presets "${PRESETS:-gla-1.3b,ccq-gla-1.3b}" --prefill 1:2048 --decode 1:2048,16:2048 \
    --generate 16:2048 --profile ${INFERENCE_ARGS:-} --out "$OUT/graphs.jsonl" > "$OUT/graphs.log" 2>&1
  echo "inference.py rc $?"; grep -v '^{' "$OUT/graphs.log" | tail -8
  [ -s "$OUT/graphs.jsonl" ] && python3 benchmarks/inference.py --table "$OUT/graphs.jsonl" ;;
*) echo "unknown stage $STAGE (check, kernels, train, hybrid, loop, inference, graphs)"; exit 2 ;;
esac
(cd "$TRITON_CACHE_DIR" && find . -name "*.autotune.json" -print0 | tar czf "$OUT/tcache.tgz" --null -T -)
