"""`python -m ccq_jax.convert parity ...` runs `ccq-parity`; `python -m ccq_jax.convert from-fla|to-fla ...`
runs `ccq-convert` (for a checkout that is on PYTHONPATH but not installed, e.g. on the GPU machine)."""

import sys

from ccq_jax.convert.cli import convert_main, parity_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["parity"]:
        parity_main(sys.argv[2:])
    else:
        convert_main(sys.argv[1:])
