"""The ops wing's internals that the rest of this repository reaches on purpose, named once here so that `_src`
stays private (the private-name house rule guards it) and every such reach is visible in one list. Not the public
API (`ccq_jax.ops`): these names may change with the code behind them.

  layers     `visible`, the attention mask of stream gaps and documents (`_src/attention`), which the attention
             layer's cache and context-parallel paths build their explicit masks with
  models     `head_logits` (the LM head, `_src/lm_head`; `HEAD_IMPLS`, `MAX_ROWS`) and `in_range` (the ops' value
             check, which `ccq_jax.ops.checked` also runs inside jit)
  tests      `dispatch` (`Call`, `choose`) and `TABLES`, each op's table of implementations (`api.IMPLEMENTATIONS`)
  tools      the kernels' padded layout (`layout`, `chunk_cumsum`, `per_chunk`) and the gated delta rule's per-chunk
             factors (`head_factors`, `pair_decays`, `pair_products`), which `benchmarks/tools/kernel_twins.py`
             writes the per-chunk kernels' XLA twins with
"""

from ._src import dispatch
from ._src.attention.api import visible
from ._src.ccq_gated_delta_rule import api as ccq_gated_delta_rule_api
from ._src.ccq_generalized_delta_rule import api as ccq_generalized_delta_rule_api
from ._src.ccq_gla import api as ccq_gla_api
from ._src.ccq_query import api as ccq_query_api
from ._src.gated_delta_rule import api as gated_delta_rule_api
from ._src.gated_delta_rule.factors import head_factors, pair_decays, pair_products
from ._src.generalized_delta_rule import api as generalized_delta_rule_api
from ._src.gla import api as gla_api
from ._src.lm_head.api import HEAD_IMPLS, MAX_ROWS, head_logits
from ._src.pallas.layout import chunk_cumsum, layout, per_chunk
from ._src.xla.validate import in_range

TABLES = {"gla": gla_api.IMPLEMENTATIONS, "gated_delta_rule": gated_delta_rule_api.IMPLEMENTATIONS,
          "ccq_query": ccq_query_api.IMPLEMENTATIONS, "ccq_gla": ccq_gla_api.IMPLEMENTATIONS,
          "ccq_gated_delta_rule": ccq_gated_delta_rule_api.IMPLEMENTATIONS,
          "generalized_delta_rule": generalized_delta_rule_api.IMPLEMENTATIONS,
          "ccq_generalized_delta_rule": ccq_generalized_delta_rule_api.IMPLEMENTATIONS}

__all__ = ["HEAD_IMPLS", "MAX_ROWS", "TABLES", "chunk_cumsum", "dispatch", "head_factors", "head_logits", "in_range",
           "layout", "pair_decays", "pair_products", "per_chunk", "visible"]
