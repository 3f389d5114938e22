"""LoRA and QLoRA: the method read from logs and configs, the trainable count from rank and
targets, and what host and GPU memory the run needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudalock.doctor.diagnosis import SetupHints, build_setup, merge_hints
from cudalock.doctor.logs import scan_training_log
from cudalock.memory import TrainingSetup, memory_needs
from cudalock.memory.finetuning import (
    FineTuning,
    base_weight_bytes,
    finetuning_from_text,
    lora_trainable_params,
)
from cudalock.memory.model_size import params_from_config
from tests.support.cli import cudalock

#: meta-llama/Llama-2-7b-hf's config.json (its architecture fields).
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}
P = 6_738_415_616  # Llama-2-7b's parameters


def test_lora_rank_8_on_q_and_v_of_llama2_7b_is_the_count_peft_prints() -> None:
    # PEFT's print_trainable_parameters for this model and LoraConfig(r=8,
    # target_modules=["q_proj", "v_proj"]): "trainable params: 4,194,304 || all params:
    # 6,742,609,920" — 8 × (4096 + 4096) × 2 modules × 32 layers.
    size = params_from_config(LLAMA2_7B)
    assert size.params == P
    assert lora_trainable_params(8, ("q_proj", "v_proj"), size.linear_modules) == 4_194_304
    # Every linear layer: 8 × ((4096+4096) × 4 + (4096+11008) × 3) × 32 = 19,988,480.
    assert lora_trainable_params(8, ("all",), size.linear_modules) == 19_988_480
    assert lora_trainable_params(8, ("lm_head",), size.linear_modules) is None


def test_qlora_base_is_four_and_a_half_bits_per_parameter() -> None:
    # NF4 plus one 32-bit constant per 64 weights (QLoRA, section 3).
    assert base_weight_bytes(P, 4) == int(P * 4.5 / 8) == 3_790_358_784
    assert base_weight_bytes(P, 16) == 2 * P


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "### method\nstage: sft\ndo_train: true\nfinetuning_type: lora\nlora_rank: 16\n"
            "lora_target: all\nquantization_bit: 4\n",
            FineTuning("qlora", 16, ("all",), base_bits=4),
        ),
        (
            "['/venv/bin/python', '-u', 'src/train.py', '--stage', 'sft', '--finetuning_type', "
            "'lora', '--lora_target', 'q_proj,v_proj', '--lora_rank', '8']",
            FineTuning("lora", 8, ("q_proj", "v_proj")),
        ),
        (
            '{"peft_type": "LORA", "r": 64, "target_modules": ["q_proj", "k_proj", "v_proj", '
            '"o_proj"], "lora_alpha": 16}',
            FineTuning("lora", 64, ("q_proj", "k_proj", "v_proj", "o_proj")),
        ),
        (
            "base_model: meta-llama/Llama-2-7b-hf\nload_in_4bit: true\nadapter: qlora\n"
            "lora_r: 32\nlora_target_modules:\n  - q_proj\n  - v_proj\n",
            FineTuning("qlora", 32, ("q_proj", "v_proj"), base_bits=4),
        ),
        (
            "adapter: lora\nlora_r: 8\nlora_target_linear: true\n",
            FineTuning("lora", 8, ("all",)),
        ),
        (
            "adapter: qlora\nlora_r: 8\n[INFO|2024-11-18 15:42:32] llamafactory.model.adapter:157 "
            ">> Upcasting trainable params to float32.\n",
            FineTuning("qlora", 8, (), base_bits=4),
        ),
        ("finetuning_type: full\n", FineTuning("full")),
        ("learning_rate: 1e-5\nbf16: true\n", None),
    ],
)
def test_the_method_is_read_from_configs_and_command_lines(
    text: str, expected: FineTuning | None
) -> None:
    found = finetuning_from_text(text)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert (found.method, found.lora_rank, found.lora_targets, found.base_bits) == (
        expected.method,
        expected.lora_rank,
        expected.lora_targets,
        expected.base_bits,
    )


def test_a_llamafactory_lora_log_is_not_checked_as_full_finetuning() -> None:
    log = (
        "[INFO|2024-11-18 15:42:32] llamafactory.model.adapter:157 >> Fine-tuning method: LoRA\n"
        "[INFO|2024-11-18 15:42:32] llamafactory.model.loader:157 >> trainable params: "
        "4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622\n"
        "[INFO|trainer.py:2243] 2024-11-18 15:42:40,001 >>   Number of trainable parameters "
        "= 4,194,304\n"
    )
    shape = scan_training_log(log).shape
    assert shape.params == 6_742_609_920 and shape.params_source == "log: 'all params'"
    assert shape.finetuning is not None and shape.finetuning.trainable_params == 4_194_304
    setup, notes = build_setup(
        merge_hints(SetupHints(gpus_per_node=8), SetupHints.from_shape(shape))
    )
    assert setup is not None
    assert (setup.method, setup.optimised_params) == ("lora", 4_194_304)
    assert any("4M trainable parameters (log: 'trainable params')" in note for note in notes)


def test_lora_memory_holds_the_frozen_base_and_trains_the_adapter() -> None:
    full = memory_needs(TrainingSetup(P, zero_stage=2, gpus_per_node=8))
    lora = memory_needs(
        TrainingSetup(P, zero_stage=2, gpus_per_node=8, method="lora", trainable_params=4_194_304)
    )
    # GPU: the 16-bit base whole, plus DeepSpeed's ZeRO-2 figure for the adapter:
    # 2·P + (2·T + 18·T/8) = 13,476,831,232 + 17,825,792.
    assert lora.gpu_required_bytes == 2 * P + 2 * 4_194_304 + 18 * 4_194_304 // 8
    assert full.gpu_required_bytes > 2 * lora.gpu_required_bytes
    phases = {phase.name: phase.bytes for phase in lora.phases}
    # Every rank loads the 16-bit weights; every rank copies the whole state dict at save.
    assert phases["model load"] == 8 * 2 * P
    assert phases["checkpoint save"] == 8 * 2 * P
    # Full fine-tuning's DeepSpeed CPU figure (4·P·8·1.5 = 301 GiB) no longer applies.
    assert phases["model states (DeepSpeed estimator)"] == int(4 * 4_194_304 * 8 * 1.5)
    assert lora.host_required_bytes < full.host_required_bytes


def test_qlora_keeps_a_four_bit_base_on_the_gpu_and_in_the_save_copy() -> None:
    needs = memory_needs(
        TrainingSetup(
            P,
            zero_stage=2,
            gpus_per_node=8,
            method="qlora",
            trainable_params=4_194_304,
            base_bits=4,
        )
    )
    assert needs.frozen_gpu_bytes == 3_790_358_784
    phases = {phase.name: phase.bytes for phase in needs.phases}
    assert phases["checkpoint save"] == 8 * 3_790_358_784
    assert phases["model load"] == 8 * 2 * P  # the checkpoint shards are 16-bit
    assert "4-bit base" in needs.setup.describe()
    # ZeRO-3 partitions the frozen base too, and zero.Init builds it partitioned.
    zero3 = memory_needs(
        TrainingSetup(
            P,
            zero_stage=3,
            gpus_per_node=8,
            method="qlora",
            trainable_params=4_194_304,
            base_bits=4,
        )
    )
    assert zero3.frozen_gpu_bytes == 3_790_358_784 // 8
    assert "model load" not in {phase.name for phase in zero3.phases}


def test_lora_without_a_count_figures_it_from_rank_and_model_or_says_what_it_assumed() -> None:
    size = params_from_config(LLAMA2_7B)
    counted, notes = build_setup(
        SetupHints(
            params=P,
            method="lora",
            lora_rank=8,
            lora_targets=("q_proj", "v_proj"),
            linear_modules=size.linear_modules,
        )
    )
    assert counted is not None and counted.optimised_params == 4_194_304
    assert any("rank 8 × (in + out features) of q_proj, v_proj = 4,194,304" in n for n in notes)
    assumed, notes = build_setup(SetupHints(params=P, method="lora"))
    assert assumed is not None and assumed.optimised_params == P // 100
    assert any("assumed 1% of the model" in n and "--trainable-params" in n for n in notes)


def test_memory_command_takes_the_adapter_flags_and_configs(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA2_7B))
    config = tmp_path / "lora_sft.yaml"
    config.write_text("finetuning_type: lora\nlora_rank: 8\nlora_target: q_proj,v_proj\n")
    args = ["--zero", "2", "--gpus-per-node", "8", "--host-memory", "256GiB", "--json"]
    result = cudalock("memory", "--model", model, "--training-config", config, *args)
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["needs"]["setup"]
    assert (setup["method"], setup["trainable_params"]) == ("lora", 4_194_304)
    qlora = cudalock(
        "memory", "--params", "7B", "--finetuning", "qlora", "--trainable-params", "4.2M", *args
    )
    assert qlora.returncode == 0, qlora.stderr
    document = json.loads(qlora.stdout)
    assert document["needs"]["setup"]["base_bits"] == 4
    text = cudalock(
        "memory",
        "--params",
        "7B",
        "--finetuning",
        "qlora",
        "--trainable-params",
        "4.2M",
        *args[:-1],
    )
    assert (
        "(QLoRA: the table is for the 4M trainable parameters; each GPU also holds" in text.stdout
    )
    assert "model load: every one of the 8 ranks on a node materialises" in text.stdout
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 16}')
    from_dir = cudalock("memory", "--params", "7B", "--training-config", adapter, *args)
    assert from_dir.returncode == 0, from_dir.stderr
    assert json.loads(from_dir.stdout)["needs"]["setup"]["method"] == "lora"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "70"], "70B"),
        (["--params", "7B", "--host-memory", "512"], "512GiB or 512GB"),
        (["--params", "7B", "--finetuning", "full", "--lora-rank", "8"], "--finetuning full"),
        (["--params", "7B", "--finetuning", "prefix"], "expected full, lora or qlora"),
        (["--params", "7B", "--quantization-bit", "3"], "expected 4 or 8"),
    ],
)
def test_counts_without_units_and_contradicting_flags_are_usage_errors(
    args: list[str], message: str
) -> None:
    result = cudalock("memory", "--gpus-per-node", "8", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_probe_for_another_machine_records_none_of_this_ones_host() -> None:
    result = cudalock("probe", "--json", "--driver-version", "535.104.05", "--gpu", "A100")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    host = document["host"]
    assert host["memory_total_bytes"] is None and host["hostname"] is None
    assert host["cgroup_memory_limit_bytes"] is None
    assert any(
        "left out: the Target flags describe another machine" in n for n in document["notes"]
    )
