"""The shipped matrix says what the sources say. Expected values are copied by hand from
the sources each matrix entry cites (NVIDIA Table 3, the PyPI wheels, pytorch/pytorch
release matrices).

Each test names the releases it is about, so a release added later changes none of them; the
rules every matrix keeps, whatever it holds, are in tests/support/invariants.py."""

from __future__ import annotations

import pytest
from packaging.version import Version

from cudalock.errors import UsageError
from cudalock.machine import gpu_model_named
from cudalock.matrix import TorchBuild, load_matrix
from cudalock.versions import DriverVersion

MATRIX = load_matrix()

TORCH_RELEASES = [
    "1.13.0",
    "1.13.1",
    "2.0.0",
    "2.0.1",
    "2.1.0",
    "2.1.1",
    "2.1.2",
    "2.2.0",
    "2.2.1",
    "2.2.2",
    "2.3.0",
    "2.3.1",
    "2.4.0",
    "2.4.1",
    "2.5.0",
    "2.5.1",
    "2.6.0",
    "2.7.0",
    "2.7.1",
    "2.8.0",
    "2.9.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.0",
    "2.12.1",
    "2.13.0",
    "2.14.0",
    "2.14.1",
    "2.15.0",
]


def build(version: str, variant: str, platform: str = "linux-x86_64") -> TorchBuild | None:
    release = MATRIX.torch_release(version)
    assert release is not None, version
    return next(
        (b for b in release.builds if b.variant == variant and platform in b.platforms), None
    )


def test_every_release_from_1_13_to_2_15_is_present() -> None:
    known = [r.version for r in MATRIX.torch_releases if r.version in TORCH_RELEASES]
    assert known == TORCH_RELEASES
    assert MATRIX.torch_releases[0].version == "1.13.0"
    assert MATRIX.schema_version == 1 and MATRIX.matrix_version >= "2026-11-30"


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("535.104.05", (12, 2)),  # 12.2 Update 2 GA driver
        ("535.54.03", (12, 2)),
        ("530.30.02", (12, 1)),
        ("570.26", (12, 8)),
        ("570.86.15", (12, 8)),
        ("580.65.06", (13, 0)),
        ("595.45.04", (13, 2)),
        ("440.33", (10, 2)),  # Table 3, CUDA 10.2.89
        ("418.39", (10, 1)),
        ("384.81", (9, 0)),
        ("367.48", (8, 0)),
        ("367.47", None),
    ],
)
def test_max_cuda_for_linux_driver(driver: str, cuda: tuple[int, int] | None) -> None:
    assert MATRIX.max_cuda_for_driver(DriverVersion(driver), "linux-x86_64") == cuda


def test_minor_version_compatibility_floors() -> None:
    floors = {m.major: str(m.minor_compat_linux) for m in MATRIX.majors}
    assert floors == {11: "450.80.02", 12: "525.60.13", 13: "580"}


def test_unverified_toolkits_stay_unverified() -> None:
    unverified = {t.version for t in MATRIX.toolkits if not t.provenance.verified}
    assert unverified >= {"13.3.0", "13.3.1", "13.4.1", "13.5"}


def test_blackwell_and_pascal_builds() -> None:
    cu128 = build("2.11.0", "cu128")
    assert cu128 is not None and (12, 0) in cu128.sass and (7, 0) not in cu128.sass
    for version in ("2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"):
        assert build(version, "cu128") is None, version
    for version in ("2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.13.0", "2.14.0", "2.14.1"):
        cu126 = build(version, "cu126")
        assert cu126 is not None, version
        assert cu126.sass == ((5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0))
    fifteen = MATRIX.torch_release("2.15.0")
    assert fifteen is not None
    assert {b.variant for b in fifteen.builds if b.cuda} == {"cu130", "cu132"}
    assert min(b.cuda for b in fifteen.builds if b.cuda) == (13, 0)


def test_pypi_default_builds() -> None:
    expected = {
        "1.13.1": "cu117",
        "2.0.1": "cu117",
        "2.1.0": "cu121",
        "2.4.1": "cu121",
        "2.5.0": "cu124",
        "2.6.0": "cu124",
        "2.7.0": "cu126",
        "2.8.0": "cu128",
        "2.10.0": "cu128",
        "2.11.0": "cu130",
        "2.14.1": "cu130",
        "2.15.0": "cu132",
    }
    for version, variant in expected.items():
        release = MATRIX.torch_release(version)
        assert release is not None
        assert release.pypi_default["linux-x86_64"] == variant, version
        assert release.pypi_default["windows-x86_64"] == "cpu"
    eleven = MATRIX.torch_release("2.11.0")
    ten = MATRIX.torch_release("2.10.0")
    assert eleven is not None and ten is not None
    assert eleven.pypi_default["linux-aarch64"] == "cu130"
    assert ten.pypi_default["linux-aarch64"] == "cpu"


def test_torchaudio_ends_with_2_11() -> None:
    for version in TORCH_RELEASES:
        release = MATRIX.torch_release(version)
        assert release is not None
        major_minor = tuple(int(p) for p in release.version.split(".")[:2])
        if (2, 12) <= major_minor < (2, 15):
            assert release.torchaudio is None, release.version
            assert release.provenance.note and "torchaudio" in release.provenance.note
        else:
            assert release.torchaudio is not None, release.version
    fifteen = MATRIX.torch_release("2.15.0")
    assert fifteen is not None and fifteen.torchvision == "0.29.2"
    assert fifteen.torchaudio == "2.11.1"
    assert not fifteen.provenance.field_verified("torchvision")
    assert not fifteen.provenance.field_verified("torchaudio")


@pytest.mark.parametrize(
    ("nvml_name", "model", "cc"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100", (9, 0)),
        ("Tesla V100-SXM2-32GB", "Tesla V100", (7, 0)),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", (8, 9)),
        ("NVIDIA GeForce RTX 5090", "GeForce RTX 5090", (12, 0)),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100", (8, 0)),
        ("NVIDIA A10G", "NVIDIA A10 / A10G", (8, 6)),
        ("NVIDIA H200", "NVIDIA H200", (9, 0)),
        ("NVIDIA H20", "NVIDIA H20", (9, 0)),
        ("NVIDIA L40S", "NVIDIA L40S", (8, 9)),
        ("NVIDIA L4", "NVIDIA L4", (8, 9)),
        ("NVIDIA B200", "NVIDIA B200", (10, 0)),
        ("NVIDIA GeForce GTX 1080 Ti", "GeForce GTX 1080 Ti", (6, 1)),
        ("Tesla T4", "Tesla T4", (7, 5)),
        # Four generations share "6000": the longest match string keeps them apart.
        ("Quadro RTX 6000", "Quadro RTX 6000", (7, 5)),
        ("NVIDIA RTX A6000", "NVIDIA RTX A6000", (8, 6)),
        ("NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada Generation", (8, 9)),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell", (12, 0)),
        (
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell",
            (12, 0),
        ),
        ("Quadro RTX 4000 with Max-Q Design", "Quadro RTX 4000", (7, 5)),
        ("NVIDIA RTX 4000 SFF Ada Generation", "NVIDIA RTX 4000 Ada Generation", (8, 9)),
        ("NVIDIA RTX PRO 4000 Blackwell SFF Edition", "NVIDIA RTX PRO 4000 Blackwell", (12, 0)),
        ("NVIDIA RTX PRO 5000 72GB Blackwell", "NVIDIA RTX PRO 5000 Blackwell", (12, 0)),
        ("Quadro RTX 5000", "Quadro RTX 5000", (7, 5)),
        ("NVIDIA RTX 5000 Ada Generation Laptop GPU", "NVIDIA RTX 5000 Ada Generation", (8, 9)),
        # Ti and SUPER beat the plain model; Laptop GPU and Max-Q names land on the model.
        ("NVIDIA GeForce RTX 3080", "GeForce RTX 3080", (8, 6)),
        ("NVIDIA GeForce RTX 3080 Ti", "GeForce RTX 3080 Ti", (8, 6)),
        ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", "GeForce RTX 3080 Ti", (8, 6)),
        ("NVIDIA GeForce RTX 3090 Ti", "GeForce RTX 3090 Ti", (8, 6)),
        ("NVIDIA GeForce RTX 3060", "GeForce RTX 3060", (8, 6)),
        ("NVIDIA GeForce RTX 3050Ti Laptop GPU", "GeForce RTX 3050 Ti Laptop GPU", (8, 6)),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "GeForce RTX 4070 Ti SUPER", (8, 9)),
        ("NVIDIA GeForce RTX 4070 SUPER", "GeForce RTX 4070 SUPER", (8, 9)),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "GeForce RTX 4060", (8, 9)),
        ("NVIDIA GeForce RTX 4090 D", "GeForce RTX 4090", (8, 9)),
        ("NVIDIA GeForce RTX 5070", "GeForce RTX 5070", (12, 0)),
        ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "GeForce RTX 5070 Ti", (12, 0)),
        ("NVIDIA GeForce RTX 5060", "GeForce RTX 5060", (12, 0)),
        ("NVIDIA GeForce RTX 2070", "GeForce RTX 2070", (7, 5)),
        ("NVIDIA GeForce RTX 2080 Super with Max-Q Design", "GeForce RTX 2080", (7, 5)),
        ("NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti", (7, 5)),
        ("NVIDIA GeForce GTX 1660 SUPER", "GeForce GTX 1660", (7, 5)),
        ("NVIDIA GeForce GTX 1650 Ti with Max-Q Design", "GeForce GTX 1650 Ti", (7, 5)),
        ("NVIDIA GeForce GTX 1060 6GB", "GeForce GTX 1060", (6, 1)),
        # The RTX 2050 is an Ampere part despite its 20-series name.
        ("NVIDIA GeForce RTX 2050", "GeForce RTX 2050", (8, 6)),
        # A10G is the A10's AWS variant; neither is an A100.
        ("NVIDIA A10", "NVIDIA A10 / A10G", (8, 6)),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100", (8, 0)),
        ("NVIDIA A2", "NVIDIA A2", (8, 6)),
        ("NVIDIA A16", "NVIDIA A16", (8, 6)),
        ("NVIDIA RTX A2000 12GB", "NVIDIA RTX A2000", (8, 6)),
        ("NVIDIA RTX A4000", "NVIDIA RTX A4000", (8, 6)),
        ("NVIDIA L40", "NVIDIA L40", (8, 9)),
        ("NVIDIA L20", "NVIDIA L20", (8, 9)),
        ("NVIDIA H100 PCIe", "NVIDIA H100", (9, 0)),
        ("NVIDIA H100 NVL", "NVIDIA H100", (9, 0)),
        ("NVIDIA H200 NVL", "NVIDIA H200", (9, 0)),
        ("NVIDIA GH200 480GB", "NVIDIA GH200", (9, 0)),
        ("NVIDIA GH200 144G HBM3e", "NVIDIA GH200", (9, 0)),
        ("NVIDIA H20-3e", "NVIDIA H20", (9, 0)),
        ("Tesla P4", "Tesla P4", (6, 1)),
        ("Tesla P40", "Tesla P40", (6, 1)),
        ("NVIDIA TITAN Xp", "NVIDIA TITAN Xp", (6, 1)),
        ("NVIDIA TITAN X (Pascal)", "NVIDIA TITAN X (Pascal)", (6, 1)),
        ("NVIDIA TITAN RTX", "NVIDIA TITAN RTX", (7, 5)),
    ],
)
def test_gpu_names(nvml_name: str, model: str, cc: tuple[int, int]) -> None:
    # NVML names as NVIDIA's driver spells them (NVIDIA/open-gpu-kernel-modules README).
    gpu = MATRIX.gpu_by_name(nvml_name)
    assert gpu is not None and (gpu.name, gpu.compute_capability) == (model, cc)


@pytest.mark.parametrize(
    "nvml_name",
    [
        "GeForce GTX TITAN X",  # Maxwell, 5.2: not the Pascal TITAN X
        "NVIDIA RTX 6000D",
        "NVIDIA RTX 2000E Ada Generation",
        "NVIDIA RTX A4500",
        "NVIDIA L2",
    ],
)
def test_gpus_without_a_read_source_are_not_matched(nvml_name: str) -> None:
    assert MATRIX.gpu_by_name(nvml_name) is None


@pytest.mark.parametrize(
    ("name", "model"),
    [("NVIDIA A1000", None), ("Tesla V100S-PCIE-32GB", "Tesla V100"), ("NVIDIA L40", "NVIDIA L40")],
)
def test_a_match_string_followed_by_a_digit_names_another_model(
    name: str, model: str | None
) -> None:
    # "NVIDIA A100" in "NVIDIA A1000" is a prefix of another model number; a letter after it
    # (V100S) is a variant of the same chip.
    gpu = MATRIX.gpu_by_name(name)
    assert (gpu.name if gpu else None) == model


def test_an_unknown_model_number_is_not_taken_for_a_shorter_one() -> None:
    with pytest.raises(UsageError, match="unknown GPU 'A1000'"):
        gpu_model_named("A1000", MATRIX)


@pytest.mark.parametrize(
    ("written", "model"),
    [
        # --gpu A3000 is looked up as "NVIDIA A3000" first: "NVIDIA A30" (8.0) followed by a
        # digit is another model.
        ("A3000", "NVIDIA RTX A3000 Laptop GPU"),
        ("A4000", "NVIDIA RTX A4000"),
        ("A2000", "NVIDIA RTX A2000"),
        ("A5000", "NVIDIA RTX A5000"),
        ("A30", "NVIDIA A30"),
        ("A40", "NVIDIA A40"),
        ("A2", "NVIDIA A2"),
        ("A10G", "NVIDIA A10 / A10G"),
        ("3080 Ti", "GeForce RTX 3080 Ti"),
        ("RTX3080Ti", "GeForce RTX 3080 Ti"),
        ("3080", "GeForce RTX 3080"),
        ("4070 Ti SUPER", "GeForce RTX 4070 Ti SUPER"),
        ("RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation"),
        ("Quadro RTX 6000", "Quadro RTX 6000"),
        ("RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell"),
        ("L40S", "NVIDIA L40S"),
        ("L40", "NVIDIA L40"),
        ("H200", "NVIDIA H200"),
        ("H20", "NVIDIA H20"),
        ("GH200", "NVIDIA GH200"),
        ("P4", "Tesla P4"),
        ("P40", "Tesla P40"),
        ("1660", "GeForce GTX 1660"),
        ("5070", "GeForce RTX 5070"),
        ("Jetson Orin Nano", "Jetson AGX Orin / Orin NX / Orin Nano"),
        ("Jetson AGX Xavier", "Jetson AGX Xavier / Xavier NX"),
    ],
)
def test_gpu_names_on_the_command_line(written: str, model: str) -> None:
    assert gpu_model_named(written, MATRIX).name == model


def test_deepspeed_releases_and_cuda_check() -> None:
    from packaging.specifiers import SpecifierSet

    versions = [r.version for r in MATRIX.deepspeed]
    # Every release from 0.14.0 to 0.19.8 (47 of them, each read from its sdist).
    read = [v for v in versions if Version(v) <= Version("0.19.8")]
    assert read[0] == "0.14.0" and read[-1] == "0.19.8" and len(read) == 47
    ds_0_19_8 = next(r for r in MATRIX.deepspeed if r.version == "0.19.8")
    assert ds_0_19_8.torch == ">=2.0.0" and ds_0_19_8.date == "2026-10-20"
    assert next(r for r in MATRIX.deepspeed if r.version == "0.19.0").torch == ""

    def twelve(version: str) -> tuple[tuple[int, int], ...]:
        (rule,) = [
            c for c in MATRIX.deepspeed_cuda_checks if SpecifierSet(c.deepspeed).contains(version)
        ]
        assert 13 not in rule.minor_mismatch_ok
        return rule.minor_mismatch_ok[12]

    # The allow-list grew within minor series (read from the sdists): 12.9 arrived in 0.17.2.
    assert (12, 9) not in twelve("0.17.1") and (12, 9) in twelve("0.17.2")
    assert (12, 8) in twelve("0.16.4") and (12, 8) not in twelve("0.16.3")
    assert twelve("0.14.2")[-1] == (12, 3) and twelve("0.14.3")[-1] == (12, 5)
    assert (12, 7) not in twelve("0.19.8")


def test_2_7_cu128_carries_ptx_for_12_0_on_linux_x86_64() -> None:
    # Users' torch.cuda.get_arch_list() of 2.7.1+cu128 ends in compute_120; pytorch/pytorch
    # PR #157516 removed +PTX from the 12.8 builds for 2.8 on.
    for version in ("2.7.0", "2.7.1"):
        cu128 = build(version, "cu128")
        assert cu128 is not None and cu128.ptx == ((12, 0),), version
        assert cu128.sass == ((7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0))
    for version in ("2.8.0", "2.9.0", "2.10.0"):
        later = build(version, "cu128")
        assert later is not None and later.ptx == (), version


def test_aarch64_cuda_builds_of_2_7_and_2_8() -> None:
    # The cu128 index lists torch-2.7.0+cu128-*-manylinux_2_28_aarch64 wheels (uv#13195); the
    # 2.7-cycle sbsa builds target 9.0, 10.0 and 12.0 (pytorch/pytorch PR #146378).
    for version in ("2.7.0", "2.7.1"):
        cu128 = build(version, "cu128", "linux-aarch64")
        assert cu128 is not None, version
        assert cu128.sass == ((9, 0), (10, 0), (12, 0))
        assert (7, 0) not in cu128.sass
        # Only 2.7.0's file names have been read from the index.
        expected_status = "verified" if version == "2.7.0" else "unverified"
        assert cu128.provenance.status == expected_status, version
    # 2.8's sbsa build is CUDA 12.9 (PR #162364 later replaced it with 12.6 and 12.8).
    cu129 = build("2.8.0", "cu129", "linux-aarch64")
    assert cu129 is not None and cu129.cuda == (12, 9)
    assert cu129.provenance.status == "unverified"


def test_cuda_13_0_compiles_for_8_8() -> None:
    (thirteen,) = [a for a in MATRIX.arch_support if a.cuda == (13, 0)]
    assert (8, 8) in thirteen.sass and (7, 0) not in thirteen.sass


def test_no_linux_aarch64_cuda_build_ships_sm_70() -> None:
    # The V100 note: aarch64 builds start at 8.0 or 9.0, cu126 included.
    for release in MATRIX.torch_releases:
        for b in release.builds:
            if b.kind == "cuda" and "linux-aarch64" in b.platforms:
                assert (7, 0) not in b.sass, (release.version, b.variant)
    v100 = MATRIX.gpu_by_name("Tesla V100-SXM2-32GB")
    assert v100 is not None and v100.provenance.note is not None
    assert "every linux-aarch64 CUDA build" in v100.provenance.note
