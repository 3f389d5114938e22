"""Return codes and training-log lines in the forms people paste."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudalock.doctor.logs import (
    params_from_model_name,
    parse_exit_code,
    scan_training_log,
    shape_from_deepspeed_config,
)
from cudalock.errors import UsageError

LOGS = Path(__file__).parents[1] / "fixtures" / "doctor" / "logs"


@pytest.mark.parametrize(
    ("text", "signal", "code"),
    [
        ("-9", 9, None),
        ("137", 9, None),
        ("exitcode: -9", 9, None),
        ("exitcode  : -9 (pid: 48213)", 9, None),
        ("Signal 9 (SIGKILL) received by PID 48213", 9, None),
        ("exits with return code = -11", 11, None),
        ("-11", 11, None),
        ("139", 11, None),
        ("SIGSEGV", 11, None),
        ("247", 9, None),  # the DeepSpeed launcher's sys.exit(-9), as a shell shows it
        ("135", 7, None),
        ("1", None, 1),
        ("0", None, 0),
    ],
)
def test_exit_code_forms(text: str, signal: int | None, code: int | None) -> None:
    status = parse_exit_code(text)
    assert (status.signal, status.code) == (signal, code)


@pytest.mark.parametrize("text", ["", "killed", "-99", "1000", "SIGFOO"])
def test_bad_exit_codes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match=r"expected|unknown"):
        parse_exit_code(text)


def test_torchrun_zero2_log() -> None:
    facts = scan_training_log((LOGS / "torchrun_zero2_sigkill.log").read_text())
    kinds = [(e.kind, e.signal, e.pid) for e in facts.events]
    assert kinds == [
        ("training-progress", None, None),
        ("checkpoint-save", None, None),
        ("launcher-exit", 9, 48213),
        ("launcher-exit", 9, 48213),
        ("launcher-signal", 9, 48213),
    ]
    saving = facts.died_while_saving
    assert saving is not None and "Saving model checkpoint to output/checkpoint-500" in saving.line
    assert facts.reported_pids == (48213,)
    shape = facts.shape
    assert shape.deepspeed_config == "configs/ds_z2.json"
    assert shape.zero_stage == 2
    assert shape.gpus_per_node == 8 and shape.nodes == 1
    assert shape.params == 6_738_415_616
    assert shape.params_source is not None and "trainable" in shape.params_source
    assert shape.model == "meta-llama/Llama-2-7b-hf"


def test_progress_after_a_save_means_the_save_finished() -> None:
    text = (
        "Saving model checkpoint to out/checkpoint-100\n"
        "{'loss': 0.9, 'epoch': 0.5}\n"
        "exitcode  : -9 (pid: 77)\n"
    )
    assert scan_training_log(text).died_while_saving is None


def test_deepspeed_launcher_segv_log() -> None:
    facts = scan_training_log((LOGS / "deepspeed_segv.log").read_text())
    (event,) = facts.of_kind("launcher-exit")
    assert event.signal == 11 and "exits with return code = -11" in event.line
    assert (facts.shape.gpus_per_node, facts.shape.nodes) == (4, 1)
    assert facts.shape.deepspeed_config == "ds_z3.json"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("dataloader_bus_error.log", "dataloader-bus-error"),
        ("dataloader_killed.log", "dataloader-killed"),
        ("cuda_oom.log", "cuda-oom"),
        ("slurm_oom.log", "slurm-oom"),
    ],
)
def test_event_kinds(name: str, kind: str) -> None:
    facts = scan_training_log((LOGS / name).read_text())
    assert facts.of_kind(kind)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "ERROR: Unexpected bus error encountered in worker. This might be caused by "
            "insufficient shared memory (shm).",
            "dataloader-bus-error",
        ),
        ("ERROR: Unexpected segmentation fault encountered in worker.", "dataloader-segfault"),
    ],
)
def test_a_workers_own_signal_line_is_its_event(line: str, kind: str) -> None:
    # torch's DataLoader signal handlers print these in the worker (torch/csrc/DataLoader.cpp),
    # here after a progress bar on the same line.
    facts = scan_training_log(f"train:   2%|2 | 1/46 [00:01<01:10,  1.56s/it]{line}\n")
    (event,) = facts.of_kind(kind)
    assert event.pid is None


def test_deepspeed_config_dump_in_log() -> None:
    text = (
        "[INFO] [config.py:1003:print]   zero_config .................. stage=3 "
        "contiguous_gradients=True offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', "
        "nvme_path=None) offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='none', "
        "nvme_path=None) gather_16bit_weights_on_model_save=True\n"
        "all params: 7,615,616,512 || trainable%: 100.0000\n"
    )
    shape = scan_training_log(text).shape
    assert shape.zero_stage == 3
    assert shape.offload_param is True
    assert shape.offload_optimizer is False
    assert shape.gather_16bit_weights is True
    assert shape.params == 7_615_616_512


def test_params_from_model_name() -> None:
    assert params_from_model_name("meta-llama/Llama-2-7b-hf") == 7 * 10**9
    assert params_from_model_name("Qwen/Qwen2.5-14B-Instruct") == 14 * 10**9
    assert params_from_model_name("Qwen/Qwen2.5-0.5B") == 5 * 10**8
    assert params_from_model_name("mistralai/Mixtral-8x7B-v0.1") is None
    assert params_from_model_name("gpt2") is None


def test_shape_from_deepspeed_config_json() -> None:
    shape = shape_from_deepspeed_config(
        {
            "zero_optimization": {
                "stage": 3,
                "offload_optimizer": {"device": "cpu"},
                "offload_param": {"device": "auto"},
                "stage3_gather_16bit_weights_on_model_save": False,
            }
        }
    )
    assert (
        shape.zero_stage,
        shape.offload_optimizer,
        shape.offload_param,
        shape.gather_16bit_weights,
    ) == (3, True, None, False)
    assert shape_from_deepspeed_config({"zero_optimization": {"stage": "auto"}}).zero_stage is None
    assert shape_from_deepspeed_config({}).zero_stage is None
