"""The ops' XLA floor: numerics, input validation, the shared types, the chunked layout and the recurrences that
every form uses. It imports no Pallas code (neither `pallas_kernels` nor `_src/pallas`)."""
