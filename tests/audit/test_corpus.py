"""The corpus of real reports (tests/fixtures/corpus, command = "audit") through the real CLI.

Each case is what someone pasted into a public thread, with the cause the thread established:
``cudalock audit --report PASTE ARGS --json`` must report the codes the cause means, none of the
codes the case rules out, no error for a healthy control, and every fix it prints, applied to
the environment the paste describes, must leave an environment that audits without an error.
The fixes are applied here, by reading the printed commands as pip, conda and the shell would,
so that what cudalock prints is checked rather than what it meant.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cudalock
from tests.support.corpus import Case, corpus_cases

CASES = corpus_cases("audit")


def _audit(paste: Path, args: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    result = cudalock("audit", "--report", paste, *args, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_the_corpus_holds_the_cases_the_issue_asks_for() -> None:
    controls = [case for case in CASES if case.control]
    assert len(CASES) >= 55
    assert len(controls) >= 15


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case_is_diagnosed_with_its_cause(case: Case) -> None:
    status, document = _audit(case.paste, case.args)
    codes = {finding["code"] for finding in document["findings"]}
    errors = {f["code"] for f in document["findings"] if f["severity"] == "error"}
    assert case.expect <= codes, f"{case.source}: {case.cause}; got {sorted(codes)}"
    assert not case.absent & codes, f"{case.source}: false alarm {sorted(case.absent & codes)}"
    if case.control:
        assert not errors, f"{case.source}: a healthy report got {sorted(errors)}"
        assert status == 0
    else:
        assert status == (1 if errors else 0)


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.control], ids=[c.name for c in CASES if not c.control]
)
def test_every_fix_printed_applied_to_the_case_audits_clean(case: Case, tmp_path: Path) -> None:
    _status, document = _audit(case.paste, case.args)
    environment = _Environment.from_json(document["installed"])
    applied: list[str] = []
    driver: str | None = None
    for finding in document["findings"]:
        done = [line for line in finding["fix"] if environment.apply(line)]
        applied += done
        upgrade = next((m for line in finding["fix"] if (m := _DRIVER_UPGRADE.search(line))), None)
        if not done and upgrade:  # the fix is a driver upgrade: judge on the upgraded driver
            driver = upgrade.group(1)
            applied.append(upgrade.group(0))
    if not applied:
        return  # nothing but advice: there is no command to check
    fixed = tmp_path / "fixed.txt"
    fixed.write_text(environment.report(), encoding="utf-8")
    args = list(case.args)
    if driver is not None:
        args = [*_without_flag(args, "--driver-version"), "--driver-version", driver]
        args = _without_flag(args, "--driver-cuda")
    target = document["target"]
    if target["driver_cuda"] and "--driver-cuda" not in args and "--driver-version" not in args:
        args += ["--driver-cuda", target["driver_cuda"]]
    if target["driver_version"] and "--driver-version" not in args:
        args += ["--driver-version", target["driver_version"]]
    if "--gpu" not in args:
        for gpu in target["gpus"]:
            if gpu["compute_capability"]:
                args += ["--gpu", gpu["name"], "--compute-capability", gpu["compute_capability"]]
                break
    _after_status, after = _audit(fixed, tuple(args))
    errors = [f for f in after["findings"] if f["severity"] == "error"]
    assert not errors, (
        f"{case.name}: the fix {applied} leaves {[f['code'] for f in errors]}:\n"
        + environment.report()
    )


_DRIVER_UPGRADE = re.compile(r"upgrade the NVIDIA driver to ≥ (\d[\d.]*)")


def _without_flag(args: list[str], flag: str) -> list[str]:
    """``args`` without ``flag`` and its value."""
    if flag not in args:
        return args
    at = args.index(flag)
    return args[:at] + args[at + 2 :]


@dataclass
class _Package:
    name: str
    version: str
    #: The conda build string for a conda package, None for pip's.
    conda_build: str | None = None


@dataclass
class _Environment:
    """The environment a paste describes, as the fix commands change it."""

    packages: list[_Package]
    torch: str | None
    torch_cuda: str | None
    nvcc: str | None
    deepspeed: str | None
    deepspeed_built: tuple[str, str] | None
    ops: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, installed: dict[str, Any]) -> _Environment:
        torch = installed["torch"][0] if installed["torch"] else None
        ds = installed["deepspeed"]
        built = (ds["torch_version"], ds["torch_cuda"]) if ds and ds["has_build_info"] else None
        nvcc = installed["nvcc"][0]["version"] if installed["nvcc"] else None
        packages = []
        for dist in installed["distributions"]:
            location = dist["location"] or ""
            conda = location.startswith("report:[conda]") and not location.endswith("pypi")
            if dist["version"]:
                build = location.split("] ", 1)[1] if conda else None
                packages.append(_Package(dist["name"], dist["version"], build))
        return cls(
            packages=packages,
            torch=torch["version"] if torch else None,
            torch_cuda=torch["cuda"] if torch else None,
            nvcc=nvcc,
            deepspeed=ds["version"] if ds else None,
            deepspeed_built=built,
            ops=list(ds["installed_ops"]) if ds else [],
        )

    def _remove(self, name: str, *, conda: bool) -> None:
        for package in self.packages:
            if package.name == name and (package.conda_build is not None) == conda:
                self.packages.remove(package)
                return
        if not conda:  # pip also removes what conda installed
            for package in self.packages:
                if package.name == name:
                    self.packages.remove(package)
                    return

    def _torch_after(self) -> None:
        """The torch import finds: pip's, else conda's, else none."""
        for conda in (False, True):
            for package in self.packages:
                if package.name == "torch" and (package.conda_build is not None) == conda:
                    if package.version != self.torch:
                        self.torch = package.version
                        self.torch_cuda = _label_cuda(package.version)
                    return
        self.torch = self.torch_cuda = None

    def apply(self, line: str) -> bool:
        """Make the change ``line`` makes (True: it is a command, not advice)."""
        command = line.split("   #", 1)[0].strip()
        if not command or command.startswith("#"):
            return False
        words = shlex.split(command)
        if words[0] == "cudalock":
            return False  # how to audit again with more facts: advice
        if words[:2] == ["unset", "LD_LIBRARY_PATH"] or words[:1] == ["export"]:
            if words[:1] == ["export"] and words[1].startswith("CUDA_HOME=/usr/local/cuda-"):
                self.nvcc = words[1].rsplit("-", 1)[1]
            return True
        if words[:2] == ["conda", "install"]:
            if "cuda-nvcc" in words:
                self.nvcc = self.torch_cuda
            return True
        if words[:2] == ["conda", "remove"]:
            for name in (w for w in words[2:] if not w.startswith("-")):
                self._remove({"pytorch": "torch"}.get(name, name), conda=True)
            self._torch_after()
            return True
        if "pip" not in words:
            raise AssertionError(f"a fix line that is neither advice nor a command: {line!r}")
        verb = words[words.index("pip") + 1]
        names = [w for w in words[words.index("pip") + 2 :] if not w.startswith("-")]
        if "--index-url" in words:
            names.remove(words[words.index("--index-url") + 1])
        if verb == "uninstall":
            for name in names:
                self._remove(name, conda=False)
            self._torch_after()
            return True
        assert verb == "install", line
        for requirement in names:
            name, _, version = requirement.partition("==")
            if "--no-build-isolation" in words:  # built here, against the torch installed now
                self._rebuilt(name, version)
                continue
            assert version, f"an install that pins nothing: {line!r}"
            assert "+" not in version or "--index-url" in words, (
                f"a local label from PyPI: {line!r}"
            )
            self._remove(name, conda=False)
            self.packages.append(_Package(name, version))
            if name == "torch":
                self.torch, self.torch_cuda = version, _label_cuda(version)
        return True

    def _rebuilt(self, name: str, version: str) -> None:
        if version:
            self._remove(name, conda=False)
            self.packages.append(_Package(name, version))
        if name == "deepspeed" and self.torch:
            self.deepspeed = version or self.deepspeed
            if self.deepspeed_built is not None:
                major_minor = ".".join(self.torch.split("+")[0].split(".")[:2])
                self.deepspeed_built = (major_minor, self.torch_cuda or "0.0")

    def report(self) -> str:
        """The environment as a collect_env + ds_report paste."""
        lines = []
        if self.torch:
            lines.append(f"PyTorch version: {self.torch}")
            lines.append(f"CUDA used to build PyTorch: {self.torch_cuda or 'None'}")
        lines.append("Versions of relevant libraries:")
        for package in self.packages:
            if package.conda_build is not None:
                name = {"torch": "pytorch", "torch-nightly": "pytorch-nightly"}.get(
                    package.name, package.name
                )
                lines.append(f"[conda] {name}    {package.version}    {package.conda_build}    x")
            else:
                lines.append(f"[pip3] {package.name}=={package.version}")
        if self.deepspeed_built is not None or self.nvcc:
            lines.append("DeepSpeed general environment info:")
            if self.nvcc:
                lines.append(f"nvcc version ..................... {self.nvcc}")
        if self.deepspeed_built is not None:
            torch_mm, cuda = self.deepspeed_built
            lines.append(f"deepspeed info ................... {self.deepspeed}, unknown, unknown")
            lines.append(f"deepspeed wheel compiled w. ...... torch {torch_mm}, cuda {cuda}")
            lines += [f"{op} ............ [YES] ...... [OKAY]" for op in self.ops]
        return "\n".join(lines) + "\n"


def _label_cuda(version: str) -> str | None:
    """ "2.5.1+cu121" → "12.1"; no CUDA label → None."""
    label = version.partition("+")[2]
    if not (label.startswith("cu") and label[2:].isdigit()):
        return None
    return f"{label[2:-1]}.{label[-1]}"
