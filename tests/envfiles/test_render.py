"""render: Plan + options → file texts (pure). Checked with the tools that consume the files:
PyYAML, conda-lock's own parser, tomllib, bash -n and shellcheck."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cudalock.defaults import OutputFormat
from cudalock.envfiles.render import (
    RenderOptions,
    build_script,
    check_env_name,
    install_steps,
    output_files,
    render_files,
    torch_family,
    yaml_scalar,
)
from cudalock.errors import UsageError
from cudalock.lock import Closure
from cudalock.lock.uvinput import LockInput
from cudalock.model import Gpu, PackagePin, Plan, Target
from cudalock.request import Framework, parse_framework
from cudalock.tomlfile import tomllib
from cudalock.versions import DriverVersion

PT = "https://download.pytorch.org/whl"
SHELLCHECK = Path(sys.executable).with_name("shellcheck")


def frameworks(*texts: str) -> tuple[Framework, ...]:
    """Frameworks as ``--framework`` gives them."""
    return tuple(parse_framework(text) for text in texts)


def make_plan(
    *,
    variant: str = "cu121",
    cuda: tuple[int, int] | None = (12, 1),
    deepspeed: str | None = None,
    python: str = "3.11",
    platform: str = "linux-x86_64",
) -> Plan:
    index = f"{PT}/{variant}"
    label = f"+{variant}"
    packages = [
        PackagePin("torch", f"2.1.0{label}", index),
        PackagePin("torchvision", f"0.16.0{label}", index),
    ]
    if deepspeed:
        packages.append(PackagePin("deepspeed", deepspeed, None))
    target = Target(
        platform=platform,
        driver_version=DriverVersion("535.104.05"),
        driver_cuda=(12, 2),
        gpus=(Gpu("NVIDIA A100-SXM4-80GB", (8, 0)),),
    )
    return Plan(
        matrix_version="2026-11-29",
        python=python,
        platform=platform,
        compat="strict",
        torch_version="2.1.0",
        variant=variant,
        cuda=cuda,
        cudnn=None,
        index_url=index,
        packages=tuple(packages),
        targets=(target,),
    )


# --------------------------------------------------------------------------------------------
# environment.yml and the conda-lock form


def test_environment_yml_pins_python_and_its_pip_section_is_the_hashed_lock() -> None:
    text = render_files(make_plan(), RenderOptions(name="ft"))["environment.yml"]
    document = yaml.safe_load(text)
    assert document["name"] == "ft"
    assert document["channels"] == ["conda-forge"]
    deps = document["dependencies"]
    assert deps[:2] == ["python=3.11", "pip"]
    # pip checks every file against the lock's hashes: nothing outside the closure comes in.
    assert {"pip": ["-r requirements.lock.txt"]} in deps
    # No compilers unless DeepSpeed ops are built.
    assert not any("nvcc" in str(d) for d in deps)
    assert "--override-channels" in text


def test_deepspeed_on_cuda12_brings_conda_forges_toolkit_of_the_same_cuda() -> None:
    files = render_files(make_plan(deepspeed="0.15.1"), RenderOptions(name="ft"))
    document = yaml.safe_load(files["environment.yml"])
    deps = document["dependencies"]
    assert document["channels"] == ["conda-forge"]
    # conda-forge's own DeepSpeed recipe builds against these -dev packages.
    for package in ("cuda-nvcc", "libcublas-dev", "libcurand-dev", "libcusolver-dev"):
        assert package in deps
    assert "libcusparse-dev" in deps and "cuda-profiler-api" in deps
    assert "cuda-version=12.1" in deps
    # __cuda matters: the file says how to solve on a machine without the target's driver.
    assert "CONDA_OVERRIDE_CUDA=12.2 conda env create" in files["environment.yml"]


def test_deepspeed_on_cuda11_needs_a_system_toolkit_and_brings_no_compiler() -> None:
    plan = make_plan(variant="cu118", cuda=(11, 8), deepspeed="0.15.1")
    text = render_files(plan, RenderOptions(name="ft"))["environment.yml"]
    document = yaml.safe_load(text)
    assert document["channels"] == ["conda-forge"]
    assert not any("cuda" in str(d) for d in document["dependencies"] if isinstance(d, str))
    assert "a system toolkit of CUDA 11.8 is needed" in text


def test_flash_attn_brings_the_toolkit_and_says_when_it_compiles() -> None:
    plan = make_plan(variant="cu118", cuda=(11, 8))
    with_flash_attn = replace(
        plan, packages=(*plan.packages, PackagePin("flash-attn", "2.8.3", None))
    )
    text = render_files(with_flash_attn, RenderOptions(name="ft"))["environment.yml"]
    assert (
        "flash-attn compiles its kernels when no prebuilt wheel fits against a CUDA 11.8 "
        "toolkit, which conda-forge does not have: a system toolkit of CUDA 11.8 is needed"
    ) in text
    cuda12 = make_plan()
    cuda12 = replace(cuda12, packages=(*cuda12.packages, PackagePin("flash-attn", "2.8.3", None)))
    deps = yaml.safe_load(render_files(cuda12, RenderOptions(name="ft"))["environment.yml"])
    assert "cuda-nvcc" in deps["dependencies"] and "cuda-version=12.1" in deps["dependencies"]


def test_cpu_plan_has_no_compilers_even_with_deepspeed() -> None:
    plan = make_plan(variant="cpu", cuda=None, deepspeed="0.15.1")
    environment_yml = render_files(plan, RenderOptions(name="ft"))["environment.yml"]
    deps = yaml.safe_load(environment_yml)["dependencies"]
    assert not any("cuda" in str(d) for d in deps if not isinstance(d, dict))


def _conda_lock_parse(path: Path, tmp_path: Path) -> object:
    from conda_lock.src_parser.environment_yaml import parse_environment_file

    mapping = tmp_path / "mapping.json"  # conda-lock would otherwise download its name mapping
    mapping.write_text("{}")
    return parse_environment_file(path, ["linux-64"], mapping_url=str(mapping))


def test_conda_lock_form_is_accepted_by_conda_lock(tmp_path: Path) -> None:
    files = render_files(
        make_plan(), RenderOptions(name="ft", pypi_index="https://m.example/simple")
    )
    path = tmp_path / "environment.conda-lock.yml"
    path.write_text(files["environment.conda-lock.yml"])
    spec = _conda_lock_parse(path, tmp_path)
    assert [r.url for r in spec.pip_repositories] == [  # type: ignore[attr-defined]
        "https://download.pytorch.org/whl/cu121",
        "https://m.example/simple",
    ]
    pins = {
        d.name: d.version
        for d in spec.dependencies["linux-64"]  # type: ignore[attr-defined]
        if d.manager == "pip"
    }
    assert pins == {"torch": "==2.1.0+cu121", "torchvision": "==0.16.0+cu121"}
    assert yaml.safe_load(files["environment.conda-lock.yml"])["allow-pypi-requests"] is False


def _closure_of(packages: list[dict[str, object]]) -> Closure:
    """A resolved closure as uv's pylock.toml gives it (``packages`` as PEP 751 entries)."""
    data = {"lock-version": "1.0", "created-by": "uv", "packages": packages}
    inp = LockInput(
        requirements=("torch==2.1.0+cu121",),
        routes=(),
        default_index="https://pypi.org/simple",
        python="3.11",
        platform="linux-x86_64",
        python_platform="x86_64-manylinux_2_28",
    )
    family = (PackagePin("torch", "2.1.0+cu121", index_url=f"{PT}/cu121"),)
    return Closure(input=inp, uv_data=data, uv_version="0.9", family=family, frameworks=())


def test_conda_lock_form_routes_only_the_pytorch_index_packages_to_it(tmp_path: Path) -> None:
    torch_wheel = "torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl"
    closure = _closure_of(
        [
            {
                "name": "torch",
                "version": "2.1.0+cu121",
                "index": f"{PT}/cu121",
                "wheels": [
                    {
                        "name": "torch-2.1.0+cu121-cp310-cp310-linux_x86_64.whl",
                        "url": f"{PT}/cu121/torch-2.1.0%2Bcu121-cp310-cp310-linux_x86_64.whl",
                        "hashes": {"sha256": "0" * 64},
                    },
                    {
                        "name": torch_wheel,
                        "url": f"{PT}/cu121/torch-2.1.0%2Bcu121-cp311-cp311-linux_x86_64.whl",
                        "hashes": {"sha256": "a" * 64},
                    },
                ],
            },
            {
                "name": "filelock",
                "version": "3.13.1",
                "index": "https://pypi.org/simple",
                "wheels": [
                    {
                        "name": "filelock-3.13.1-py3-none-any.whl",
                        "url": "https://files.example/filelock-3.13.1-py3-none-any.whl",
                        "hashes": {"sha256": "b" * 64},
                    }
                ],
            },
        ]
    )
    files = render_files(make_plan(), RenderOptions(name="ft", closure=closure))
    path = tmp_path / "environment.conda-lock.yml"
    path.write_text(files["environment.conda-lock.yml"])
    spec: Any = _conda_lock_parse(path, tmp_path)
    assert spec.pip_repositories == []  # the PyTorch index offers nothing else
    pip = {d.name: d for d in spec.dependencies["linux-64"] if d.manager == "pip"}
    assert sorted(pip) == ["filelock", "torch"]
    assert pip["torch"].url == f"{PT}/cu121/torch-2.1.0%2Bcu121-cp311-cp311-linux_x86_64.whl"
    assert pip["torch"].hashes == ["sha256:" + "a" * 64]
    assert pip["filelock"].version == "==3.13.1"


def test_plain_environment_yml_is_what_conda_lock_rejects(tmp_path: Path) -> None:
    # Why the conda-lock form exists: option lines in pip: are not requirements to conda-lock.
    from packaging.requirements import InvalidRequirement

    path = tmp_path / "environment.yml"
    path.write_text(render_files(make_plan(), RenderOptions(name="ft"))["environment.yml"])
    with pytest.raises(InvalidRequirement):
        _conda_lock_parse(path, tmp_path)


# --------------------------------------------------------------------------------------------
# install.sh


def _write_script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "install.sh"
    path.write_text(text)
    return path


def _lint(path: Path) -> None:
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run(
        [str(SHELLCHECK), str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    "framework",
    [
        None,
        "llamafactory==0.9.5",
        "git+https://github.com/hiyouga/LlamaFactory@v0.9.5",
        "/srv/my fw/$(touch pwned); `id` 'q\" x",
    ],
)
@pytest.mark.parametrize("deepspeed", [None, "0.15.1"])
def test_install_sh_passes_bash_n_and_shellcheck(
    tmp_path: Path, framework: str | None, deepspeed: str | None
) -> None:
    options = RenderOptions(
        name="ft",
        output_format="venv",
        frameworks=frameworks(framework) if framework else (),
        pypi_index="https://u:tok@m.example/simple",
    )
    text = render_files(make_plan(deepspeed=deepspeed), options)["install.sh"]
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    _lint(_write_script(tmp_path, text))


def test_install_steps_order_and_guard_rails() -> None:
    local = "/srv/LLaMA-Factory"
    options = RenderOptions(
        name="ft",
        output_format="venv",  # conda adds the CUDA activation step (tested below)
        frameworks=frameworks("transformers[torch]", local),
        pypi_index="https://m.example/simple",
    )
    steps = install_steps(make_plan(deepspeed="0.15.1"), options)
    pip = [step.argv for step in steps]
    uv = [step.command("uv") for step in steps]
    # 1. a local framework, editable and without dependencies (the lock holds them); a
    #    requirement framework is in the lock and gets no step of its own.
    assert pip[0][-3:] == ("--no-deps", "-e", local) or pip[0][-2:] == ("-e", local)
    assert "--no-deps" in pip[0] and "--no-deps" in uv[0]
    assert not any("transformers[torch]" in argv for argv in pip)
    # 2. the locked closure: pip hash-checks every file and resolves nothing; uv installs the
    #    exact files of pylock.toml less what step 3 builds against the torch (uv would build
    #    DeepSpeed from pylock.toml itself, and step 3 again).
    assert pip[1][-2:] == ("-r", "requirements.lock.txt")
    assert {"--no-deps", "--require-hashes"} <= set(pip[1])
    assert pip[1][pip[1].index("--index-url") + 1] == "https://m.example/simple"
    assert pip[1][pip[1].index("--extra-index-url") + 1] == f"{PT}/cu121"
    assert uv[1][:5] == ("$UV", "pip", "install", "--python", "$PYTHON")
    assert uv[1][-2:] == ("-r", "pylock.first.toml")
    assert uv[1][uv[1].index("--config-file") + 1] == "uv-install.toml"
    # 3. DeepSpeed last, against the installed torch, by the build script (no build isolation;
    #    wheels kept by the exact torch build): tests/e2e/test_bootstrap_wheel_cache.py.
    assert steps[2].only_if == "grep -q '^[A-Za-z0-9]' requirements.last.txt"
    assert pip[2][:3] == uv[2][:3] == ("$PYTHON", "-c", build_script())
    assert pip[2][3:] == (
        "pip",
        "",
        "requirements.last.txt",
        "--index-url",
        "https://m.example/simple",
    )
    assert uv[2][3:] == (
        "uv",
        "$UV",
        "requirements.last.txt",
        "--index-url",
        "https://m.example/simple",
    )
    # 4. the check, then the verification (torch's version file, not an import).
    assert pip[3][1:] == ("-m", "pip", "check") and uv[3][1:3] == ("pip", "check")
    assert pip[-1][1] == "-c" and pip[-1][3:] == (
        "12.1",
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
        "--locked",
        "requirements.lock.txt",
        "requirements.last.txt",
    )
    assert "import torch" not in pip[-1][2]


def test_vcs_frameworks_come_before_the_lock_with_their_credentials() -> None:
    # pylock.toml records a VCS URL without its token; installed first from the URL as given,
    # the locked commit is there before uv reads the lock.
    bare = "git+https://alice:TOKEN@git.example/org/fw.git@v1"
    named = "otherkit @ git+https://alice:TOKEN@git.example/org/other.git@v2"
    options = RenderOptions(name="ft", frameworks=frameworks(bare, "peft", named))
    steps = install_steps(make_plan(), options)
    for installer in ("pip", "uv"):
        commands = [step.command(installer) for step in steps]
        assert commands[0][-2:] == ("--no-deps", bare)
        assert commands[1][-2:] == ("--no-deps", named)
        assert commands[2][-1] in ("requirements.lock.txt", "pylock.first.toml")
        assert not any("peft" in argv for argv in commands)
    assert steps[0].title.startswith("the framework git+https://***@git.example/org/fw.git@v1")
    assert "TOKEN" not in steps[1].title


def test_local_framework_path_is_installed_editable_and_quoted(tmp_path: Path) -> None:
    hostile = "/srv/my fw/$(touch pwned); `id` 'q\" x"
    options = RenderOptions(name="ft", output_format="venv", frameworks=frameworks(hostile))
    text = render_files(make_plan(), options)["install.sh"]
    quoted = "'/srv/my fw/$(touch pwned); `id` '\"'\"'q\" x'"
    assert f"-e {quoted}" in text
    # bash reads the quoted word back as exactly the path, executing nothing.
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert echoed.stdout == hostile
    assert not (tmp_path / "pwned").exists()


def test_verification_step_fails_on_a_different_torch(tmp_path: Path) -> None:
    # Run the rendered verification against a fake site with a version file like the real one.
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    from tests.support.wheels import torch_version_file

    (site / "torch" / "version.py").write_text(torch_version_file("2.15.0", "13.2"))
    step = install_steps(make_plan(), RenderOptions(name="ft"))[-1]
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, *step.argv[1:3], "12.1", "torch==2.1.0+cu121"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert "torch is 2.15.0" in result.stderr and "planned 2.1.0+cu121" in result.stderr
    assert "CUDA 13.2, planned 12.1" in result.stderr

    (site / "torch" / "version.py").write_text(torch_version_file("2.1.0+cu121", "12.1"))
    ok = subprocess.run(
        [sys.executable, *step.argv[1:3], "12.1", "torch==2.1.0+cu121"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "verified torch 2.1.0+cu121 (CUDA 12.1)" in ok.stdout


def _fake_site(site: Path, installed: dict[str, str], torch_info: str | None = None) -> None:
    """A site directory with these distributions, torch's version file and, for DeepSpeed,
    the build info its setup.py writes."""
    from tests.support.wheels import torch_version_file

    for name, version in installed.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(
        torch_version_file(installed["torch"], "12.1" if "+cu121" in installed["torch"] else None)
    )
    if torch_info is not None:
        (site / "deepspeed").mkdir()
        (site / "deepspeed" / "git_version_info_installed.py").write_text(
            f"version='0.15.1'\ntorch_info={torch_info}\n"
        )


def _verify(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    step = install_steps(make_plan(), RenderOptions(name="ft"))[-1]
    return subprocess.run(
        [sys.executable, *step.argv[1:3], *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=site,
        check=False,
    )


GOOD = {"torch": "2.1.0+cu121", "torchvision": "0.16.0+cu121", "deepspeed": "0.15.1"}
BUILT_AGAINST_2_1 = "{'version': '2.1', 'cuda_version': '12.1', 'hip_version': '0.0'}"


def test_verification_checks_deepspeed_family_labels_and_every_locked_version(
    tmp_path: Path,
) -> None:
    (tmp_path / "requirements.lock.txt").write_text(
        "--index-url https://pypi.org/simple\n"
        "torch==2.1.0+cu121 \\\n    --hash=sha256:aa\n"
        "torchvision==0.16.0+cu121 \\\n    --hash=sha256:bb\n"
    )
    (tmp_path / "requirements.last.txt").write_text("deepspeed==0.15.1 \\\n  --hash=sha256:cc\n")
    locked = ("--locked", "requirements.lock.txt", "requirements.last.txt")
    pins = ("12.1", "torch==2.1.0+cu121")

    good = tmp_path / "good"
    _fake_site(good, GOOD, BUILT_AGAINST_2_1)
    for name in locked[1:]:
        (good / name).write_text((tmp_path / name).read_text())
    ok = _verify(good, *pins, *locked)
    assert ok.returncode == 0, ok.stderr
    assert "verified torch 2.1.0+cu121 (CUDA 12.1), 3 locked packages" in ok.stdout

    # DeepSpeed built in isolation (torch "0.0"), a torchvision of another build, a locked
    # package that is missing: each is named.
    bad = tmp_path / "bad"
    _fake_site(
        bad,
        {"torch": "2.1.0+cu121", "torchvision": "0.16.0", "deepspeed": "0.15.1"},
        "{'version': '0.0', 'cuda_version': '0.0', 'hip_version': '0.0'}",
    )
    (bad / "requirements.lock.txt").write_text((tmp_path / "requirements.lock.txt").read_text())
    (bad / "requirements.last.txt").write_text(
        "deepspeed==0.16.0 --hash=sha256:cc\npeft==1 --hash=sha256:dd\n"
    )
    failed = _verify(bad, *pins, *locked)
    assert failed.returncode == 1
    problems = [
        line.removeprefix("cudalock: verification failed: ") for line in failed.stderr.splitlines()
    ]
    assert problems == [
        "torchvision 0.16.0 is not a +cu121 build like torch 2.1.0+cu121",
        "deepspeed is 0.15.1, locked 0.16.0",
        "peft 1 is locked but not installed",
        "torchvision is 0.16.0, locked 0.16.0+cu121",
        "DeepSpeed was built against torch 0.0, the installed torch is 2.1",
        "DeepSpeed was built against CUDA 0.0, torch's is 12.1",
    ]


def test_verification_reads_every_kind_of_installed_metadata(tmp_path: Path) -> None:
    # The headers are read as text, as importlib.metadata would find them: a dist-info whose
    # directory name is not the header's spelling, a legacy egg-info directory and an egg-info
    # file (setup.py develop, old distutils); the headers end at the first blank line.
    site = tmp_path / "site"
    _fake_site(site, GOOD, BUILT_AGAINST_2_1)
    odd = site / "Foo_Bar-1.0.dist-info"
    odd.mkdir()
    (odd / "METADATA").write_text("Metadata-Version: 2.1\nName: foo.bar\nVersion: 1.0\n\nName: x\n")
    (site / "legacy.egg-info").mkdir()
    (site / "legacy.egg-info" / "PKG-INFO").write_text(
        "Metadata-Version: 1.0\nName: legacy\nVersion: 2\n"
    )
    (site / "single-3-py3.11.egg-info").write_text(
        "Metadata-Version: 1.1\nName: single\nVersion: 3\n"
    )
    (site / "requirements.lock.txt").write_text(
        "torch==2.1.0+cu121 --hash=sha256:aa\nfoo-bar==1.0 --hash=sha256:bb\n"
        "legacy==2 --hash=sha256:cc\nsingle==3.0 --hash=sha256:dd\n"
    )
    done = _verify(site, "12.1", "torch==2.1.0+cu121", "--locked", "requirements.lock.txt")
    assert done.returncode == 0, done.stderr
    assert "4 locked packages" in done.stdout


def _install_sh(tmp_path: Path, *, with_lock: bool) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "install.sh").write_text(
        render_files(make_plan(), RenderOptions(name="ft", output_format="venv"))["install.sh"]
    )
    if with_lock:
        for name in (
            "pylock.toml",
            "pylock.first.toml",
            "uv-install.toml",
            "requirements.last.txt",
        ):
            (out / name).write_text("# Generated by cudalock\n")
        (out / "requirements.lock.txt").write_text("torch==2.1.0+cu121 --hash=sha256:aa\n")
    return out / "install.sh"


def test_install_sh_without_the_lock_says_how_to_make_it(tmp_path: Path) -> None:
    script = _install_sh(tmp_path, with_lock=False)
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode == 1
    assert f"pylock.toml is missing in {script.parent}: run 'cudalock lock -o {script.parent}'" in (
        " ".join(done.stderr.split())
    )


def test_install_sh_takes_a_relative_python_from_where_it_is_started(tmp_path: Path) -> None:
    _install_sh(tmp_path, with_lock=True)
    calls = tmp_path / "calls"
    fake = tmp_path / "env" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", "out/install.sh"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "env/bin/python", "CUDALOCK_INSTALLER": "pip"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"installing with pip into {fake}" in done.stdout
    recorded = calls.read_text().splitlines()
    assert recorded[0].startswith("-m pip install --no-input --no-deps --require-hashes")
    # Nothing in requirements.last.txt: no DeepSpeed step ran.
    assert "nothing in the closure is built against torch" in done.stdout
    assert not [line for line in recorded if "--no-build-isolation" in line]


# --------------------------------------------------------------------------------------------
# constraints.txt, requirements.txt, uv


def test_constraints_are_exactly_the_torch_family() -> None:
    text = render_files(make_plan(deepspeed="0.15.1"), RenderOptions(name="ft"))["constraints.txt"]
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert pins == ["torch==2.1.0+cu121", "torchvision==0.16.0+cu121"]


def test_venv_format_writes_requirements_and_install_sh() -> None:
    files = render_files(make_plan(), RenderOptions(name="ft", output_format="venv"))
    assert set(files) == {"requirements.txt", "install.sh", "constraints.txt"}
    lines = [
        line for line in files["requirements.txt"].splitlines() if line and not line.startswith("#")
    ]
    assert lines == [
        "--index-url https://download.pytorch.org/whl/cu121",
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
    ]


def test_uv_pyproject_routes_the_family_to_an_explicit_index() -> None:
    options = RenderOptions(
        name="ft",
        output_format="uv",
        frameworks=frameworks("llamafactory==0.9.5"),
        pypi_index="https://m.example/simple",
    )
    files = render_files(make_plan(deepspeed="0.15.1"), options)
    assert set(files) == {"pyproject.toml", "constraints.txt"}
    document = tomllib.loads(files["pyproject.toml"])
    assert document["project"]["requires-python"] == "==3.11.*"
    assert document["project"]["dependencies"] == [
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
        "deepspeed==0.15.1",
        "llamafactory==0.9.5",
    ]
    indexes = document["tool"]["uv"]["index"]
    assert indexes[0] == {"name": "pytorch-cu121", "url": f"{PT}/cu121", "explicit": True}
    assert indexes[1] == {"name": "pypi-mirror", "url": "https://m.example/simple", "default": True}
    sources = document["tool"]["uv"]["sources"]
    assert sources == {
        name: {"index": "pytorch-cu121"} for name in ("torch", "torchaudio", "torchvision")
    }
    # DeepSpeed's build environment holds the planned torch, so it records that torch.
    assert document["tool"]["uv"]["extra-build-dependencies"] == {
        "deepspeed": ["torch==2.1.0+cu121"]
    }
    assert document["tool"]["uv"]["environments"] == [
        "sys_platform == 'linux' and platform_machine == 'x86_64'"
    ]


def test_uv_pyproject_is_accepted_by_uv(tmp_path: Path) -> None:
    # uv itself parses the file: `uv lock` with no network fails resolving, not parsing.
    (tmp_path / "pyproject.toml").write_text(
        render_files(make_plan(), RenderOptions(name="ft", output_format="uv"))["pyproject.toml"]
    )
    uv = Path(sys.executable).with_name("uv")
    from tests.support.index import offline_env

    result = subprocess.run(
        [str(uv), "lock", "--offline"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=offline_env(),
        check=False,
    )
    assert "failed to parse" not in result.stderr.lower(), result.stderr
    assert "TOML parse error" not in result.stderr, result.stderr


def test_rendering_is_deterministic() -> None:
    options = RenderOptions(name="ft", frameworks=frameworks("x==1", "y"))
    assert render_files(make_plan(), options) == render_files(make_plan(), options)


def test_torch_family_puts_torch_first() -> None:
    assert [p.name for p in torch_family(make_plan(deepspeed="0.1"))] == ["torch", "torchvision"]


# --------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("name", ["ft", "torch-2.1.0-cu121", "my_env.2", "A1"])
def test_valid_env_names(name: str) -> None:
    assert check_env_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a b",
        "a/b",
        "a:b",
        "a#b",
        "base",
        "root",
        "-x",
        "$(touch pwned)",
        "a;b",
        "x\ny",
        "é",
        "a" * 65,
    ],
)
def test_invalid_env_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="invalid environment name"):
        check_env_name(name)


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40))
def test_yaml_scalar_reads_back_as_the_same_string(text: str) -> None:
    loaded = yaml.safe_load(f"- {yaml_scalar(text)}\n")
    assert loaded == [text]


def test_yaml_scalar_keeps_ordinary_values_plain() -> None:
    assert (
        yaml_scalar("--index-url https://download.pytorch.org/whl/cu121")
        == "--index-url https://download.pytorch.org/whl/cu121"
    )
    assert yaml_scalar("torch==2.1.0+cu121") == "torch==2.1.0+cu121"
    assert yaml_scalar("yes") == json.dumps("yes")
    assert yaml_scalar("3.10") == json.dumps("3.10")


def test_install_sh_points_torchs_extension_builder_at_conda_forges_cuda(
    tmp_path: Path,
) -> None:
    plan = make_plan(deepspeed="0.15.1")
    steps = install_steps(plan, RenderOptions(name="ft"))
    (step,) = [s for s in steps if "conda-forge's CUDA layout" in s.title]
    assert steps.index(step) == 1  # after the locked closure, before DeepSpeed
    assert not [
        s
        for s in install_steps(plan, RenderOptions(name="ft", output_format="venv"))
        if "conda-forge" in s.title
    ]
    prefix = tmp_path / "env"
    (prefix / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    script = [sys.executable, "-c", step.argv[2], *step.argv[3:]]
    subprocess.run(script, check=True, env={"CONDA_PREFIX": str(prefix)}, capture_output=True)
    shell = (
        'export CPATH=/opt/include; . "$P/etc/conda/activate.d/cudalock-cuda.sh"; '
        'echo "$CUDA_HOME|$CUDA_INC_PATH|$CPATH|$LIBRARY_PATH"; '
        '. "$P/etc/conda/deactivate.d/cudalock-cuda.sh"; echo "$CPATH|${CUDA_HOME-unset}"'
    )
    shown = subprocess.run(
        ["bash", "-c", shell],
        env={"P": str(prefix), "CONDA_PREFIX": str(prefix), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    include = f"{prefix}/targets/x86_64-linux/include"
    assert shown == [
        f"{prefix}|{include}|{include}:/opt/include|{prefix}/targets/x86_64-linux/lib",
        "/opt/include|unset",
    ]


def test_install_sh_installs_without_the_callers_uv_and_pip_sources(tmp_path: Path) -> None:
    _install_sh(tmp_path, with_lock=True)
    seen = tmp_path / "seen"
    fake = tmp_path / "env" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\nenv >> {seen}\n")
    fake.chmod(0o755)
    sources = {
        "UV_FIND_LINKS": "https://elsewhere.example/wheels",
        "UV_EXTRA_INDEX_URL": "https://elsewhere.example/simple",
        "PIP_INDEX_URL": "https://elsewhere.example/simple",
        "PIP_FIND_LINKS": "/tmp/planted",
    }
    done = subprocess.run(
        ["bash", "out/install.sh"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON": "env/bin/python",
            "CUDALOCK_INSTALLER": "pip",
            **sources,
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr
    recorded = seen.read_text()
    assert "PYTHON" not in sources and "PATH=" in recorded
    assert [name for name in sources if f"{name}=" in recorded] == []


@pytest.mark.parametrize("output_format", ["conda", "venv", "uv", "pixi"])
def test_output_files_names_what_render_files_writes(output_format: OutputFormat) -> None:
    options = RenderOptions(name="ft", output_format=output_format)
    assert output_files(output_format) == tuple(render_files(make_plan(), options))
