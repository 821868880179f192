#!/usr/bin/env bash
# Pack a Triton release small enough to carry to the GPU machine (64 MiB a call), for timing fla against the newest
# Triton that runs beside the machine's torch (issue 52: fla 0.6.0 refuses its GDN backward on Hopper with Triton
# [3.4.0, 3.7.1); 3.7.1 fixed the miscompile). The wheel is 189 MiB; this keeps what compiling and running fla's
# kernels on an NVIDIA GPU needs (the Python package, libtriton.so and libproton.so stripped of debug information,
# ptxas, libdevice, the CUDA headers, the AMD backend that its entry points name) and leaves out CUPTI (profiling),
# ptxas-blackwell, nvdisasm and cuobjdump: 44 MiB as .tar.xz (Python's tarfile unpacks it: no tool needed there).
#
#   bash scripts/pack_triton.sh [VERSION] [OUT]     (default 3.7.1, .triton/triton-VERSION.tar.xz; minutes)
#
# On the GPU machine, ahead of the machine's Triton (jax's Pallas lowering does not use this package):
#   python3 -c "import tarfile; tarfile.open('.triton/triton-3.7.1.tar.xz').extractall('/tmp/triton', filter='tar')"
#   export PYTHONPATH=/tmp/triton:$PYTHONPATH      (benchmarks/gpu_suite.sh does both when the file is there)
set -euo pipefail
VERSION=${1:-3.7.1}
OUT=$(realpath -m "${2:-.triton/triton-$VERSION.tar.xz}")
for tool in xz strip unzip; do
  command -v $tool > /dev/null || { echo "error: pack_triton.sh needs $tool on PATH" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_27_x86_64 "triton==$VERSION" -d "$work/wheel"
mkdir "$work/tree"
unzip -q "$work"/wheel/triton-*.whl -d "$work/tree"
cd "$work/tree/triton"
rm -rf backends/nvidia/lib/cupti backends/nvidia/bin/ptxas-blackwell backends/nvidia/bin/nvdisasm \
  backends/nvidia/bin/cuobjdump instrumentation/libGPUInstrumentationTestLib.so
find . -name '*.so*' -type f -exec strip --strip-unneeded {} +
cd "$work/tree"
mkdir -p "$(dirname "$OUT")"
tar cf - . | xz -9e -T0 > "$OUT"
python3 - "$OUT" <<'EOF'
import os, sys
size = os.path.getsize(sys.argv[1]) / 2**20
print(f"{sys.argv[1]}: {size:.1f} MiB")
if size > 60:
    sys.exit(f"error: {size:.1f} MiB leaves too little of a call's 64 MiB carry for the other wheels")
EOF
