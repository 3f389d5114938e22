"""Full fine-tuning, LoRA and QLoRA: which parameters train, and how many bytes the base holds.

LoRA (Hu et al. 2021, https://arxiv.org/abs/2106.09685) freezes the base model and trains two
low-rank matrices per adapted linear layer: ``lora_A`` (in_features → r) and ``lora_B``
(r → out_features), so a layer ``Linear(in, out)`` adds ``r × (in + out)`` trainable
parameters (PEFT's ``LoraLayer.update_layer``, huggingface/peft ``src/peft/tuners/lora/layer.py``).
Only those carry gradients and optimizer states; the base weights stay in 16 bits.

QLoRA (Dettmers et al. 2023, https://arxiv.org/abs/2305.14314, section 3) stores the frozen base
in 4-bit NormalFloat with one 32-bit quantization constant per block of 64 weights: 4 + 32/64 =
4.5 bits per parameter (double quantization lowers the constants to 0.127 bits; the larger
figure is used). Layers bitsandbytes leaves unquantized (the output head) stay 16-bit; that
difference is not modelled.

:func:`finetuning_from_text` reads the method from what people paste or keep on disk:
LLaMA-Factory (``finetuning_type: lora``, ``lora_rank``, ``lora_target``, ``quantization_bit: 4``,
its ``Fine-tuning method: LoRA`` log line), PEFT (``adapter_config.json``: ``"peft_type": "LORA"``,
``"r"``, ``"target_modules"``; ``print_trainable_parameters``'s ``trainable params: N || all
params: M``), axolotl (``adapter: qlora``, ``lora_r``, ``lora_target_modules``,
``lora_target_linear``, ``load_in_4bit``) and bitsandbytes' ``load_in_4bit=True``. Pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ALL_LINEAR",
    "BASE_BITS",
    "DECODER_LINEARS",
    "METHODS",
    "FineTuning",
    "Method",
    "base_weight_bytes",
    "finetuning_from_text",
    "lora_trainable_params",
]

Method = Literal["full", "lora", "qlora"]
METHODS: tuple[Method, ...] = ("full", "lora", "qlora")

#: Bits per base parameter: 16-bit weights, LLM.int8 (8 bits), and QLoRA's NF4 with its
#: per-block constants (4 + 32/64).
BASE_BITS = {16: 16.0, 8: 8.0, 4: 4.5}

#: The linear layers of a llama-style decoder layer, as PEFT and LLaMA-Factory name them.
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: ``lora_target: all`` (LLaMA-Factory), ``lora_target_linear: true`` (axolotl),
#: ``target_modules="all-linear"`` (PEFT): every linear layer but the output head.
ALL_LINEAR = "all"


@dataclass(frozen=True)
class FineTuning:
    """How a run trains: the method, and what is known of its adapter."""

    method: Method = "full"
    lora_rank: int | None = None
    #: Adapted modules (``("all",)``: every linear layer); () unknown.
    lora_targets: tuple[str, ...] = ()
    trainable_params: int | None = None
    #: Bits the frozen base is stored in: 16, 8 or 4 (QLoRA).
    base_bits: int = 16
    #: The base's total parameter count, where the same source says it (PEFT's "all params").
    total_params: int | None = None
    source: str = ""

    @property
    def adapter(self) -> bool:
        return self.method != "full"

    def describe(self) -> str:
        if not self.adapter:
            return "full fine-tuning"
        parts = ["QLoRA" if self.method == "qlora" else "LoRA"]
        if self.lora_rank is not None:
            parts.append(f"rank {self.lora_rank}")
        if self.lora_targets:
            parts.append("on " + ",".join(self.lora_targets))
        parts.append(f"{self.base_bits}-bit base")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "lora_rank": self.lora_rank,
            "lora_targets": list(self.lora_targets),
            "trainable_params": self.trainable_params,
            "base_bits": self.base_bits,
            "total_params": self.total_params,
            "source": self.source,
        }


def base_weight_bytes(params: int, bits: int) -> int:
    """Bytes of a base model of ``params`` parameters stored in ``bits`` (QLoRA: with its
    quantization constants)."""
    return int(params * BASE_BITS[bits] / 8)


def lora_trainable_params(
    rank: int, targets: tuple[str, ...], modules: tuple[tuple[str, int, int, int], ...]
) -> int | None:
    """``rank × (in + out)`` summed over the adapted linear layers.

    ``modules``: (name, in_features, out_features, how many) of every linear layer of the
    model (from its config.json or weights); ``targets``: the adapted names, or ``("all",)``.
    None when no target names a layer of the model.
    """
    wanted = {target.strip() for target in targets if target.strip()}
    every = not wanted or ALL_LINEAR in wanted or "all-linear" in wanted
    total = 0
    matched = False
    for name, fan_in, fan_out, count in modules:
        if every or name in wanted:
            matched = True
            total += rank * (fan_in + fan_out) * count
    return total if matched else None


# --- reading the method from text ------------------------------------------------------------

_MAX_VALUE = r"[A-Za-z0-9_.,\-]{1,200}"


def _key(names: str) -> re.Pattern[str]:
    """``key: value``, ``key=value``, ``"key": "value"``, ``--key value`` and the DeepSpeed
    launcher's ``'--key', 'value'``, for one of ``names`` (a regex alternation)."""
    return re.compile(
        rf"(?<![\w-])-{{0,2}}(?:{names})['\"]?(?:\s{{0,8}}[:=]\s{{0,8}}|['\"]?,\s{{0,8}}|\s{{1,8}})"
        rf"['\"]?(?P<value>{_MAX_VALUE})"
    )


_FINETUNING_TYPE = _key("finetuning_type")
_ADAPTER = _key("adapter")
_PEFT_TYPE = _key("peft_type")
_METHOD_LINE = re.compile(r"Fine-tuning method: (?P<value>[A-Za-z]{1,20})")
_QUANT_BIT = _key("quantization_bit")
_LOAD_IN = re.compile(r"load_in_(?P<bits>[48])bit['\"]?\s{0,8}[:=]\s{0,8}['\"]?(?P<on>true|True)")
_QUANTIZING = re.compile(r"Quantizing model to (?P<bits>[48]) bit")
_RANK = (_key("lora_rank"), _key("lora_r"), re.compile(r"\"r\"\s{0,8}:\s{0,8}(?P<value>\d{1,6})"))
_TARGET = _key("lora_target|lora_target_modules|target_modules")
_TARGET_LIST = re.compile(
    r"(?:lora_target_modules|target_modules)['\"]?\s{0,8}[:=]\s{0,8}\[(?P<list>[^\[\]]{0,2000})\]"
)
_YAML_LIST_HEAD = re.compile(r"^(?:lora_target_modules|target_modules):\s*$")
_TARGET_LINEAR = re.compile(r"lora_target_linear['\"]?\s{0,8}[:=]\s{0,8}(?P<on>true|True)")
_TRAINABLE = re.compile(
    r"trainable params: (?P<trainable>[\d,]{1,20}) \|\| all params: (?P<all>[\d,]{1,20})"
)


def _number(text: str) -> int | None:
    digits = text.replace(",", "")
    return int(digits) if digits.isdigit() and len(digits) <= 18 else None


def _last_value(pattern: re.Pattern[str], text: str) -> str | None:
    found = None
    for match in pattern.finditer(text):
        found = match.group("value")
    return found.strip(",.'\"") if found else None


def _targets(text: str) -> tuple[str, ...]:
    if _TARGET_LINEAR.search(text):
        return (ALL_LINEAR,)
    listed = list(_TARGET_LIST.finditer(text))
    if listed:
        names = re.findall(r"[A-Za-z_][\w.]{0,80}", listed[-1].group("list"))
        return tuple(dict.fromkeys(names))
    lines = text.splitlines()
    for position, line in enumerate(lines):
        if _YAML_LIST_HEAD.match(line.strip()):
            items = []
            for item in lines[position + 1 : position + 40]:
                stripped = item.strip()
                if not stripped.startswith("- "):
                    break
                items.append(stripped[2:].strip("'\" "))
            if items:
                return tuple(items)
    value = _last_value(_TARGET, text)
    if value is None or value.lower() in ("none", "null"):
        return ()
    return tuple(dict.fromkeys(part for part in value.split(",") if part))


def finetuning_from_text(text: str) -> FineTuning | None:
    """The fine-tuning method a log, a config (LLaMA-Factory / axolotl YAML, PEFT's
    adapter_config.json) or a command line names; None when it names none."""
    sources: list[str] = []
    method: Method | None = None
    named = _last_value(_FINETUNING_TYPE, text)
    if named is None and (line := list(_METHOD_LINE.finditer(text))):
        named = line[-1].group("value")
    if named is not None:
        lowered = named.lower()
        if lowered in ("lora", "qlora", "oft", "dora"):
            method = "lora"
        elif lowered in ("full", "freeze"):
            method = "full"
        sources.append(f"finetuning_type {named}")
    # "adapter" also names modules ("llamafactory.model.adapter:157"): only a method counts.
    adapters = [
        match.group("value").strip(",.'\"").lower()
        for pattern in (_ADAPTER, _PEFT_TYPE)
        for match in pattern.finditer(text)
    ]
    adapter = next((a for a in reversed(adapters) if a in ("lora", "qlora")), None)
    if method is None and adapter is not None:
        method = "qlora" if adapter.lower() == "qlora" else "lora"
        sources.append(f"adapter {adapter}")
    bits = 16
    quant = _last_value(_QUANT_BIT, text)
    if quant in ("4", "8"):
        bits = int(quant)
        sources.append(f"quantization_bit {quant}")
    elif (load := _LOAD_IN.search(text)) or (load := _QUANTIZING.search(text)):
        bits = int(load.group("bits"))
        sources.append(f"{bits}-bit base")
    if method == "qlora" and bits == 16:
        bits = 4
    counts = list(_TRAINABLE.finditer(text))
    trainable = total = None
    if counts:
        trainable = _number(counts[-1].group("trainable"))
        total = _number(counts[-1].group("all"))
        sources.append("trainable params line")
        if method is None and trainable is not None and total and trainable < total:
            method = "lora"
    rank_text = None
    for pattern in _RANK:
        rank_text = rank_text or _last_value(pattern, text)
    rank = _number(rank_text) if rank_text else None
    if method is None:
        if rank is None or bits == 16:
            return None
        method = "lora"  # a LoRA rank with a quantized base: QLoRA
    if method == "lora" and bits == 4:
        method = "qlora"
    if method == "full":
        return FineTuning("full", source=", ".join(sources))
    return FineTuning(
        method,
        lora_rank=rank if rank and rank > 0 else None,
        lora_targets=_targets(text),
        trainable_params=trainable,
        base_bits=bits,
        total_params=total,
        source=", ".join(sources),
    )
