"""Reading and writing Hugging Face model folders as NumPy: config.json and the weights, without torch.

Weights are read from `model.safetensors`, a sharded `model.safetensors.index.json`, (only
when torch is installed) `pytorch_model.bin` / `pytorch_model.bin.index.json`, or `params.safetensors`
(the ccq-jax native folders `ccq-convert from-fla` wrote before 2026-12-06); they are written
as safetensors (`{"format": "pt"}` metadata, as transformers writes), in shards with an index
when `max_shard_bytes` is given and the weights exceed it.
"""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
from ccq_jax.progress import progress as progress_bar

CONFIG = "config.json"
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_BIN, TORCH_BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
EARLIER_NATIVE = "params.safetensors"


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path}: not found")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _shards(folder: Path, index_name: str) -> dict[str, list[str]]:
    """shard file -> tensor names, from an index's weight_map."""
    weight_map = read_json(folder / index_name).get("weight_map")
    if not isinstance(weight_map, dict):
        raise ValueError(f"{folder / index_name}: expected a 'weight_map' object")
    shards = {}
    for name, shard in weight_map.items():
        shards.setdefault(shard, []).append(name)
    return shards


def read_safetensors(file: Path, names=None) -> dict[str, np.ndarray]:
    if not file.is_file():
        raise ValueError(f"{file}: not found")
    with safe_open(file, framework="np") as f:
        return {name: f.get_tensor(name) for name in (names or f.keys())}


def _read_torch_bin(file: Path, names=None) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise ValueError(f"{file}: reading pytorch_model.bin needs torch (pip install 'ccq-jax[torch]'), or "
                         f"save the checkpoint as safetensors") from None
    tensors = torch.load(file, map_location="cpu", weights_only=True)
    out = {}
    for name in names or tensors:
        t = tensors[name]
        out[name] = t.float().numpy().astype(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()
    return out


def read_state_dict(folder, *, progress: bool = False) -> dict[str, np.ndarray]:
    """All tensors of an HF model folder, by their state_dict names."""
    folder = Path(folder)
    for index, single, reader in ((SAFETENSORS_INDEX, SAFETENSORS, read_safetensors),
                                  (TORCH_BIN_INDEX, TORCH_BIN, _read_torch_bin)):
        if (folder / index).is_file():
            out = {}
            shards = _shards(folder, index).items()
            for shard, names in progress_bar(shards, desc="reading shards", disable=not progress):
                out.update(reader(folder / shard, names))
            return out
        if (folder / single).is_file():
            return reader(folder / single)
    if (folder / EARLIER_NATIVE).is_file():
        return read_safetensors(folder / EARLIER_NATIVE)
    raise ValueError(f"{folder}: no weights; expected one of {SAFETENSORS}, {SAFETENSORS_INDEX}, {TORCH_BIN}, "
                     f"{TORCH_BIN_INDEX}, {EARLIER_NATIVE}")


def _split(state_dict: dict[str, np.ndarray], max_shard_bytes: int | None) -> list[dict[str, np.ndarray]]:
    shards, size = [{}], 0
    for name, array in state_dict.items():
        if max_shard_bytes is not None and shards[-1] and size + array.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += array.nbytes
    return shards


def write_model_folder(folder, config: dict, state_dict: dict[str, np.ndarray], *,
                       max_shard_bytes: int | None = None, progress: bool = False) -> None:
    """config.json plus the weights as safetensors (one file, or shards + index over max_shard_bytes);
    the safetensors weights of an earlier save in `folder` are removed first."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.glob("model*.safetensors"), folder / SAFETENSORS_INDEX]:  # of an earlier save
        stale.unlink(missing_ok=True)
    write_json(folder / CONFIG, config)
    shards = _split(state_dict, max_shard_bytes)
    names = [SAFETENSORS] if len(shards) == 1 else [
        f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    for name, shard in progress_bar(list(zip(names, shards)), desc="writing", disable=not progress):
        save_file(shard, folder / name, metadata={"format": "pt"})
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(a.nbytes for a in state_dict.values())},
                 "weight_map": {key: name for name, shard in zip(names, shards) for key in shard}}
        write_json(folder / SAFETENSORS_INDEX, index)
