"""What the JAX side asks of PyTorch, as functions on files: make a random fla model, compute logits.

`init_checkpoint(config, seed, out, perturb)`: an fla (or CCQ reference) model from a config
dict (`model_type` picks the class), initialised by fla's own code under `torch.manual_seed`,
optionally with every parameter perturbed by `perturb * N(0, 1)` (so that norms at one and zero
biases are not special), written with `save_pretrained` (config.json + model.safetensors).

`layer_outputs(kind, config, seed, out, perturb)`: one fla mixer layer (fla has GDN-2 as a layer only), its
state_dict, an input and its output, for layer-level parity.

`checkpoint_logits(path, input_ids, device, dtype)` (device "cpu", "cuda" or "auto"): loads a checkpoint with
`AutoModelForCausalLM.from_pretrained` (any missing, unexpected or mis-shaped parameter is an
error, not a warning) and returns fp32 logits [B, T, vocab] as NumPy. On a CPU the forward runs
inside `cpu_paths()`; on a GPU it runs fla's Triton kernels.
"""

import contextlib
import importlib.metadata
from pathlib import Path

import fla.layers
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

from ccq_jax.torch_reference.cpu import cpu_paths
from ccq_jax.torch_reference.models import register

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def init_checkpoint(config: dict, seed: int, out, perturb: float = 0.0) -> None:
    register()
    config = dict(config)
    hf_config = AutoConfig.for_model(config.pop("model_type"), **config)
    torch.manual_seed(seed)
    with cpu_paths():  # fla's Attention (a hybrid's) refuses to be built without flash-attn
        model = AutoModelForCausalLM.from_config(hf_config)
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(perturb * torch.randn_like(p))
    model.save_pretrained(out)


def layer_outputs(kind: str, config: dict, seed: int, out, perturb: float = 0.0, batch: int = 2,
                  tokens: int = 40) -> None:
    """fla's mixer layer `kind` (a class of `fla.layers`, e.g. "GatedDeltaNet2") built from `config` (its keyword
    arguments) under `torch.manual_seed(seed)`, every parameter + perturb * N(0, 1), run in fp32 on the CPU paths
    on x ~ N(0, 1) [batch, tokens, hidden_size]: writes `layer.safetensors` (its state_dict) and `x.npy`, `y.npy`
    to the folder `out`."""
    torch.manual_seed(seed)
    layer = getattr(fla.layers, kind)(**config).float().eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(perturb * torch.randn_like(p))
        x = torch.randn(batch, tokens, config["hidden_size"])
        with cpu_paths():
            y = layer(x)[0]
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, str(Path(out) / "layer.safetensors"))
    np.save(Path(out) / "x.npy", x.numpy())
    np.save(Path(out) / "y.npy", y.float().numpy())


def load_checkpoint(path, device: str = "cpu", dtype: str = "float32"):
    register()
    with cpu_paths() if device == "cpu" else contextlib.nullcontext():  # a hybrid's Attention: see init_checkpoint
        model, info = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], output_loading_info=True)
    problems = {name: sorted(map(str, keys)) for name, keys in info.items() if keys}
    if problems:
        raise ValueError(f"{path}: the checkpoint does not match the model fla builds from its config: {problems}")
    return model.to(device).eval()


def resolve_device(device: str) -> str:
    """"auto": cuda when torch sees a GPU, else cpu."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def versions() -> dict:
    return {"torch": torch.__version__, "fla": importlib.metadata.version("fla-core")}


def checkpoint_logits(path, input_ids: np.ndarray, device: str = "cpu", dtype: str = "float32",
                      tf32: bool = False) -> np.ndarray:
    """With tf32=False fp32 means fp32 on a GPU for torch's matmuls (Triton's dots: TRITON_F32_DEFAULT=ieee)."""
    device = resolve_device(device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    model = load_checkpoint(path, device, dtype)
    ids = torch.as_tensor(np.asarray(input_ids, np.int64), device=device)
    with torch.no_grad(), (cpu_paths() if device == "cpu" else contextlib.nullcontext()):
        logits = model(input_ids=ids, use_cache=False).logits
    return logits.float().cpu().numpy()
