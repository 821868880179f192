"""DataConfig: defaults, dict loading, unknown keys with suggestions, type and range errors naming the field."""

import dataclasses

import pytest

from train.data import DataConfig, MQARConfig, NeedleConfig


def test_defaults_are_valid_and_frozen():
    config = DataConfig()
    assert config.source == "mqar" and config.mqar == MQARConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seq_len = 3
    assert hash(config) == hash(DataConfig())


def test_from_dict_builds_nested_configs_and_round_trips():
    data = {
        "source": "jsonl",
        "paths": ["a.jsonl", "b.jsonl"],
        "seq_len": 64,
        "mqar": {"num_kv_pairs": 4, "power_a": 1},
        "needle": {"depth": 0.25},
    }
    config = DataConfig.from_dict(data)
    assert config.paths == ("a.jsonl", "b.jsonl")
    assert config.mqar == MQARConfig(num_kv_pairs=4, power_a=1.0)
    assert config.needle == NeedleConfig(depth=0.25)
    assert DataConfig.from_dict(config.to_dict()) == config
    assert DataConfig.from_dict({"source": "text", "paths": "one.txt"}).paths == ("one.txt",)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"seq_lne": 3}, "seq_lne: unknown key for DataConfig (did you mean 'seq_len'?)"),
        (
            {"mqar": {"num_kv_pair": 3}},
            "data.mqar.num_kv_pair: unknown key for MQARConfig (did you mean 'num_kv_pairs'?)",
        ),
        ({"zzz": 1}, "data.zzz: unknown key for DataConfig"),
        ({"mqar": 3}, "mqar: expected MQARConfig, got int 3"),
    ],
)
def test_unknown_keys_name_the_closest_field(data, message):
    with pytest.raises(ValueError) as error:
        DataConfig.from_dict(data, prefix="data." if "data." in message else "")
    assert str(error.value) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seq_len": "64"}, "seq_len: expected int, got str '64'"),
        ({"batch_size": True}, "batch_size: expected int, got bool True"),
        ({"paths": ["a"]}, "paths: expected tuple[str, ...], got list ['a']"),
        ({"num_epochs": 1.5}, "num_epochs: expected int | None, got float 1.5"),
        ({"source": "jsnl"}, "source: unknown value 'jsnl'; expected one of"),
        ({"source": "jsonl"}, "paths: source 'jsonl' needs at least one file"),
        ({"source": "hf"}, "hf_dataset: source 'hf' needs a dataset name"),
        ({"text_split": "lines"}, "text_split: unknown value 'lines'"),
        ({"seq_len": 1}, "seq_len: must be >= 2, got 1"),
        ({"batch_size": 0}, "batch_size: must be >= 1, got 0"),
        ({"seed": -1}, "seed: must be in [0, 2**32), got -1"),
        ({"seed": 2**32}, "seed: must be in [0, 2**32), got 4294967296"),
        ({"text_field": ""}, "text_field: must be a non-empty field name"),
        ({"tokenizer": ""}, "tokenizer: must be 'byte' or the path of a tokenizer.json"),
        ({"bos_token": "<s>"}, "bos_token: only used with a tokenizer.json"),
        ({"num_epochs": 0}, "num_epochs: must be >= 1 or None"),
        ({"read_threads": 0}, "read_threads: must be >= 1"),
        ({"prefetch_batches": -1}, "prefetch_batches: must be >= 0"),
        ({"eos_token": "</s>"}, "eos_token: only used with a tokenizer.json"),
        (
            {"source": "mqar", "seq_len": 16, "mqar": MQARConfig(num_kv_pairs=5)},
            "seq_len: MQAR with mqar.num_kv_pairs=5 needs seq_len >= 20",
        ),
        (
            {"source": "needle", "seq_len": 12, "needle": NeedleConfig(key_len=2, value_len=4)},
            "seq_len: the needle task with key_len=2, value_len=4 needs seq_len >= 13",
        ),
    ],
)
def test_bad_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError) as error:
        DataConfig(**kwargs)
    assert str(error.value).startswith(message), str(error.value)


def test_source_typo_suggests_the_closest_kind():
    with pytest.raises(ValueError, match=r"did you mean 'jsonl'\?"):
        DataConfig(source="jsnl")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: MQARConfig(num_kv_pairs=0), "mqar.num_kv_pairs: must be >= 1"),
        (lambda: MQARConfig(vocab_size=16, num_kv_pairs=8), "mqar.vocab_size: must give at least num_kv_pairs=8"),
        (lambda: MQARConfig(power_a=0.0), "mqar.power_a: must be in (0, 1]"),
        (lambda: MQARConfig(vocab_size="big"), "mqar.vocab_size: expected int, got str"),
        (lambda: MQARConfig(num_examples=0), "mqar.num_examples: must be >= 1, got 0"),
        (lambda: NeedleConfig(vocab_size=3), "needle.vocab_size: must be >= 4"),
        (lambda: NeedleConfig(key_len=0), "needle.key_len: must be >= 1, got 0"),
        (lambda: NeedleConfig(value_len=0), "needle.value_len: must be >= 1"),
        (lambda: NeedleConfig(depth=1.5), "needle.depth: must be in [0, 1] or None"),
        (lambda: NeedleConfig(num_examples=0), "needle.num_examples: must be >= 1"),
    ],
)
def test_task_configs_validate_themselves(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value).startswith(message), str(error.value)
