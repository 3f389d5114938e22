"""Parsing pasted reports: collect_env of several eras, ds_report, llamafactory-cli env."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudalock.audit.reports import (
    MAX_REPORT_CHARS,
    ParsedReport,
    decode_report,
    parse_report,
    report_target,
    require_recognised,
)
from cudalock.errors import InputError
from cudalock.matrix import Matrix, load_matrix
from cudalock.versions import DriverVersion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"


def _parse(name: str) -> ParsedReport:
    return parse_report((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix()


def test_collect_env_2_1_multi_gpu_with_nvcc_on_path() -> None:
    report = _parse("collect_env_2_1_mixed.txt")
    assert report.formats == ("collect_env",)
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.1.0+cu121" and torch.cuda == "12.1"
    assert report.driver_version == "535.104.05"
    assert report.cuda_available is True
    # "CUDA runtime version" is the nvcc on PATH, not what torch loads.
    assert report.cuda_runtime == "11.8"
    assert report.installed.nvcc[0].version == "11.8" and report.installed.nvcc[0].origin == "PATH"
    assert [g.index for g in report.gpus] == [0, 1, 2, 3]
    assert {g.name for g in report.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert report.installed.python_version == "3.10.12"
    assert report.installed.platform == "linux-x86_64"
    dists = {d.name: d.version for d in report.installed.distributions}
    assert dists["torchvision"] == "0.16.0+cu118"
    assert dists["triton"] == "2.1.0"
    # The cuDNN paths and the CPU block are not mistaken for anything.
    assert "cudnn" not in " ".join(dists)
    assert "collect_env: Nvidia driver version" in report.recognised


def test_collect_env_1_13_with_conda_pypi_lines_is_one_torch() -> None:
    report = _parse("collect_env_1_13.txt")
    assert len(report.installed.torch) == 1
    assert report.installed.torch[0].version == "1.13.1+cu117"
    assert report.driver_version == "470.82.01"
    assert report.cuda_runtime is None  # "Could not collect"
    assert report.installed.python_version == "3.9.16"
    # pip packages listed twice ([pip3] and [conda] ... pypi) are kept once.
    assert [d.name for d in report.installed.distributions].count("torch") == 1


def test_collect_env_1_5_hand_edited_yes_no_and_no_colons() -> None:
    report = _parse("collect_env_1_5_hand_edited.txt")
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "1.5.0" and torch.cuda == "10.2"
    assert report.cuda_available is True  # "Yes"
    assert report.driver_version == "418.87.01"
    assert [g.name for g in report.gpus] == ["Tesla V100-SXM2-16GB"]
    assert report.installed.platform is None  # "Os: Ubuntu 18.04.4 LTS" names no architecture
    assert {d.name for d in report.installed.distributions} == {"numpy", "torch", "torchvision"}


def test_collect_env_quoted_and_indented_cpu_build() -> None:
    report = _parse("collect_env_indented_cpu_build.txt")
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.3.1+cpu"
    assert torch.cuda is None and torch.cuda_known  # "CUDA used to build PyTorch: None"
    assert report.cuda_available is False
    assert report.driver_version == "550.54.14"
    assert [g.name for g in report.gpus] == ["NVIDIA GeForce RTX 4090"]
    assert report.installed.python_version == "3.11.9"


def test_collect_env_warnings_give_arch_list_and_compute_capability() -> None:
    report = _parse("collect_env_2_5_rtx5090.txt")
    assert report.installed.arch_list == (
        "sm_50",
        "sm_60",
        "sm_70",
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_90",
    )
    assert [(g.name, g.compute_capability, g.index) for g in report.gpus] == [
        ("NVIDIA GeForce RTX 5090", (12, 0), 0)
    ]
    assert report.cuda_runtime is None  # "No CUDA"
    # pip lists "torch==2.5.1" (no label) for the same install collect_env describes.
    assert len(report.installed.torch) == 1


def test_collect_env_driver_too_old_warning_gives_the_driver_cuda() -> None:
    report = _parse("collect_env_2_11_driver_too_old.txt")
    assert report.driver_cuda == "12.2"  # "found version 12020"
    assert report.cuda_available is False
    assert report.installed.active_torch is not None
    assert report.installed.active_torch.version == "2.11.0+cu130"
    assert report.installed.dist("cuda-toolkit") is not None


def test_conda_pytorch_beside_pip_torch_is_two_installs() -> None:
    report = _parse("collect_env_conda_duplicate.txt")
    versions = [(t.version, t.cuda) for t in report.installed.torch]
    assert versions == [("2.1.2+cu121", "12.1"), ("2.0.1", "11.7")]


def test_ds_report_built_without_torch() -> None:
    report = _parse("ds_report_built_without_torch.txt")
    assert report.formats == ("ds_report",)
    ds = report.installed.deepspeed
    assert ds is not None
    assert ds.version == "0.12.3"
    assert ds.torch_version == "0.0" and ds.torch_cuda == "0.0" and ds.built_without_torch
    assert ds.installed_ops == ()
    assert report.installed.active_torch is not None
    assert report.installed.active_torch.cuda == "12.1"
    # ds_report's nvcc is the one DeepSpeed's op builder uses: CUDA_HOME's.
    assert report.installed.nvcc[0].origin == "CUDA_HOME"
    assert report.installed.nvcc[0].version == "12.1"
    assert not report.driver_known


def test_ds_report_with_precompiled_ops() -> None:
    ds = _parse("ds_report_cuda_mismatch.txt").installed.deepspeed
    assert ds is not None
    assert ds.installed_ops == ("fused_adam", "cpu_adam", "transformer")
    assert ds.torch_version == "2.1" and ds.torch_cuda == "11.8"


def test_llamafactory_env_names_no_driver() -> None:
    report = _parse("llamafactory_env.txt")
    assert report.formats == ("llamafactory-cli env",)
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.6.0+cu124" and torch.cuda == "12.4"
    assert report.cuda_available is True  # "(GPU)"
    assert report.driver_version is None and not report.driver_known
    assert [g.name for g in report.gpus] == ["NVIDIA A100-SXM4-80GB"]
    dists = {d.name: d.version for d in report.installed.distributions}
    assert dists["deepspeed"] == "0.16.4" and dists["transformers"] == "4.49.0"
    assert dists["llamafactory"] == "0.9.2"
    assert report.installed.deepspeed is not None
    assert not report.installed.deepspeed.has_build_info


def test_llamafactory_with_pasted_nvidia_smi() -> None:
    report = _parse("llamafactory_with_nvidia_smi.txt")
    assert report.formats == ("llamafactory-cli env", "nvidia-smi")
    assert report.driver_version == "530.30.02" and report.driver_cuda == "12.1"
    # "GPU type" and the table's GPU 0 are the same card; GPU 1 is the second.
    assert [(g.name, g.index) for g in report.gpus] == [
        ("NVIDIA GeForce RTX 3090", 0),
        ("NVIDIA GeForce RTX 3090", 1),
    ]
    dists = {d.name: d.version for d in report.installed.distributions}
    assert dists["llamafactory"] == "0.9.4.dev0"


def test_report_target_takes_driver_and_gpus_from_the_report(matrix: Matrix) -> None:
    target = report_target(_parse("collect_env_2_1_mixed.txt"), matrix)
    assert target.driver_version == DriverVersion("535.104.05")
    assert target.driver_cuda == (12, 2)  # 535.54.03 is CUDA 12.2's minimum driver
    assert target.compute_capabilities == ((8, 0),)  # A100, from the matrix's GPU table
    assert len(target.gpus) == 4
    assert target.source == "report"
    smi = report_target(_parse("llamafactory_with_nvidia_smi.txt"), matrix)
    assert smi.driver_cuda == (12, 1)  # nvidia-smi said so
    assert smi.compute_capabilities == ((8, 6),)


def test_unrecognised_text_is_not_an_error() -> None:
    report = parse_report("hello world\nnothing to see: here\n")
    assert report.formats == ()
    assert report.installed.torch == ()
    assert "no collect_env, ds_report or llamafactory-cli env fields recognised" in report.notes


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_report_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError, match="empty"):
        parse_report(text)


def test_binary_input_is_an_input_error() -> None:
    with pytest.raises(InputError, match="binary"):
        decode_report(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 100)
    with pytest.raises(InputError, match="binary"):
        parse_report("\x01\x02\x03\x04" * 100)


def test_decode_report_reads_utf16_and_replaces_bad_bytes() -> None:
    text = (FIXTURES / "llamafactory_env.txt").read_text(encoding="utf-8")
    assert decode_report(text.encode("utf-16")) == text
    assert "PyTorch version" in decode_report(b"- PyTorch version: 2.1.0 \xff\xfe\xfa\n")


def test_parsing_is_bounded() -> None:
    line = "[pip3] numpy==1.26.1\n"
    huge = "PyTorch version: 2.1.0+cu121\n" + line * (MAX_REPORT_CHARS // len(line) + 1000)
    report = parse_report(huge + "Nvidia driver version: 535.104.05\n")
    # Only the first MAX_REPORT_CHARS characters are read: the last line is not reached.
    assert report.driver_version is None
    assert report.installed.active_torch is not None


_REPORT_WORDS = st.sampled_from(
    [
        "PyTorch version:",
        "CUDA used to build PyTorch:",
        "Is CUDA available:",
        "Yes",
        "True",
        "GPU models and configuration:",
        "GPU 0:",
        "Nvidia driver version:",
        "[pip3]",
        "[conda]",
        "torch==",
        "deepspeed wheel compiled w. ......",
        "torch",
        "cuda",
        "nvcc version .....",
        "- PyTorch version:",
        "- GPU type:",
        "(GPU)",
        "Driver Version:",
        "CUDA Version:",
        "|",
        "with CUDA capability sm_",
        "is not compatible with the current PyTorch",
        "supports CUDA capabilities sm_",
        "found version",
        "12020",
        "99999999999",
        "535.104.05",
        "2.1.0+cu121",
        "+cu",
        "0.0",
        "..........",
        "[YES]",
        "[NO]",
        "[OKAY]",
        ":",
        ">",
        "`",
        "\n",
        " ",
        "\t",
        "12.1",
        "cu9999",
        "sm_9999",
        "NVIDIA-SMI",
        "On",
        "Off",
        "pytorch",
        "py3.10_cuda",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=400),
        st.lists(st.one_of(_REPORT_WORDS, st.text(max_size=12)), max_size=80).map("".join),
    )
)
def test_no_input_makes_the_parser_raise_anything_but_input_error(text: str) -> None:
    try:
        report = parse_report(text)
    except InputError:
        return
    report.to_json()
    report.installed.to_json()


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_no_bytes_make_decoding_raise_anything_but_input_error(data: bytes) -> None:
    try:
        text = decode_report(data)
    except InputError:
        return
    with contextlib.suppress(InputError):
        parse_report(text)


# -- what else people paste: package listings, log prefixes, error lines ----------------------


def test_pip_freeze_names_the_torch_build() -> None:
    report = parse_report("numpy==1.26.4\ntorch==2.9.1+cu128\ntorchvision==0.24.1+cu128\n")
    assert report.formats == ("pip freeze",)
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.9.1+cu128" and torch.cuda == "12.8"


def test_pip_list_takes_an_unlabelled_torchs_cuda_from_its_nvidia_runtime() -> None:
    report = parse_report(
        "Package                  Version\n"
        "------------------------ ----------\n"
        "torch                    2.1.0\n"
        "nvidia-cuda-runtime-cu12 12.1.105\n"
    )
    assert report.formats == ("pip list",)
    torch = report.installed.active_torch
    assert torch is not None and torch.cuda == "12.1" and torch.cuda_known


def test_torch_nightly_beside_torch_is_a_second_install() -> None:
    report = parse_report("torch==2.1.0+cu121\ntorch-nightly==2.2.0.dev20231010\n")
    assert [t.version for t in report.installed.torch] == ["2.1.0+cu121", "2.2.0.dev20231010"]


def test_conda_list_with_pips_torch_and_condas_pytorch_is_two_installs() -> None:
    report = parse_report(
        "# Name                    Version                   Build  Channel\n"
        "pytorch                   2.1.0           py3.10_cuda12.1_cudnn8.9.2_0    pytorch\n"
        "torch                     2.1.0                    pypi_0    pypi\n"
    )
    assert report.formats == ("conda list",)
    assert [(t.version, t.cuda) for t in report.installed.torch] == [
        ("2.1.0", "12.1"),
        ("2.1.0", None),
    ]


@pytest.mark.parametrize(
    "prefix", ["vllm-1  | ", "vllm-openai_1  | ", "[pod/trainer-0/main] ", "0: ", "12: "]
)
def test_log_collector_prefixes_are_not_part_of_the_values(prefix: str) -> None:
    text = "\n".join(
        prefix + line
        for line in (
            "PyTorch version: 2.1.0+cu121",
            "Nvidia driver version: 535.104.05",
            "GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB",
        )
    )
    report = parse_report(text)
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.1.0+cu121"
    assert report.driver_version == "535.104.05"
    assert [g.name for g in report.gpus] == ["NVIDIA A100-SXM4-80GB"]


def test_hand_typed_llamafactory_env_keeps_its_gpu() -> None:
    report = parse_report(
        "llamafactory version: 0.9.2\nPyTorch version: 2.6.0+cu124 (GPU)\n"
        "GPU type: NVIDIA GeForce RTX 5070 Ti\nDeepSpeed version: 0.16.4\n"
    )
    assert [g.name for g in report.gpus] == ["NVIDIA GeForce RTX 5070 Ti"]
    assert report.installed.dist("deepspeed") is not None


def test_a_hand_typed_line_with_a_full_width_colon_is_read() -> None:
    # microsoft/MInference#51: "GPU：Tesla V100S", typed with a Chinese input method.
    report = parse_report("flash-attn==2.6.0.post1\nGPU\uff1aTesla V100S\n")
    assert [g.name for g in report.gpus] == ["Tesla V100S"]


_DETECTRON2_ENV = """\
----------------------  ----------------------------------------------------------------
sys.platform            linux
Python                  3.10.12 (main, Jun 11 2023, 05:26:28) [GCC 11.4.0]
detectron2              0.6 @/src/detectron2/detectron2
Compiler                GCC 11.4
CUDA compiler           CUDA 12.1
detectron2 arch flags   7.5, 8.0
PyTorch                 2.1.0+cu121 @/env/lib/python3.10/site-packages/torch
GPU available           Yes
GPU 0,1                 NVIDIA GeForce RTX 3090 (arch=8.6)
torchvision             0.16.0+cu121 @/env/lib/python3.10/site-packages/torchvision
torchvision arch flags  5.0, 6.0, 7.0, 7.5, 8.0, 8.6, 9.0
"""


def test_detectron2s_collect_env_table_is_read() -> None:
    # The rows of detectron2/utils/collect_env.py (a newer release: cuobjdump's "7.5, 8.0"
    # list and the GPU's "(arch=8.6)").
    report = parse_report(_DETECTRON2_ENV)
    assert "detectron2 collect_env" in report.formats
    installed = report.installed
    torch = installed.active_torch
    assert torch is not None and torch.version == "2.1.0+cu121"
    assert installed.python_version == "3.10.12"
    assert [(g.name, g.compute_capability, g.index) for g in report.gpus] == [
        ("NVIDIA GeForce RTX 3090", (8, 6), 0),
        ("NVIDIA GeForce RTX 3090", (8, 6), 1),
    ]
    assert [(d.name, d.version) for d in installed.distributions if d.name != "torch"] == [
        ("detectron2", "0.6"),
        ("torchvision", "0.16.0+cu121"),
    ]
    archs = {ops.name: ops.archs for ops in installed.extension_archs}
    assert archs["detectron2"] == ((7, 5), (8, 0))
    assert archs["torchvision"][-1] == (9, 0)
    # detectron2 0.1's "sm_70" form.
    old = parse_report("detectron2 arch flags   sm_70, sm_120\n").installed.extension_archs
    assert old[0].archs == ((7, 0), (12, 0))


def test_a_row_that_looks_like_detectron2s_is_not_read_outside_its_table() -> None:
    # xFormers' "Python  3.10.11 (you have 3.10.6)" is no Python version of this report.
    report = parse_report("    Python  3.10.11 (you have 3.10.6)\nPyTorch  2.1.0\n")
    assert report.installed.python_version is None
    assert "detectron2 collect_env" not in report.formats


def test_error_lines_are_evidence_and_state_the_drivers_cuda() -> None:
    report = parse_report(
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12010).\n"
    )
    assert report.driver_cuda == "12.1"
    assert [m.kind for m in report.installed.messages] == ["driver-too-old"]
    assert require_recognised(report) is report


def test_deepspeeds_mismatch_line_names_nvcc_and_torchs_cuda() -> None:
    report = parse_report(
        "torch: 2.0.1\nException: >- DeepSpeed Op Builder: Installed CUDA version 12.1 does not "
        "match the version torch was compiled with 11.8, unable to compile\n"
    )
    assert report.installed.nvcc[0].version == "12.1"
    torch = report.installed.active_torch
    assert torch is not None and torch.cuda == "11.8"


def test_nothing_recognised_is_an_input_error_that_says_what_is_read() -> None:
    with pytest.raises(InputError, match="nothing in this file is a report cudalock reads"):
        require_recognised(parse_report("hello world\nnothing to see: here\n"))


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        # An issue editor's wrap at a space (Dao-AILab/flash-attention#950).
        (
            "`flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined\n"
            " symbol: _ZN3c104impl3cow11cow_deleterEPv`\n",
            "undefined-symbol",
        ),
        # A terminal's hard wrap inside a word.
        ("ImportError: libcudart.so.11.0: cannot open shared obj\nect file\n", "library-missing"),
    ],
)
def test_a_message_broken_over_two_lines_is_read_whole(text: str, kind: str) -> None:
    report = parse_report(text)
    assert [m.kind for m in report.installed.messages] == [kind]


def test_cpp_extensions_cuda_mismatch_message_is_read_over_its_own_line_break() -> None:
    # CUDA_MISMATCH_MESSAGE holds a newline after "compile"; pip indents a build's output.
    report = parse_report(
        "    RuntimeError:\n"
        "    The detected CUDA version (12.2) mismatches the version that was used to compile\n"
        "    PyTorch (11.3). Please make sure to use the same CUDA versions.\n"
    )
    assert [m.kind for m in report.installed.messages] == ["nvcc-mismatch"]
    assert [n.version for n in report.installed.nvcc] == ["12.2"]
    assert report.installed.messages[0].get("torch_cuda") == "11.3"


def test_a_wrapped_arch_warning_names_the_gpu_and_the_arch_list() -> None:
    report = parse_report(
        "NVIDIA H100 PCIe with CUDA capability\n"
        "sm_90 is not compatible with the current PyTorch installation.\n"
        "The current PyTorch\n"
        "install supports CUDA capabilities sm_37 sm_50 sm_80 sm_86.\n"
    )
    assert [(g.name, g.compute_capability) for g in report.gpus] == [("NVIDIA H100 PCIe", (9, 0))]
    assert report.installed.arch_list == ("sm_37", "sm_50", "sm_80", "sm_86")
    assert [m.kind for m in report.installed.messages] == ["arch-unsupported"]


def test_lines_each_whole_are_not_joined() -> None:
    report = parse_report(
        "ImportError: a.so: undefined symbol: _Z1fv\nImportError: b.so: undefined symbol: _Z1gv\n"
    )
    assert [m.get("library") for m in report.installed.messages] == ["a.so", "b.so"]


def test_xformers_python_line_is_part_of_its_built_for_message() -> None:
    report = parse_report(
        " PyTorch 2.9.0+cu128 with CUDA 1208 (you have 2.10.0+cu128)\n"
        "    Python  3.10.11 (you have 3.13.12)\n"
        "  Please reinstall xformers\n"
    )
    (message,) = report.installed.messages
    assert message.get("built_python") == "3.10" and message.get("python") == "3.13"
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "2.10.0+cu128"


def test_pip_show_names_the_installed_torch() -> None:
    report = parse_report(
        "Name: torch\nVersion: 1.11.0+cu113\nSummary: Tensors and Dynamic neural networks\n"
    )
    torch = report.installed.active_torch
    assert torch is not None and torch.version == "1.11.0+cu113" and torch.cuda == "11.3"
    assert report.formats == ("pip show",)


def test_a_name_line_without_a_version_after_it_is_no_package() -> None:
    report = parse_report("Name: torch\nLocation: /env/site-packages\n")
    assert report.installed.distributions == ()


@pytest.mark.parametrize(
    "line",
    [
        " - GPU models and configuration: GeForce RTX 2070, driver 450.102.04",
        "GPU models and configuration: GeForce RTX 2070 (driver 450.102.04)",
    ],
)
def test_a_driver_typed_after_the_gpu_is_the_driver(line: str) -> None:
    report = parse_report(line + "\n")
    assert report.driver_version == "450.102.04"
    assert [g.name for g in report.gpus] == ["GeForce RTX 2070"]
