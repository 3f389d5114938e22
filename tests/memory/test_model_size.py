"""Parameter counts from Hugging Face files, checked against published model sizes.

Published totals: Llama-2-7b 6,738,415,616 (Meta's model card / HF safetensors metadata),
Mistral-7B-v0.1 7,241,732,096, Qwen2-7B 7,615,616,512. Hand derivation for Llama-2-7b:
embeddings 32000·4096 = 131,072,000, twice (untied lm_head) = 262,144,000; per layer attention
4·4096² = 67,108,864, MLP 3·4096·11008 = 135,266,304, two RMSNorms 8,192 → 202,383,360 × 32 =
6,476,267,520; final norm 4,096. Total 6,738,415,616.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from cudalock.errors import InputError
from cudalock.memory.model_size import params_from_config, read_model_size

MODELS = Path(__file__).parents[1] / "fixtures" / "doctor" / "models"


def test_llama2_7b_config_gives_the_published_count() -> None:
    size = read_model_size(MODELS / "llama-2-7b-config.json")
    assert size.params == 6_738_415_616
    assert size.largest_layer_params == 32000 * 4096  # the embedding (and lm_head)
    assert size.exact is False
    assert "estimate" in size.source


def test_mistral_gqa_and_qwen2_bias() -> None:
    assert read_model_size(MODELS / "mistral-7b-config.json").params == 7_241_732_096
    # Qwen2-7B: q/k/v carry biases (3584 + 2·512 per layer) and 4 KV heads of 128.
    qwen = read_model_size(MODELS / "qwen2-7b-config.json")
    assert qwen.params == 7_615_616_512
    assert qwen.largest_layer_params == 152064 * 3584


def test_tied_embeddings_counted_once() -> None:
    config = json.loads((MODELS / "llama-2-7b-config.json").read_text())
    config["tie_word_embeddings"] = True
    assert params_from_config(config).params == 6_738_415_616 - 32000 * 4096


def test_mixture_of_experts_counts_every_expert() -> None:
    config = {
        "model_type": "mixtral",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "tie_word_embeddings": False,
    }
    # Mixtral-8x7B is published as 46.7B parameters: 46,702,792,704.
    assert params_from_config(config).params == 46_702_792_704


def test_index_total_size_over_dtype(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((MODELS / "llama-2-7b-config.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 13_476_839_424}, "weight_map": {}})
    )
    size = read_model_size(tmp_path)
    assert size.params == 13_476_839_424 // 2 == 6_738_419_712
    assert size.exact is True
    assert size.largest_layer_params == 131_072_000
    # Without a config the dtype is assumed and said so.
    (tmp_path / "config.json").unlink()
    size = read_model_size(tmp_path / "model.safetensors.index.json")
    assert size.params == 6_738_419_712
    assert size.exact is False
    assert "assumed 2 bytes" in size.notes[0]


def test_single_safetensors_header_is_exact(tmp_path: Path) -> None:
    header = {
        "__metadata__": {"format": "pt"},
        "embed.weight": {"dtype": "BF16", "shape": [1000, 64], "data_offsets": [0, 128000]},
        "layer.weight": {"dtype": "BF16", "shape": [64, 256], "data_offsets": [0, 1]},
        "norm.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [0, 1]},
    }
    raw = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)
    size = read_model_size(tmp_path)
    assert size.params == 64_000 + 16_384 + 64
    assert size.largest_layer_params == 64_000
    assert size.exact is True


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"hidden_size": 10}', "missing vocab_size"),
        (
            '{"vocab_size": 10, "hidden_size": -1, "num_hidden_layers": 1, "intermediate_size": 1,'
            ' "num_attention_heads": 1}',
            "'hidden_size' is -1",
        ),
        ('{"metadata": {"total_size": "big"}}', "metadata.total_size"),
    ],
)
def test_bad_files_are_input_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_model_size(path)


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_model_size(tmp_path / "nope.json")
    with pytest.raises(InputError, match=r"holds no config\.json"):
        read_model_size(tmp_path)
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"\x05")
    with pytest.raises(InputError, match="too short"):
        read_model_size(bad)
