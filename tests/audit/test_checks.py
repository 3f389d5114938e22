"""The pure audit on hand-built Installed values and the shipped matrix.

Expected values come from the research tables (driver → CUDA, per-build arch lists,
DeepSpeed's nvcc allow-lists), e.g. a 570.124.06 driver supports CUDA 12.8 (570.26 is 12.8's
minimum); cu126 builds carry SASS 5.0;6.0;7.0;7.5;8.0;8.6;9.0, which still covers Pascal
(6.1); sm_120 arrives with cu128. A fix keeps the installed torch release when one of its builds
fits, else takes the newest release that does (the resolver's choice).
"""

from __future__ import annotations

import pytest

from cudalock.audit.checks import CODES, audit, has_errors, sort_findings
from cudalock.audit.installed import (
    DeepSpeedBuild,
    Distribution,
    Installed,
    Nvcc,
    ReportedMessage,
    SharedLibrary,
    TorchInstall,
)
from cudalock.audit.reports import parse_report, report_target
from cudalock.matrix import Matrix
from cudalock.model import Finding, Gpu, Target
from cudalock.request import Compat
from cudalock.resolve.compat import driver_verdict
from cudalock.versions import DriverVersion, parse_cuda_version
from tests.support.known_matrix import known_matrix


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    # The replacements named below are the resolver's choices among the releases known here.
    return known_matrix()


def target(
    driver: str | None,
    cuda: tuple[int, int] | None,
    *ccs: tuple[int, int],
    platform: str = "linux-x86_64",
) -> Target:
    return Target(
        platform=platform,
        driver_version=DriverVersion(driver) if driver else None,
        driver_cuda=cuda,
        gpus=tuple(
            Gpu(name=f"GPU {cc[0]}.{cc[1]}", compute_capability=cc, index=i)
            for i, cc in enumerate(ccs)
        ),
        name="node",
        source="override",
    )


def env(
    torch: str | None,
    cuda: str | None,
    *dists: tuple[str, str],
    python_version: str = "3.11.9",
    **fields: object,
) -> Installed:
    installs = (
        (TorchInstall(version=torch, cuda=cuda, location="/env/site-packages/torch"),)
        if torch
        else ()
    )
    distributions = tuple(
        Distribution(name, version, f"/env/site-packages/{name}.dist-info")
        for name, version in dists
    )
    if torch:
        distributions += (
            Distribution("torch", torch.split("+")[0], "/env/site-packages/torch.dist-info"),
        )
    return Installed(
        source="python:/env/bin/python",
        python="/env/bin/python",
        python_version=python_version,
        platform="linux-x86_64",
        distributions=distributions,
        torch=installs,
        **fields,  # type: ignore[arg-type]
    )


def codes(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in findings]


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, codes(findings)
    return matching[0]


def install_line(finding: Finding) -> str:
    return next(line for line in finding.fix if not line.startswith("#") and " install " in line)


def test_a_matching_environment_has_no_findings(matrix: Matrix) -> None:
    installed = env(
        "2.9.1+cu128", "12.8", ("torchvision", "0.24.1"), ("nvidia-cuda-runtime-cu12", "12.8.90")
    )
    assert audit(installed, target("570.124.06", (12, 8), (8, 0), (9, 0)), matrix) == []


def test_cuda_build_without_driver(matrix: Matrix) -> None:
    installed = env("2.9.1+cu128", "12.8")
    cpu_node = audit(installed, target(None, None), matrix)
    assert codes(cpu_node) == [("no-driver", "warning")]
    assert "torch.cuda.is_available() is False" in cpu_node[0].message
    # GPUs listed but no driver: the machine is meant to compute on them.
    assert ("no-driver", "error") in codes(audit(installed, target(None, None, (8, 0)), matrix))


def test_driver_unknown_is_a_note_not_a_verdict(matrix: Matrix) -> None:
    findings = audit(
        env("2.9.1+cu128", "12.8"), target(None, None, (8, 0)), matrix, driver_known=False
    )
    assert codes(findings) == [("driver-unknown", "info")]
    assert "--driver-version" in findings[0].fix[0]


def test_newer_major_than_the_driver_is_driver_too_old(matrix: Matrix) -> None:
    finding = only(
        audit(env("2.15.0+cu132", "13.2"), target("570.124.06", (12, 8), (9, 0)), matrix),
        "driver-too-old",
    )
    assert finding.severity == "error"
    assert "CUDA 13.2" in finding.message


def test_below_the_major_floor_is_driver_too_old(matrix: Matrix) -> None:
    # CUDA 12.x minor-version compatibility needs ≥ 525.60.13; 520.61.05 is a CUDA 11.8 driver.
    finding = only(
        audit(env("2.1.0+cu121", "12.1"), target("520.61.05", (11, 8), (8, 0)), matrix),
        "driver-too-old",
    )
    assert "525.60.13" in finding.message
    # The fix keeps the installed release when it has a build the driver runs: 2.1.0 has cu118.
    assert "torch==2.1.0+cu118" in install_line(finding)


def test_before_cuda_11_there_is_no_minor_compatibility(matrix: Matrix) -> None:
    # torch 1.13.x never shipped a CUDA 10 build: give an unknown one, judged by CUDA alone.
    findings = audit(env("1.12.1+cu102", "10.2"), target("418.87.01", (10, 1), (7, 0)), matrix)
    assert ("driver-too-old", "error") in codes(findings)
    assert ("unknown-torch-build", "info") in codes(findings)


def test_pascal_gpu_without_kernels_in_a_cu128_build(matrix: Matrix) -> None:
    findings = audit(env("2.9.1+cu128", "12.8"), target("570.124.06", (12, 8), (6, 1)), matrix)
    finding = only(findings, "gpu-arch-unsupported")
    assert finding.severity == "error"
    assert "compute capability 6.1" in finding.message
    assert any(e.startswith("built for: sm_70 sm_75 sm_80") for e in finding.evidence)
    # 2.9.1 itself has a cu126 build (12.6 ≤ 12.8) whose SASS includes sm_60.
    assert "torch==2.9.1+cu126" in install_line(finding)
    assert install_line(finding).endswith("--index-url https://download.pytorch.org/whl/cu126")


def test_blackwell_gpu_without_kernels_in_a_cu124_build(matrix: Matrix) -> None:
    finding = only(
        audit(env("2.6.0+cu124", "12.4"), target("570.124.06", (12, 8), (12, 0)), matrix),
        "gpu-arch-unsupported",
    )
    # 2.6.0 has no build with sm_120. On a 12.8 driver, 2.12-2.15 offer cu126 (no sm_120) and
    # cu129 or newer (too new); 2.11.0 has cu128 with sm_120.
    assert "torch==2.11.0+cu128" in install_line(finding)


def test_live_arch_list_wins_over_the_matrix(matrix: Matrix) -> None:
    installed = env("2.9.1+cu128", "12.8", arch_list=("sm_80", "sm_90"))
    ok = audit(installed, target("570.124.06", (12, 8), (8, 6)), matrix)  # sm_80 runs on 8.6
    assert ok == []
    finding = only(
        audit(installed, target("570.124.06", (12, 8), (7, 5)), matrix), "gpu-arch-unsupported"
    )
    assert "built for: sm_80 sm_90 (torch.cuda.get_arch_list())" in finding.evidence


def test_cpu_build_only_matters_on_a_gpu_machine(matrix: Matrix) -> None:
    installed = env("2.9.1+cpu", None)
    finding = only(
        audit(installed, target("570.124.06", (12, 8), (8, 9)), matrix), "cpu-only-build"
    )
    # 2.9.1 on a 12.8 driver: cu126 and cu128 allowed, cu130 not → cu128.
    assert "torch==2.9.1+cu128" in install_line(finding)
    assert audit(installed, target(None, None), matrix) == []
    assert audit(installed, target(None, None, platform="macos-arm64"), matrix) == []


def test_cpu_build_in_a_report_that_names_no_gpu(matrix: Matrix) -> None:
    # A truncated collect_env: torch 2.4.1+cpu, and nothing about the machine's GPUs or driver.
    installed = env("2.4.1+cpu", None)
    findings = audit(installed, target(None, None), matrix, driver_known=False)
    assert codes(findings) == [("cpu-only-build", "warning")]
    assert "cannot use any GPU" in findings[0].message
    assert "--driver-version" in " ".join(findings[0].fix)
    # The label alone says it, when the report leaves out "CUDA used to build PyTorch".
    unlabelled = Installed(
        source="report:collect_env",
        torch=(TorchInstall("2.4.1+cpu", None, location="report", cuda_known=False),),
    )
    findings = audit(unlabelled, target(None, None), matrix, driver_known=False)
    assert codes(findings) == [("cpu-only-build", "warning")]
    findings = audit(unlabelled, target("550.54.14", (12, 4), (8, 0)), matrix)
    assert codes(findings) == [("cpu-only-build", "error")]


def test_a_fix_to_keep_the_release_never_replaces_it(matrix: Matrix) -> None:
    # Volta under 2.15.0+cu132: no 2.15.0 build has sm_70, so nothing keeps 2.15.0; the fix is
    # the build that has the kernels, with no "to keep torch 2.15.0" beside it.
    installed = env("2.15.0+cu132", "13.2", python_version="3.12.1")
    arch = only(
        audit(installed, target("595.45.04", (13, 2), (7, 0)), matrix), "gpu-arch-unsupported"
    )
    assert "torch==2.14.1+cu126" in install_line(arch)
    assert not any("to keep torch 2.15.0" in line for line in arch.fix)
    # An A100 on 535 (CUDA 12.2): 2.15.0 is kept by a driver upgrade to its cu130 build.
    old = only(audit(installed, target("535.104.05", (12, 2), (8, 0)), matrix), "driver-too-old")
    keep = next(line for line in old.fix if "to keep torch 2.15.0" in line)
    assert keep.endswith("upgrade to driver ≥ 580.65.06 (torch 2.15.0+cu130)")


def test_rocm_build_on_an_nvidia_machine(matrix: Matrix) -> None:
    installed = Installed(source="report", torch=(TorchInstall("2.9.1+rocm6.4", None, hip="6.4"),))
    assert codes(audit(installed, target("570.124.06", (12, 8), (9, 0)), matrix)) == [
        ("rocm-build-on-nvidia", "error")
    ]


def test_torchvision_of_another_release(matrix: Matrix) -> None:
    findings = audit(
        env("2.1.0+cu121", "12.1", ("torchvision", "0.15.2+cu121")),
        target("535.104.05", (12, 2), (8, 0)),
        matrix,
    )
    finding = only(findings, "torchvision-mismatch")
    assert "torch 2.1.0 pairs with torchvision 0.16.0" in finding.message
    assert "torchvision==0.16.0+cu121" in install_line(finding)
    assert "mixed-cuda-builds" not in {f.code for f in findings}


def test_a_companion_of_a_newer_release_is_replaced_beside_the_installed_torch(
    matrix: Matrix,
) -> None:
    # vladmandic/sdnext#3531: an xFormers install pulled torchvision 0.20.1+cu124 (torch 2.5.1's)
    # beside torch 2.4.0+cu121; torch stays, its own torchvision comes from its own index.
    findings = audit(
        env("2.4.0+cu121", "12.1", ("torchvision", "0.20.1+cu124")),
        target("535.104.05", (12, 2), (8, 0)),
        matrix,
    )
    assert only(findings, "torchvision-mismatch").fix == (
        "# keep torch 2.4.0+cu121: the companions built for it",
        "/env/bin/python -m pip install --force-reinstall --no-deps torchvision==0.19.0+cu121 "
        "--index-url https://download.pytorch.org/whl/cu121",
    )


def test_torchvisions_missing_operator_is_a_torchvision_mismatch(matrix: Matrix) -> None:
    line = "RuntimeError: operator torchvision::nms does not exist"
    installed = env(
        "2.1.0+cu121",
        "12.1",
        ("torchvision", "0.15.2+cu121"),
        messages=(ReportedMessage("torchvision-operator-missing", line, (("operator", "nms"),)),),
    )
    finding = only(
        audit(installed, target("535.104.05", (12, 2), (8, 0)), matrix), "torchvision-mismatch"
    )
    assert f"pasted: {line}" in finding.evidence
    assert "torchvision==0.16.0+cu121" in install_line(finding)


def test_torchvisions_missing_operator_without_versions_asks_for_them(matrix: Matrix) -> None:
    line = "RuntimeError: operator torchvision::nms does not exist"
    installed = Installed(
        source="report",
        messages=(ReportedMessage("torchvision-operator-missing", line, (("operator", "nms"),)),),
    )
    finding = only(audit(installed, target(None, None), matrix), "torchvision-mismatch")
    assert finding.severity == "error"
    assert all(line.startswith("#") for line in finding.fix)
    assert "pip list" in finding.fix[0]


def _library_missing(library: str, line: str) -> Installed:
    message = ReportedMessage("library-missing", line, (("library", library),))
    return Installed(source="report", messages=(message,))


def test_the_drivers_libcuda_missing_points_at_the_loader_not_at_a_package(
    matrix: Matrix,
) -> None:
    line = "OSError: libcuda.so: cannot open shared object file: No such file or directory"
    installed = _library_missing("libcuda.so", line)
    finding = only(audit(installed, target(None, None), matrix), "cuda-library-missing")
    assert "the NVIDIA driver's own library" in finding.message
    assert "sudo ldconfig" in " ".join(finding.fix)
    assert any("/usr/lib/wsl/lib" in fix for fix in finding.fix)
    assert not any("pip list" in fix for fix in finding.fix)


def test_an_unversioned_cuda_library_is_told_apart_from_a_missing_runtime(
    matrix: Matrix,
) -> None:
    line = (
        "Could not load library libcudnn_cnn_infer.so.8. Error: libnvrtc.so: cannot open "
        "shared object file: No such file or directory"
    )
    unversioned = only(
        audit(_library_missing("libnvrtc.so", line), target(None, None), matrix),
        "cuda-library-missing",
    )
    assert "unversioned name" in unversioned.message
    assert unversioned.fix == (
        "# check on the machine: ldconfig -p | grep libnvrtc (which names the loader can find)",
    )
    versioned = only(
        audit(_library_missing("libcudart.so.11.0", line), target(None, None), matrix),
        "cuda-library-missing",
    )
    assert "built for CUDA 11" in versioned.message


_XFORMERS_FOR_CU121 = (
    "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
    "    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cpu)\n"
    "    Python  3.10.11 (you have 3.10.6)\n"
)


def test_a_cpu_torch_beside_an_xformers_built_for_cuda_is_the_cuda_build_replaced(
    matrix: Matrix,
) -> None:
    # invoke-ai/InvokeAI#5065: an update put torch 2.1.0+cpu where 2.1.0+cu121 was; the fix
    # puts that build back (NVIDIA runtime wheels and all: no --no-deps), not an xFormers
    # rebuilt against the CPU torch.
    report = parse_report(_XFORMERS_FOR_CU121)
    findings = audit(report.installed, report_target(report, matrix), matrix, driver_known=False)
    assert codes(findings) == [("cpu-only-build", "error")]
    finding = only(findings, "cpu-only-build")
    assert "was built for torch 2.1.0+cu121" in finding.message
    assert any(line.startswith("pasted: ") for line in finding.evidence)
    assert finding.fix[1] == (
        "pip install --force-reinstall torch==2.1.0+cu121 "
        "--index-url https://download.pytorch.org/whl/cu121"
    )


def test_on_a_gpu_machine_the_xformers_line_is_evidence_of_the_cpu_build_finding(
    matrix: Matrix,
) -> None:
    report = parse_report(_XFORMERS_FOR_CU121)
    findings = audit(report.installed, target("535.104.05", (12, 2), (8, 0)), matrix)
    assert [f.code for f in findings if f.severity == "error"] == ["cpu-only-build"]
    finding = only(findings, "cpu-only-build")
    assert any(line.startswith("pasted: ") for line in finding.evidence)
    assert "torch==2.1.0+cu121" in install_line(finding)


def test_companions_of_another_cuda_minor_are_a_warning(matrix: Matrix) -> None:
    findings = audit(
        env("2.4.1+cu124", "12.4", ("torchvision", "0.19.1+cu121"), ("torchaudio", "2.4.1+cu124")),
        target("550.54.14", (12, 4), (8, 0)),
        matrix,
    )
    assert codes(findings) == [("mixed-cuda-builds", "warning")]
    assert findings[0].evidence == ("torchvision 0.19.1+cu121 (cu121) with torch 2.4.1+cu124",)


def test_cpu_companion_of_a_cuda_torch_is_an_error(matrix: Matrix) -> None:
    findings = audit(
        env("2.4.1+cu124", "12.4", ("torchaudio", "2.4.1+cpu")),
        target("550.54.14", (12, 4), (8, 0)),
        matrix,
    )
    assert codes(findings) == [("mixed-cuda-builds", "error")]


_VLLM_UNDEFINED = ReportedMessage(
    "undefined-symbol",
    "site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
    (("library", "site-packages/vllm/_C.abi3.so"), ("symbol", "_ZN3c104cuda9SetDeviceEi")),
)


def test_a_prebuilt_vllm_beside_another_torch_gets_the_torch_it_was_built_against(
    matrix: Matrix,
) -> None:
    # cuda_builds.toml: vllm 0.6.4's wheel pins torch==2.5.1 (vllm-project/vllm#1807's fix).
    installed = env("2.4.0+cu121", "12.1", ("vllm", "0.6.4"), messages=(_VLLM_UNDEFINED,))
    findings = audit(installed, target("550.54.15", (12, 4), (8, 0)), matrix)
    finding = only(findings, "extension-abi-mismatch")
    assert finding.fix[0] == "# the torch vllm 0.6.4 was built against: torch 2.5.1+cu124"
    assert "torch==2.5.1+cu124" in install_line(finding)
    assert not any("--no-build-isolation" in line for line in finding.fix)


def test_a_prebuilt_vllm_of_unknown_version_is_not_rebuilt_for_nothing(matrix: Matrix) -> None:
    installed = Installed(source="report", messages=(_VLLM_UNDEFINED,))
    finding = only(audit(installed, target(None, None), matrix), "extension-abi-mismatch")
    assert len(finding.fix) == 1 and finding.fix[0].startswith("#")
    assert "rebuilds nothing" in finding.fix[0]
    assert "'pip install vllm==VERSION' (the installed version)" in finding.fix[0]


def test_nvidia_libraries_of_another_major(matrix: Matrix) -> None:
    installed = env(
        "2.11.0+cu130",
        "13.0",
        ("cuda-toolkit", "13.0.2"),
        ("nvidia-cublas-cu12", "12.8.4.1"),
        ("nvidia-cudnn-cu13", "9.19.0.56"),
        ("nvidia-cublas", "13.1.0.3"),
    )
    finding = only(
        audit(installed, target("580.65.06", (13, 0), (9, 0)), matrix), "mixed-cuda-builds"
    )
    assert finding.severity == "warning"
    assert finding.evidence == ("nvidia-cublas-cu12 12.8.4.1 (CUDA 12)",)
    assert finding.fix == (
        "/env/bin/python -m pip uninstall -y nvidia-cublas-cu12   "
        "# if nothing else in the environment needs them",
    )


def test_two_torch_installs_in_different_directories(matrix: Matrix) -> None:
    installed = Installed(
        source="python:/env/bin/python",
        python="/env/bin/python",
        python_version="3.11.9",
        distributions=(
            Distribution(
                "torch",
                "2.1.0+cu121",
                "/home/u/.local/lib/python3.11/site-packages/torch-2.1.0+cu121.dist-info",
            ),
            Distribution(
                "torch", "2.3.1", "/env/lib/python3.11/site-packages/torch-2.3.1.dist-info"
            ),
        ),
        torch=(
            TorchInstall("2.1.0+cu121", "12.1", location="/home/u/.local/torch"),
            TorchInstall("2.3.1+cu121", "12.1", location="/env/torch"),
        ),
    )
    finding = only(
        audit(installed, target("535.104.05", (12, 2), (8, 0)), matrix), "duplicate-torch"
    )
    assert "one shadows the other" in finding.message
    assert finding.fix.count("/env/bin/python -m pip uninstall -y torch") == 2


def _ds(torch_version: str, cuda: str, ops: tuple[str, ...] = ()) -> DeepSpeedBuild:
    return DeepSpeedBuild(
        version="0.15.1", torch_version=torch_version, torch_cuda=cuda, installed_ops=ops
    )


def test_deepspeed_compiled_for_another_cuda_and_torch(matrix: Matrix) -> None:
    node = target("535.104.05", (12, 2), (8, 0))
    with_ops = audit(
        env("2.1.0+cu121", "12.1", deepspeed=_ds("2.0", "11.8", ("fused_adam",))), node, matrix
    )
    assert codes(with_ops) == [
        ("deepspeed-cuda-mismatch", "error"),
        ("deepspeed-torch-mismatch", "error"),
    ]
    assert "fused_adam" in with_ops[0].message
    without_ops = audit(env("2.1.0+cu121", "12.1", deepspeed=_ds("2.0", "11.8")), node, matrix)
    assert codes(without_ops) == [
        ("deepspeed-cuda-mismatch", "warning"),
        ("deepspeed-torch-mismatch", "warning"),
    ]
    assert (
        audit(
            env("2.1.0+cu121", "12.1", deepspeed=_ds("2.1", "12.1", ("fused_adam",))), node, matrix
        )
        == []
    )


def _nvcc(version: str) -> tuple[Nvcc, ...]:
    return (Nvcc(path="/usr/local/cuda/bin/nvcc", version=version, origin="CUDA_HOME"),)


def test_nvcc_minor_mismatch_follows_deepspeeds_allow_list(matrix: Matrix) -> None:
    node = target("550.54.14", (12, 4), (8, 0))
    # The matrix (from each sdist's op_builder): 0.15.1 accepts 12.0-12.5 against each other,
    # 0.14.0-0.14.2 only 12.0-12.3.
    accepted = env("2.1.0+cu121", "12.1", nvcc=_nvcc("12.4.131"), deepspeed=_ds("2.1", "12.1"))
    assert audit(accepted, node, matrix) == []
    refused = env(
        "2.1.0+cu121",
        "12.1",
        nvcc=_nvcc("12.4.131"),
        deepspeed=DeepSpeedBuild(version="0.14.2", torch_version="2.1", torch_cuda="12.1"),
    )
    finding = only(audit(refused, node, matrix), "nvcc-mismatch")
    assert finding.severity == "error"
    assert "DS_SKIP_CUDA_CHECK" in finding.message
    # No DeepSpeed: a minor mismatch is only a warning from cpp_extension, not reported.
    assert audit(env("2.1.0+cu121", "12.1", nvcc=_nvcc("12.4.131")), node, matrix) == []
    major = only(
        audit(env("2.1.0+cu121", "12.1", nvcc=_nvcc("11.8.89")), node, matrix), "nvcc-mismatch"
    )
    assert major.severity == "warning"


def test_bundled_cudart_shadowed_by_an_older_one(matrix: Matrix) -> None:
    node = target("550.54.14", (12, 4), (8, 0))

    def with_lib(version: str) -> Installed:
        return env(
            "2.4.1+cu124",
            "12.4",
            ld_library_path=("/opt/cuda/lib64", "/opt/other"),
            cuda_libraries=(
                SharedLibrary(
                    "libcudart",
                    f"/opt/cuda/lib64/libcudart.so.{version}",
                    version,
                    "/opt/cuda/lib64",
                ),
            ),
        )

    finding = only(audit(with_lib("12.1.105"), node, matrix), "library-shadowing")
    assert finding.severity == "error"
    assert finding.fix[0] == "export LD_LIBRARY_PATH=/opt/other"
    assert audit(with_lib("12.6.77"), node, matrix) == []  # newer: no harm
    assert audit(with_lib("12"), node, matrix) == []  # soname only: cannot tell
    assert audit(with_lib("11.8.89"), node, matrix) == []  # another soname


def test_unknown_release_is_judged_by_its_cuda(matrix: Matrix) -> None:
    installed, node = env("2.99.0+cu128", "12.8"), target("535.104.05", (12, 2), (8, 0))
    findings = audit(installed, node, matrix)
    assert codes(findings) == [("minor-compat-only", "error"), ("unknown-torch-build", "info")]
    findings = audit(installed, node, matrix, compat="minor")
    assert codes(findings) == [("minor-compat-only", "warning"), ("unknown-torch-build", "info")]


def test_torch_directory_without_version_file(matrix: Matrix) -> None:
    installed = Installed(
        source="python:/env/bin/python",
        python="/env/bin/python",
        torch=(TorchInstall(None, None, location="/env/torch", has_version_file=False),),
    )
    findings = audit(installed, target("535.104.05", (12, 2), (8, 0)), matrix)
    assert codes(findings) == [("broken-torch-install", "error")]
    assert findings[0].fix[0] == "/env/bin/python -m pip uninstall -y torch"


def test_no_torch_is_a_note(matrix: Matrix) -> None:
    findings = audit(env(None, None), target("535.104.05", (12, 2), (8, 0)), matrix)
    assert codes(findings) == [("no-torch", "info")]
    # resolve's choice for 535.104.05 (CUDA 12.2): the newest build for CUDA 12, 2.5.1+cu121.
    assert "torch==2.5.1+cu121" in install_line(findings[0])


def test_order_helpers_and_codes() -> None:
    info = Finding("no-torch", "info", "m")
    warning = Finding("minor-compat-only", "warning", "m")
    error = Finding("driver-too-old", "error", "m")
    assert sort_findings([info, warning, error]) == [error, warning, info]
    assert has_errors([info, error]) and not has_errors([info, warning])
    assert len(set(CODES)) == len(CODES)
    assert all(code == code.lower() and " " not in code for code in CODES)


def test_newer_minor_than_the_driver_follows_the_policy(matrix: Matrix) -> None:
    # torch 2.9.1+cu128 on driver 530.30.02 (CUDA 12.1, above the 12.x floor 525.60.13).
    installed = env("2.9.1+cu128", "12.8", ("torchvision", "0.24.1+cu128"))
    node = target("530.30.02", (12, 1), (8, 0), (8, 0))
    strict = only(audit(installed, node, matrix), "minor-compat-only")
    assert strict.severity == "error"
    assert "--compat strict" in strict.message and "--compat minor" in strict.message
    assert "CUDA 12.8 needs driver ≥ 570.26 without it" in strict.evidence
    # resolve's strict choice for this node: the newest CUDA 12 build ≤ 12.1, 2.5.1+cu121.
    assert "torch==2.5.1+cu121" in install_line(strict)
    assert "# or upgrade the NVIDIA driver to ≥ 570.26" in strict.fix
    minor = only(audit(installed, node, matrix, compat="minor"), "minor-compat-only")
    assert minor.severity == "warning"
    assert "torch==2.5.1+cu121" in install_line(minor)  # out of minor-version compatibility


@pytest.mark.parametrize("compat", ["strict", "minor"])
@pytest.mark.parametrize(
    ("torch", "cuda", "driver", "driver_cuda"),
    [
        ("2.9.1+cu128", "12.8", "530.30.02", (12, 1)),  # same major, above the floor
        ("2.9.1+cu126", "12.6", "570.124.06", (12, 8)),  # older CUDA: always fine
        ("2.11.0+cu130", "13.0", "570.124.06", (12, 8)),  # newer major
        ("2.1.0+cu121", "12.1", "520.61.05", (11, 8)),  # below the 12.x floor
        ("2.5.1+cu124", "12.4", "525.60.13", (12, 0)),  # exactly at the floor
    ],
)
def test_the_driver_check_errs_exactly_where_resolve_refuses(
    matrix: Matrix,
    compat: Compat,
    torch: str,
    cuda: str,
    driver: str,
    driver_cuda: tuple[int, int],
) -> None:
    node = target(driver, driver_cuda, (8, 0))
    findings = audit(env(torch, cuda), node, matrix, compat=compat)
    driver_errors = [
        f
        for f in findings
        if f.code in ("driver-too-old", "minor-compat-only") and f.severity == "error"
    ]
    refused = not driver_verdict(matrix, parse_cuda_version(cuda), node, compat).allowed
    assert bool(driver_errors) == refused, codes(findings)


# -- a fix is offered only after it is checked ------------------------------------------------


def _pins(finding: Finding) -> list[str]:
    """The torch requirements the fix installs (``torch==2.5.1+cu121``)."""
    return [
        word
        for line in finding.fix
        if not line.startswith("#")
        for word in line.split()
        if word.startswith("torch==")
    ]


def test_the_keep_this_torch_hint_names_what_resolving_with_it_gives(matrix: Matrix) -> None:
    from cudalock.resolve import make_request, resolve

    machine = target("530.30.02", (12, 1), (8, 0))
    finding = only(audit(env("2.9.1+cu128", "12.8"), machine, matrix), "minor-compat-only")
    hint = next(line for line in finding.fix if "--compat minor" in line)
    plan = resolve(
        matrix, [machine], make_request(torch="==2.9.1", compat="minor", with_packages=["none"])
    )
    assert f"(torch {plan.torch_pin.version})" in hint


def test_a_fix_on_a_machine_with_a_cuda_12_1_toolkit_matches_the_toolkit(matrix: Matrix) -> None:
    installed = env(
        "2.9.1+cu128",
        "12.8",
        ("deepspeed", "0.16.4"),
        nvcc=(Nvcc(path="/usr/local/cuda-12.1/bin/nvcc", version="12.1.105", origin="CUDA_HOME"),),
    )
    machine = target("530.30.02", (12, 1), (8, 0))
    finding = only(audit(installed, machine, matrix), "minor-compat-only")
    pins = _pins(finding)
    assert pins and all(pin.endswith("+cu121") for pin in pins), finding.fix
    # The fix rebuilds DeepSpeed against the new torch, with the release it had.
    assert any(
        "--no-build-isolation" in line and "deepspeed==0.16.4" in line for line in finding.fix
    )


def test_leftover_nvidia_packages_of_another_cuda_are_part_of_the_fix(matrix: Matrix) -> None:
    installed = env(
        "2.9.1+cu128", "12.8", ("nvidia-cublas-cu12", "12.8.4.1"), ("nvidia-nccl-cu12", "2.27.5")
    )
    # Driver 525.60.13 supports CUDA 12.0: under strict the newest build it runs is cu118.
    machine = target("525.60.13", (12, 0), (8, 0))
    finding = only(audit(installed, machine, matrix), "minor-compat-only")
    assert _pins(finding) and all("+cu11" in pin for pin in _pins(finding)), finding.fix
    assert any(
        line.startswith("/env/bin/python -m pip uninstall -y nvidia-cublas-cu12 nvidia-nccl-cu12")
        for line in finding.fix
    ), finding.fix


def test_no_cpu_build_is_offered_where_the_driver_is_not_named(matrix: Matrix) -> None:
    installed = Installed(
        source="report:llamafactory-cli env",
        python_version="3.11.9",
        platform="linux-x86_64",
        torch=(TorchInstall(version="2.6.0+cu124", cuda="12.4", location="report"),),
        deepspeed=DeepSpeedBuild(
            version="0.16.4", torch_version="2.6", torch_cuda="11.8", installed_ops=("fused_adam",)
        ),
    )
    gpu = Target(
        platform="linux-x86_64",
        gpus=(Gpu(name="NVIDIA GeForce RTX 5070 Ti", compute_capability=(12, 0)),),
        name="the machine in the report",
        source="report",
    )
    findings = audit(installed, gpu, matrix, driver_known=False)
    assert "deepspeed-cuda-mismatch" in {f.code for f in findings}
    assert not any("+cpu" in line for f in findings for line in f.fix), [f.fix for f in findings]


def test_a_local_version_is_never_pinned_for_pypi(matrix: Matrix) -> None:
    installed = env(
        "2.3.0+cu121",
        "12.1",
        deepspeed=DeepSpeedBuild(version="0.15.5+46d7d0d1", torch_version="0.0", torch_cuda="0.0"),
    )
    finding = only(
        audit(installed, target("550.54.15", (12, 4), (8, 0)), matrix),
        "deepspeed-built-without-torch",
    )
    command = next(line for line in finding.fix if "--no-build-isolation" in line)
    assert command.endswith(" deepspeed") and "0.15.5" not in command


def test_a_replacement_that_still_leaves_an_error_is_not_offered(matrix: Matrix) -> None:
    from cudalock.audit.checks import apply_plan
    from cudalock.resolve import make_request, resolve

    # The build resolve chooses for this driver is cu121 (its own CUDA 12); with an nvcc 11.8
    # and DeepSpeed it would leave nvcc-mismatch (another major), so the fix is not it: the
    # checked fix follows the toolkit (cu118) and audits clean.
    installed = env(
        "2.9.1+cu128",
        "12.8",
        ("deepspeed", "0.16.4"),
        nvcc=(Nvcc(path="/usr/local/cuda/bin/nvcc", version="11.8.89", origin="CUDA_HOME"),),
    )
    machine = target("530.30.02", (12, 1), (8, 0))
    plain = resolve(matrix, [machine], make_request(with_packages=["none"]))
    assert plain.variant == "cu121"
    from cudalock.audit.checks import _Context

    context = _Context(installed, machine, matrix, True, "strict")
    applied, _commands = apply_plan(context, plain)
    assert "nvcc-mismatch" in {f.code for f in audit(applied, machine, matrix)}
    finding = only(audit(installed, machine, matrix), "minor-compat-only")
    assert not any(pin.endswith("+cu121") for pin in _pins(finding))
    assert any(pin.endswith("+cu118") for pin in _pins(finding))


def test_a_pasted_error_line_is_evidence_of_the_finding_a_check_already_made(
    matrix: Matrix,
) -> None:
    line = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."
    installed = env(
        "2.9.1+cu128",
        "12.8",
        messages=(ReportedMessage("driver-too-old", line, (("found", "12020"),)),),
    )
    findings = audit(installed, target("535.104.05", (12, 2), (8, 0)), matrix)
    assert [f.code for f in findings if f.severity == "error"] == ["minor-compat-only"]
    assert f"pasted: {line}" in only(findings, "minor-compat-only").evidence


def test_an_arch_warning_without_a_driver_says_where_builds_for_the_gpu_begin(
    matrix: Matrix,
) -> None:
    # "Which PyTorch version would fit an H100?" (guoqincode/Open-AnimateAnyone#114): torch
    # 2.0.0's cu117 build stops at sm_86, its cu118 build has sm_90.
    report = parse_report(
        "NVIDIA H100 PCIe with CUDA capability sm_90 is not compatible with the current "
        "PyTorch installation.\n"
    )
    finding = only(
        audit(report.installed, report_target(report, matrix), matrix), "gpu-arch-unsupported"
    )
    assert finding.fix[0] == (
        "# of torch 1.13–2.15 (the releases cudalock knows), the first with kernels for compute "
        "capability 9.0 is 2.0.0+cu118: CUDA 11.8, a driver ≥ 520.61.05"
    )
    assert finding.fix[1].startswith("# paste 'nvidia-smi'")


def test_a_gpu_no_build_has_kernels_for_is_not_sent_for_its_driver(matrix: Matrix) -> None:
    # pytorch/pytorch#6515: torch's older warning names a GeForce 820M of capability 2.1.
    report = parse_report(
        "UserWarning:\n    Found GPU0 GeForce 820M which is of cuda capability 2.1.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n"
        "THCudaCheck FAIL error = 48: no kernel image is available for execution on the device\n"
    )
    assert [(g.name, g.compute_capability) for g in report.gpus] == [("GeForce 820M", (2, 1))]
    finding = only(
        audit(report.installed, report_target(report, matrix), matrix), "gpu-arch-unsupported"
    )
    assert finding.fix == (
        "# no CUDA build of torch 1.13–2.15 (the releases cudalock knows) has kernels for "
        "compute capability 2.1: this GPU cannot run them, only a CPU build of torch runs here",
    )


def test_an_extension_built_without_the_gpus_architecture_is_named_not_torch(
    matrix: Matrix,
) -> None:
    # facebookresearch/detectron2#251: detectron2's ops built for sm_70 only, on Tesla P40s.
    report = parse_report(
        "detectron2 arch flags   sm_70\nGPU 0,1     Tesla P40\n"
        "error in modulated_deformable_col2im_cuda: no kernel image is available for execution "
        "on the device\n"
    )
    finding = only(
        audit(report.installed, report_target(report, matrix), matrix), "gpu-arch-unsupported"
    )
    assert finding.severity == "error"
    assert finding.message.startswith("detectron2's own compiled ops were built for compute")
    assert any("no kernel image" in line for line in finding.evidence)
    assert 'TORCH_CUDA_ARCH_LIST="6.1;7.0"' in finding.fix[0]


def test_an_extension_whose_ptx_may_cover_a_newer_gpu_is_a_warning(matrix: Matrix) -> None:
    report = parse_report("detectron2 arch flags   7.0\nGPU 0       NVIDIA A100 (arch=8.0)\n")
    finding = only(
        audit(report.installed, report_target(report, matrix), matrix), "gpu-arch-unsupported"
    )
    assert finding.severity == "warning"
    assert "unless they also carry PTX" in finding.message
