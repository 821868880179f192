"""An lm-evaluation-harness model over plain callables, so the harness's tasks run on our JAX models.

`HarnessLM(logits_fn, generate_fn, tokenizer, batch_size=..., max_length=...)` is an
`lm_eval.api.model.TemplateLM` (an `LM`); pass it as `lm_eval.simple_evaluate(model=HarnessLM(...), tasks=[...])`.

- `loglikelihood`: the harness encodes (context, continuation) (`TemplateLM`: whole string
  encoded, then split; an empty context is conditioned on EOS); the model sees the last
  `max_length + 1` tokens minus the final one and the continuation's log-probs are summed;
  `is_greedy` is whether every continuation token is the argmax.
- `loglikelihood_rolling`: the harness's own windows (`get_rolling_token_windows` with
  `context_len=1`, disjoint, EOS in front): every token scored once, each window of
  `max_length` tokens re-encoded from its start, so a long document's score matches a
  windowed Transformer's recipe rather than one recurrent pass.
- `generate_until`: greedy only (a request with `do_sample=True` and `temperature > 0` raises
  ValueError); the context keeps its last `max_length - max_gen_toks` tokens; the output stops
  at EOS and is cut before the first `until` string.
Requests run in batches of `batch_size`, longest first; `logits_fn` gets `[batch_size, L]`
with L a power of two (at most `max_length`), right-padded, so a jitted model compiles a few shapes.
"""

from collections import defaultdict

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from ccq_jax.progress import progress as progress_bar

from eval.protocols import GenerateFn, LogitsFn, Tokenizer, check_tokenizer, cut_at_eos
from eval.token_scores import target_logprobs


def _bucket(n: int, cap: int) -> int:
    return min(cap, 1 << max(0, n - 1).bit_length())


class HarnessLM(TemplateLM):
    def __init__(
        self,
        logits_fn: LogitsFn,
        generate_fn: GenerateFn | None,
        tokenizer: Tokenizer,
        *,
        batch_size: int = 8,
        max_length: int = 2048,
        max_gen_toks: int | None = None,
    ):
        """max_gen_toks: the default for requests that set none (lm-eval's 256, at most max_length // 2)."""
        super().__init__()
        if max_gen_toks is None:
            max_gen_toks = max(1, min(256, max_length // 2))
        if batch_size < 1 or max_length < 2 or not 1 <= max_gen_toks < max_length:
            raise ValueError(
                "batch_size, max_length, max_gen_toks: expected batch_size >= 1, max_length >= 2 and "
                f"1 <= max_gen_toks < max_length; got {batch_size}, {max_length}, {max_gen_toks}"
            )
        self.logits_fn, self.generate_fn = logits_fn, generate_fn
        self.tokenizer = check_tokenizer(tokenizer)
        self.batch_size, self.max_length, self.max_gen_toks = batch_size, max_length, max_gen_toks

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer.encode(string)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        rows = []
        for _, context_enc, continuation_enc in requests:
            if not 1 <= len(continuation_enc) <= self.max_length:
                raise ValueError(f"continuation: expected 1..{self.max_length} tokens, got {len(continuation_enc)}")
            rows.append((context_enc + continuation_enc)[-(self.max_length + 1) :])
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        results: list[tuple[float, bool] | None] = [None] * len(rows)
        for first in progress_bar(range(0, len(order), self.batch_size), desc="loglikelihood", disable=disable_tqdm):
            idx = order[first : first + self.batch_size]
            width = _bucket(max(len(rows[i]) - 1 for i in idx), self.max_length)
            inputs = np.zeros((self.batch_size, width), np.int32)
            targets = np.zeros((self.batch_size, width), np.int32)
            for row, i in enumerate(idx):
                n = len(rows[i]) - 1
                inputs[row, :n], targets[row, :n] = rows[i][:-1], rows[i][1:]
            logp, greedy = target_logprobs(self.logits_fn(inputs), targets)
            for row, i in enumerate(idx):
                n, m = len(rows[i]) - 1, len(requests[i][2])
                answer = (float(np.sum(logp[row, n - m : n], dtype=np.float64)), bool(np.all(greedy[row, n - m : n])))
                results[i] = answer
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for k, (string,) in enumerate(req.args for req in requests):
            for context, continuation in map(
                make_disjoint_window,
                get_rolling_token_windows(self.tok_encode(string), self.prefix_token_id, self.max_length, 1),
            ):
                windows.append((None, context, continuation))
                owner.append(k)
        totals = [0.0] * len(requests)
        for k, (logp, _) in zip(owner, self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)):
            totals[k] += logp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if self.generate_fn is None:
            raise ValueError("generate_fn: this HarnessLM was built without one; generate_until needs it")
        groups: dict[int, list[int]] = defaultdict(list)
        prompts, untils = [], []
        for k, (context, gen_kwargs) in enumerate(req.args for req in requests):
            if gen_kwargs.get("do_sample") and gen_kwargs.get("temperature", 1.0) > 0:
                raise ValueError(f"gen_kwargs: only greedy decoding is supported, got {gen_kwargs}")
            until = gen_kwargs.get("until") or []
            untils.append([until] if isinstance(until, str) else list(until))
            max_gen = int(gen_kwargs.get("max_gen_toks", self.max_gen_toks))
            if not 1 <= max_gen < self.max_length:
                raise ValueError(f"max_gen_toks: expected 1..{self.max_length - 1}, got {max_gen}")
            prompts.append(self.tok_encode(context)[-(self.max_length - max_gen) :])
            groups[max_gen].append(k)
        outputs: list[str | None] = [None] * len(requests)
        bar = progress_bar(total=len(requests), desc="generate_until", disable=disable_tqdm)
        for max_gen, members in groups.items():
            members.sort(key=lambda k: -len(prompts[k]))
            for first in range(0, len(members), self.batch_size):
                idx = members[first : first + self.batch_size]
                for k, out in zip(idx, self.generate_fn([prompts[k] for k in idx], max_gen)):
                    text = self.tokenizer.decode(cut_at_eos(list(out), self.eot_token_id))
                    for stop in untils[k]:
                        if stop:
                            text = text.split(stop)[0]
                    outputs[k] = text
                    self.cache_hook.add_partial("generate_until", requests[k].args, text)
                bar.update(len(idx))
        bar.close()
        return outputs
