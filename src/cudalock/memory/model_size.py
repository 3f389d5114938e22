"""How many parameters a Hugging Face model has, read from its files without loading it.

Three sources, best first:

- ``model.safetensors`` (one file): its JSON header lists every tensor's shape, so the count and
  the largest tensor are exact.
- ``model.safetensors.index.json``: ``metadata.total_size`` bytes divided by the dtype's size
  (from the neighbouring ``config.json``, else 2 bytes for bf16/fp16, said so).
- ``config.json`` (llama / mistral / qwen-style decoders): counted from vocab, hidden size,
  layers, MLP width and attention heads. This is an estimate and is labelled as one.

The largest layer (what DeepSpeed's ZeRO-3 estimator calls ``largest_layer_params``: the most
parameters held directly by one module) comes from the config or the safetensors header.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudalock.errors import InputError
from cudalock.fsutil import open_regular, read_bounded

__all__ = [
    "DTYPE_BYTES",
    "MAX_JSON_BYTES",
    "MAX_SAFETENSORS_HEADER",
    "REQUIRED_KEYS",
    "ModelSize",
    "params_from_config",
    "params_from_index",
    "params_from_safetensors",
    "read_model_size",
]

MAX_JSON_BYTES = 16 * 2**20
#: The format allows 100 MB, but parsing that much JSON takes about 1 GiB; a real header of
#: even 100,000 tensors is a few MiB.
MAX_SAFETENSORS_HEADER = 16 * 2**20

DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
}


@dataclass(frozen=True)
class ModelSize:
    params: int
    largest_layer_params: int | None
    source: str
    exact: bool
    notes: tuple[str, ...] = ()
    #: The model's linear layers as (name, in_features, out_features, how many): what LoRA's
    #: trainable count is figured from; () when the files do not say.
    linear_modules: tuple[tuple[str, int, int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "largest_layer_params": self.largest_layer_params,
            "source": self.source,
            "exact": self.exact,
            "notes": list(self.notes),
        }


def _read_json(path: Path) -> dict[str, Any]:
    raw = read_bounded(path, limit=MAX_JSON_BYTES, what="model file")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise InputError(f"{path} is not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a JSON object")
    return data


#: Above any real model dimension; larger values would overflow the float arithmetic.
_MAX_DIMENSION = 2**40


def _int(config: dict[str, Any], key: str, path: Path) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_DIMENSION:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}..."
        raise InputError(f"{path}: '{key}' is {shown}; expected a positive integer up to 2^40")
    return value


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model under ``text_config``."""
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        return dict(config["text_config"])
    return config


REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
)


def params_from_config(config: dict[str, Any], path: Path = Path("config.json")) -> ModelSize:
    """Estimate a llama-style decoder's parameter count and its largest layer from config.json."""
    config = _text_config(config)
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise InputError(
            f"{path}: cannot count parameters, missing {', '.join(missing)}; expected a "
            "llama/mistral/qwen-style config.json (or pass --params)"
        )
    vocab = _int(config, "vocab_size", path)
    hidden = _int(config, "hidden_size", path)
    layers = _int(config, "num_hidden_layers", path)
    intermediate = _int(config, "intermediate_size", path)
    heads = _int(config, "num_attention_heads", path)
    kv_heads = (
        _int(config, "num_key_value_heads", path)
        if config.get("num_key_value_heads") is not None
        else heads
    )
    head_dim = _int(config, "head_dim", path) if config.get("head_dim") else hidden // heads
    model_type = str(config.get("model_type", ""))
    tied = config.get("tie_word_embeddings")
    if tied is None:
        tied = model_type.startswith("gemma")  # llama/mistral/qwen classes default to untied
    attention_bias = bool(config.get("attention_bias", model_type in ("qwen2", "qwen2_moe")))

    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if attention_bias:
        attention += q_out + 2 * kv_out
    if model_type.startswith("qwen3"):
        attention += 2 * head_dim  # q_norm and k_norm
    experts = config.get("num_local_experts") or config.get("num_experts")
    notes = [
        "estimated from config.json (llama-style decoder: embeddings, attention, gated MLP, "
        "RMSNorm); the exact count needs the weights"
    ]
    layer_linears = [hidden * q_out + (q_out if attention_bias else 0), hidden * intermediate]
    if isinstance(experts, int) and experts > 1:
        expert_width = int(config.get("moe_intermediate_size") or intermediate)
        mlp = experts * 3 * hidden * expert_width + hidden * experts  # experts + router
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        if shared:
            mlp += 3 * hidden * shared + hidden  # shared expert and its gate
        layer_linears = [layer_linears[0], hidden * max(expert_width, shared), hidden * experts]
        notes.append(f"mixture of experts: {experts} experts per layer counted in full")
    else:
        mlp = 3 * hidden * intermediate
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden
    total = embeddings * (1 if tied else 2) + layers * per_layer + hidden
    largest = max(embeddings, *layer_linears)
    linears: tuple[tuple[str, int, int, int], ...] = ()
    if not (isinstance(experts, int) and experts > 1):
        linears = (
            ("q_proj", hidden, q_out, layers),
            ("k_proj", hidden, kv_out, layers),
            ("v_proj", hidden, kv_out, layers),
            ("o_proj", q_out, hidden, layers),
            ("gate_proj", hidden, intermediate, layers),
            ("up_proj", hidden, intermediate, layers),
            ("down_proj", intermediate, hidden, layers),
        )
    return ModelSize(
        total,
        largest,
        f"{path} (estimate)",
        exact=False,
        notes=tuple(notes),
        linear_modules=linears,
    )


def _dtype_bytes(config: dict[str, Any] | None) -> tuple[int, str | None]:
    if config is None:
        return 2, None
    config = _text_config(config)
    dtype = config.get("torch_dtype") or config.get("dtype")
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPE_BYTES:
        name = dtype.removeprefix("torch.")
        return DTYPE_BYTES[name], name
    return 2, None


def params_from_index(
    index: dict[str, Any], path: Path, config: dict[str, Any] | None
) -> ModelSize:
    metadata = index.get("metadata")
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    if (
        isinstance(total_size, bool)
        or not isinstance(total_size, (int, float))
        or not 0 < total_size <= 2**60  # also refuses NaN and Infinity
    ):
        raise InputError(
            f"{path}: no positive metadata.total_size; expected a "
            "model.safetensors.index.json written by transformers"
        )
    dtype_bytes, dtype = _dtype_bytes(config)
    notes = []
    if dtype is None:
        notes.append(
            "dtype unknown (no torch_dtype in config.json): assumed 2 bytes "
            "(bf16/fp16) per parameter"
        )
    else:
        notes.append(f"{int(total_size)} bytes / {dtype_bytes} bytes per {dtype} parameter")
    largest = None
    linears: tuple[tuple[str, int, int, int], ...] = ()
    if config is not None:
        try:
            estimate = params_from_config(config, path.with_name("config.json"))
        except InputError:
            pass
        else:
            largest, linears = estimate.largest_layer_params, estimate.linear_modules
    return ModelSize(
        int(total_size) // dtype_bytes,
        largest,
        str(path),
        exact=dtype is not None,
        notes=tuple(notes),
        linear_modules=linears,
    )


def params_from_safetensors(path: Path) -> ModelSize:
    """Exact counts from a single ``.safetensors`` file's header (the weights are not read)."""
    try:
        with open_regular(path, what="safetensors file") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise InputError(f"{path} is too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_SAFETENSORS_HEADER:
                raise InputError(f"{path}: safetensors header of {length} bytes is implausible")
            header = json.loads(handle.read(length))
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from err
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path} is not a safetensors file: {err}") from None
    except RecursionError:
        raise InputError(
            f"{path} is not a safetensors file: its header is nested too deeply"
        ) from None
    if not isinstance(header, dict):
        raise InputError(f"{path} is not a safetensors file: header is not an object")
    total = 0
    largest = 0
    linears: dict[tuple[str, int, int], int] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and 0 <= d <= _MAX_DIMENSION for d in shape
        ):
            raise InputError(f"{path}: tensor {name!r} has no valid shape")
        count = math.prod(shape)
        if count > 2**60:
            raise InputError(f"{path}: tensor {name!r} has an implausible shape {shape[:8]}")
        total += count
        largest = max(largest, count)
        module, _, kind = name.rpartition(".")
        embedding = module.endswith(("embed_tokens", "lm_head"))
        if kind == "weight" and len(shape) == 2 and not embedding:
            key = (module.rpartition(".")[2], shape[1], shape[0])  # a Linear's weight: [out, in]
            linears[key] = linears.get(key, 0) + 1
    if total == 0:
        raise InputError(f"{path} holds no tensors")
    return ModelSize(
        total,
        largest,
        str(path),
        exact=True,
        notes=("largest layer = largest single tensor",),
        linear_modules=tuple((*key, n) for key, n in linears.items()),
    )


def read_model_size(path: Path) -> ModelSize:
    """A model directory, ``config.json``, ``model.safetensors.index.json`` or ``*.safetensors``."""
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        config = path / "config.json"
        single = path / "model.safetensors"
        if single.is_file():
            return params_from_safetensors(single)
        if index.is_file():
            return params_from_index(
                _read_json(index), index, _read_json(config) if config.is_file() else None
            )
        if config.is_file():
            return params_from_config(_read_json(config), config)
        raise InputError(
            f"{path} holds no config.json, model.safetensors.index.json or "
            "model.safetensors; expected a Hugging Face model directory"
        )
    if not path.exists():  # a FIFO or a device exists: the reader below refuses it, by name
        raise InputError(
            f"model file {path} does not exist; expected a Hugging Face config.json, "
            "model.safetensors.index.json or model directory"
        )
    if path.suffix == ".safetensors":
        return params_from_safetensors(path)
    data = _read_json(path)
    if "weight_map" in data or "metadata" in data:
        sibling = path.with_name("config.json")
        return params_from_index(data, path, _read_json(sibling) if sibling.is_file() else None)
    return params_from_config(data, path)
