#!/usr/bin/env bash
# One study run in one call of the GPU machine (docs/results.md), from the repository root there:
#
#   bash study/lm/device_call.sh RUN SEED LIMIT [NAME [--set KEY=VALUE ...]]
#
# with the carried `.whl/` (grain, array-record, portpicker and tensorboardX wheels; the machine reaches no
# registry) and `.corpus/corpus.tar.xz` (the pack of `python -m study.debian_corpus pack`). Installs the wheels
# once per machine into /tmp/site, runs `study/lm/run.sh RUN` at SEED (`--set seed=SEED --set data.seed=SEED`)
# for at most LIMIT seconds, prints the timeline and the S-NIAH table, and leaves $OUT/NAME.tgz (default NAME:
# RUN-seedSEED; NAME is also the key of the run's checkpoint on the machine, see run.sh): the device tool returns
# a limited number of files. Further `--set` overrides go to ccq-train after the seed's (the docs that report
# such a run must say so). EVALUATE_ONLY, EVALUATIONS, RETRIEVAL_DOCUMENTS and RETRIEVAL_NEEDLES pass through to
# run.sh (EVALUATE_ONLY, with the same RUN, SEED and NAME: finish a run whose previous call stopped during its
# evaluations).
set -uo pipefail
run=$1 seed=$2 limit=$3 name=${4:-$1-seed$2}
shift $(( $# < 4 ? $# : 4 ))
[ -d /tmp/site/grain ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/array_record*.whl .whl/grain*.whl .whl/portpicker*.whl .whl/tensorboardx*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout -k 5 "$limit" bash study/lm/run.sh "$run" "$OUT/$name" .corpus/corpus.tar.xz --set seed="$seed" \
  --set data.seed="$seed" "$@"
echo "$name: run.sh rc $?"
cat "$OUT/$name/timeline.txt"
tail -15 "$OUT/$name"/niah*.log 2>/dev/null
tar czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
