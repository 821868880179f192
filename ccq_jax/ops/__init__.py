"""Public functional API of ccq-jax: GLA, the gated delta rule, the generalized delta rule and its family (KDA,
Gated DeltaNet-2, QED), and the CCQ read (fla layouts).

Shapes: q, k, g (GLA) `[B, T, H, K]`; v `[B, T, H, V]`; per-head gates g (gated delta
rule), beta and lam `[B, T, H]`; states `[B, H, K, V]` fp32; CCQ statistics `CCQStats(cov
[B, H, K, K], key_sum [B, H, K], count [B, H])` fp32. Gates are log decays (<= 0). Inputs
may be bf16 or fp32; states, gate cumsums and statistics are always fp32.

`generalized_delta_rule(q, k, v, g, a)` is the family's one recurrence, S_t = (I - k_t a_t^T) Diag(exp g_t) S_{t-1}
+ k_t v_t^T (g and the erase vector a `[B, T, H, K]`, v the value as written); `kda(..., g, beta)`,
`gated_delta_rule_2(..., g, b, w)` (erase gate b `[B, T, H, K]`, write gate w `[B, T, H, V]`, both in [0, 1]) and
`qed(..., g, b, w, lam)` are its named members, and `ccq_generalized_delta_rule`, `ccq_kda`,
`ccq_gated_delta_rule_2` and `ccq_qed` the same read with the CCQ-cleaned query. These run the reference forms
("recurrent", "chunk", "scan"); `gated_delta_rule` is the member with a per-head g, a = beta k and v -> beta v.

`impl` chooses the implementation (`IMPLS`): "recurrent" (a token-by-token `lax.scan`, the
ground truth), "chunk" (chunkwise-parallel XLA, the default), "scan" (`lax.associative_scan`),
and the Pallas kernels: "pallas" (the first kernel backend of `KERNELS` that takes the call on
this platform) or one backend by name, "pallas_triton" or "pallas_mosaic_gpu" (the gated delta
rule's state passes in Mosaic GPU). Kernels compile on a GPU and run interpreted on a CPU or when
asked for (`interpret=True`); `config` (a `KernelConfig`) overrides their tiling. All
implementations agree and are differentiable. `segment_ids [B, T]` marks packed documents: states
and statistics restart wherever the id changes, and `initial_state` / `initial_stats` apply to the
document at position 0 only. `context_axis` splits one sequence across the devices of a mesh axis
(`ccq_jax.ops.sharding`); `axes` (an `OpsAxes`) names the axes of the current mesh an op splits its batch, heads
and sequence over itself (None: none, whatever the mesh).
`read` (`ReadPolicy`, names in `READS`) picks how the CCQ ops turn q into q_clean with Sigma_t: the paper's
first-order read (the default), a Neumann series or conjugate gradient on (I + lam Sigma) x = q; the XLA
forms run every policy, the kernels the first-order read. `covariance_apply` is the product Sigma_t x_t itself.
Range checks on values (g <= 0, beta, lam, counts) run on eager calls and are skipped under `jax.jit`;
`checked(fn)` runs them inside jit too, as `jax.experimental.checkify` checks (`_src/xla/checking.py`).
`attention(q, k, v, segment_ids=, window=, impl=)` is causal softmax attention (GQA, sliding window, documents)
for the attention layers: `jax.nn.dot_product_attention` (impl None, "xla", "cudnn") or JAX's Pallas TPU splash
attention (impl "splash"; `SDPA_IMPLS`).
`doc_ids` turns segment ids into the monotone document index the forms use; `l2_normalize` is fla's
key normalisation (the gated delta rule's `use_qk_l2norm`), `l2_inverse_norm` its factor; `ccq_keys` the fp32
(normalised) keys the CCQ statistics are built from. `KEPT` is the `jax.ad_checkpoint.checkpoint_name` of what the
kernels keep for their backward pass beyond their inputs: a remat policy that saves it never runs a forward kernel
again (`ccq_jax.layers.remat`). Each op's package under `ccq_jax.ops._src` (private) holds its API, reference
forms and kernel backends; `ccq_jax.ops.sharding` runs the ops over a mesh, and `ccq_jax.ops.internals` names the
few internals the rest of the repository uses.
"""

from pallas_kernels.tiles import KernelConfig

from ._src.attention.api import SDPA_IMPLS, attention
from ._src.ccq_gated_delta_rule.api import ccq_gated_delta_rule
from ._src.ccq_generalized_delta_rule.api import ccq_gated_delta_rule_2, ccq_generalized_delta_rule, ccq_kda, ccq_qed
from ._src.ccq_gla.api import ccq_gla
from ._src.ccq_query.api import ccq_query, covariance_apply
from ._src.dispatch import IMPLS, KERNELS, REFERENCES
from ._src.gated_delta_rule.api import gated_delta_rule
from ._src.generalized_delta_rule.api import generalized_delta_rule
from ._src.generalized_delta_rule.family import gated_delta_rule_2, kda, qed
from ._src.gla.api import gla
from ._src.residuals import KEPT
from ._src.xla.checking import checked
from ._src.xla.numerics import ccq_keys, doc_ids, l2_inverse_norm, l2_normalize
from ._src.xla.types import READS, CCQStats, ReadPolicy
from .sharding import OpsAxes

__all__ = ["CCQStats", "IMPLS", "KEPT", "KERNELS", "KernelConfig", "OpsAxes", "READS", "REFERENCES", "ReadPolicy",
           "SDPA_IMPLS", "attention", "ccq_gated_delta_rule", "ccq_gated_delta_rule_2", "ccq_generalized_delta_rule",
           "ccq_gla", "ccq_kda",
           "ccq_keys", "ccq_qed", "ccq_query", "checked", "covariance_apply", "doc_ids", "gated_delta_rule",
           "gated_delta_rule_2", "generalized_delta_rule", "gla", "kda", "l2_inverse_norm", "l2_normalize", "qed"]
