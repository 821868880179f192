#!/usr/bin/env bash
# One run of the language-modelling study (study/lm/runs.yaml) on one machine: unpack the corpus, train, evaluate.
#
#   bash study/lm/run.sh RUN OUT [CORPUS_TAR] [--set KEY=VALUE ...]
#
# RUN is a run name of runs.yaml, OUT the folder for everything that should come back (metrics, logs, eval JSON
# and PNGs; not the checkpoint), CORPUS_TAR the pack of `python -m study.debian_corpus pack` (default
# corpus.tar.xz). Extra `--set` overrides go to ccq-train (smoke tests). The corpus is unpacked and tokenised
# once into $STUDY_WORK (default /tmp/study); the checkpoint stays in $STUDY_WORK/runs/NAME/RUN, NAME being OUT's
# last component (ccq-train's workdir is $STUDY_WORK/runs/NAME): a later call with the same OUT name on the same
# machine resumes it, and a run at another seed or with another mix (another OUT name) never resumes an earlier
# one's checkpoint. After training, the evaluations run side by side as separate processes (their compilations
# dominate and use one core each): held-out perplexity at 2048, perplexity at 2K-16K through the recurrent cache,
# S-NIAH single_1/2/3 at 1K-8K (generated answers, and the graded rank of the true value among 10), Delta-mu, and
# for CCQ models each again with CCQ off and the read's engagement (`ccq-eval read`); for linear models
# `study.lm.causality` on the trained weights. Each writes OUT/<name>/ (causality: OUT/causality.json) and
# OUT/<name>.log; a Transformer has no Delta-mu or causality check (they read linear-attention layers).
# RETRIEVAL_DOCUMENTS=N (default 0: none) adds N S-NIAH-format documents to the training data
# (study/retrieval_docs.py; the docs that report such a run must say so); RETRIEVAL_NEEDLES=K (default 1) makes
# them dense documents of K needles and K questions with their answers each.
# EVALUATE_ONLY="EVALUATION ..." (for example "niah niah_ccq_off") skips training and runs only those evaluations
# on the checkpoint already in $STUDY_WORK/runs/NAME/RUN (the same OUT name as the call that trained it): how a
# later call on the same machine finishes a run whose call stopped during its evaluations.
# EVALUATIONS="EVALUATION ..." trains, then runs only those evaluations (for a run whose report needs fewer than
# all, so that one call holds it; the docs that report such a run must say so).
set -euo pipefail
run=$1 out=$2
tarball=${3:-corpus.tar.xz}
shift $(( $# < 3 ? $# : 3 ))
py=${PYTHON:-python3}
work=${STUDY_WORK:-/tmp/study}
corpus=$work/corpus
runs=$work/runs/$(basename "$out")
ckpt=$runs/$run
mkdir -p "$out" "$work"
begin=$(date +%s)
stamp() { echo "[$(( $(date +%s) - begin )) s] $*" | tee -a "$out/timeline.txt"; }

heldout=$corpus/documents/heldout
only=${EVALUATE_ONLY:-}
selected=${EVALUATE_ONLY:-${EVALUATIONS:-}}  # empty: every evaluation of the run
planned=()  # filled instead of running while `planning` is set
evaluate() {  # NAME MODULE [ARGS...]: `python -m MODULE ARGS` on the checkpoint, in the background
  local name=$1; shift
  if [ -n "${planning:-}" ]; then planned+=("$name"); return 0; fi
  [ -z "$selected" ] || [[ " $selected " == *" $name "* ]] || return 0
  XLA_PYTHON_CLIENT_PREALLOCATE=false $py -m "$@" --checkpoint "$ckpt" \
    --tokenizer "$corpus/tokenizer/tokenizer.json" > "$out/$name.log" 2>&1 \
    && stamp "$name done" || stamp "$name FAILED (see $name.log)" &
}
ccq_eval() {  # NAME COMMAND [ARGS...]: one ccq-eval command, writing OUT/NAME/
  local name=$1; shift
  evaluate "$name" eval "$@" --out "$out/$name" --no-progress
}
modes=(on)
case $run in ccq-*) modes+=(off) ;; esac
linear=$([[ $run == transformer-* ]] || echo 1)  # Delta-mu and the causality check read linear-attention layers
evaluations() {  # every evaluation of this run: CCQ models' also with CCQ off
  for mode in "${modes[@]}"; do
    tag=$([ "$mode" = off ] && echo "_ccq_off" || true)
    ccq_eval "ppl$tag" ppl --ccq "$mode" --data "$heldout" --window 2048 --batch-size 16
    ccq_eval "extrapolation$tag" extrapolation --ccq "$mode" --data "$heldout" --lengths 2048,4096,8192,16384 \
      --pack --batch-size 16
    ccq_eval "niah$tag" niah --ccq "$mode" --tasks niah_single_1,niah_single_2,niah_single_3 \
      --lengths 1024,2048,4096,8192 --depths 0,25,50,75,100 --num-samples 4 --batch-size 20 --graded
    [ -z "$linear" ] || ccq_eval "delta_mu$tag" delta-mu --ccq "$mode"
  done
  # how engaged the CCQ read is on held-out text: lambda, the applied contraction, Sigma's spectrum
  [ "${#modes[@]}" = 1 ] || ccq_eval read read --data "$heldout" --length 2048 --num-sequences 8
  # the trained weights' causality, and the kernels' loss against the token-by-token recurrence's
  [ -z "$linear" ] || evaluate causality study.lm.causality --data "$heldout" --batch 2 --length 2048 \
    --cut 1000 --out "$out/causality.json"
}

# the names asked for, before any work
[ -z "$only" ] || [ -z "${EVALUATIONS:-}" ] \
  || { echo "EVALUATIONS: expected it unset with EVALUATE_ONLY (which names the evaluations itself)" >&2; exit 2; }
planning=1 evaluations
for name in $selected; do
  [[ " ${planned[*]} " == *" $name "* ]] || { echo "$([ -n "$only" ] && echo EVALUATE_ONLY || echo EVALUATIONS):" \
    "expected names among ${planned[*]} (those of $run), got $name" >&2; exit 2; }
done
[ -z "$only" ] || [ -d "$ckpt" ] \
  || { echo "EVALUATE_ONLY: expected a trained checkpoint in $ckpt, found none" >&2; exit 2; }

if [ ! -f "$corpus/shards/heldout/manifest.json" ]; then
  $py -m study.debian_corpus unpack "$tarball" --out "$corpus" --threads "$(nproc)" > "$out/unpack.log" 2>&1
fi
paths=$corpus/shards/train
if [ "${RETRIEVAL_DOCUMENTS:-0}" -gt 0 ]; then
  needles=${RETRIEVAL_NEEDLES:-1}
  extra=$corpus/retrieval_$RETRIEVAL_DOCUMENTS$([ "$needles" = 1 ] || echo "_needles$needles")
  if [ ! -f "$extra/shards/manifest.json" ]; then
    $py -m study.retrieval_docs --corpus "$corpus" --documents "$RETRIEVAL_DOCUMENTS" --out "$extra/niah.jsonl" \
      --workers "$(nproc)" --needles "$needles" > "$out/retrieval_docs.log" 2>&1
    $py -m train.data.prepare --source jsonl --paths "$extra/niah.jsonl" \
      --tokenizer "$corpus/tokenizer/tokenizer.json" --output "$extra/shards" --threads "$(nproc)" \
      >> "$out/retrieval_docs.log" 2>&1
  fi
  paths=$paths,$extra/shards
fi
stamp "corpus ready"
if [ -z "$only" ]; then
  $py -m train --config study/lm/runs.yaml --only "$run" --workdir "$runs" --no-progress \
    --set "data.paths=[$paths]" --set "data.tokenizer=$corpus/tokenizer/tokenizer.json" "$@" \
    > "$out/train.log" 2>&1
  cp "$ckpt"/metrics.jsonl "$runs"/summary.json "$runs"/loss_curves.png "$out/"
  stamp "trained"
fi

evaluations
wait
stamp "evaluated"
