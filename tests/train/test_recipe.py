"""The run's recipe: the config resolves its model once, typed (a bad field named by its `model.` key, the stored
dict keeping the preset and overrides users write), and `build_train_call` gives the same state abstract (what
ccq-compile lowers) as built, and a call that trains."""

import jax
import jax.numpy as jnp
import pytest

from ccq_jax.models import GLAConfig, get_config
from tests.train.tiny_run import tiny_config
from train.config import fit_vocab
from train.data.synthetic import SyntheticBatches
from train.sharding import make_mesh
from train.step import build_train_call


def test_the_config_resolves_its_model_once_typed():
    cfg = tiny_config(model_overrides={"num_hidden_layers": 1, "hidden_size": 32})
    assert isinstance(cfg.model_config, GLAConfig)
    assert cfg.model_config == get_config("gla-tiny", num_hidden_layers=1, hidden_size=32)
    assert (cfg.to_dict()["model"], cfg.to_dict()["model_overrides"]) == ("gla-tiny", {"num_hidden_layers": 1,
                                                                                      "hidden_size": 32})
    assert fit_vocab(cfg, 1000).vocab_size == 1000 and fit_vocab(cfg, 10) is cfg.model_config
    with pytest.raises(ValueError, match=r"model\.hidden_sizee: unknown key"):
        tiny_config(model_overrides={"hidden_sizee": 32})


def test_the_abstract_call_has_the_built_states_layout_and_the_built_one_trains():
    cfg = tiny_config(steps_per_call=2)
    mesh = make_mesh(cfg.mesh)
    batch = SyntheticBatches(cfg.data).batch
    layout = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype, x.sharding), tree)
    abstract = build_train_call(cfg, mesh, make_batch=batch, abstract=True)
    built = build_train_call(cfg, mesh, make_batch=batch)
    assert layout(abstract.state) == layout(built.state)
    state, metrics = built.run(built.state, jnp.int32(2))
    assert int(state.step) == 2 and metrics["loss"].shape == (2,) and bool(jnp.all(metrics["finite"]))
