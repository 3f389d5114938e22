"""Audit: packages whose version label names the torch they were built against.

PyG's extension wheels (torch-scatter, torch-sparse, torch-cluster, torch-spline-conv, pyg-lib)
carry it: ``torch_scatter-2.1.2+pt21cu121`` is built against torch 2.1 with CUDA 12.1, served
from ``https://data.pyg.org/whl/torch-2.1.0+cu121.html``, the page PyG's install guide names
for every torch 2.1.x (https://pytorch-geometric.readthedocs.io/en/latest/install/
installation.html; https://github.com/pyg-team/pyg-lib README: ``${TORCH}`` is ``2.1.0``, …).
Beside another torch minor their compiled ops fail with undefined symbols
or crash (-11); torch_scatter's own import check refuses another CUDA major
(rusty1s/pytorch_scatter, torch_scatter/__init__.py: ``if t_major != major``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from cudalock.audit.installed import Distribution, Installed, local_label, public_version
from cudalock.model import Finding
from cudalock.versions import CudaVersion, cuda_from_variant, parse_cuda_version

__all__ = ["check_torch_labels", "wheels_fix"]

#: ``pt21cu121``, ``pt113cu117``, ``pt211cu128``, ``pt20cpu``: torch's major is one digit.
_LABEL = re.compile(r"pt(?P<major>\d)(?P<minor>\d{1,2})(?P<variant>cu\d{2,4}|cpu)")
_PYG_WHEELS = "https://data.pyg.org/whl"


@dataclass(frozen=True)
class _Labelled:
    dist: Distribution
    torch: tuple[int, int]
    cuda: CudaVersion | None  # None: a CPU build


def _labelled(dist: Distribution) -> _Labelled | None:
    match = _LABEL.fullmatch(local_label(dist.version) or "")
    if match is None:
        return None
    torch = (int(match["major"]), int(match["minor"]))
    return _Labelled(dist, torch, cuda_from_variant(match["variant"]))


def check_torch_labels(installed: Installed) -> list[Finding]:
    """``extension-abi-mismatch`` for the labelled packages built against another torch minor,
    ``cuda-build-mismatch`` for those of another CUDA major than torch's (one finding each,
    naming every such package, with PyG's wheels for the installed torch as the fix)."""
    torch = installed.active_torch
    if torch is None or not torch.version or torch.hip:
        return []
    release = tuple(int(part) for part in public_version(torch.version).split(".")[:2])
    torch_cuda = parse_cuda_version(torch.cuda) if torch.cuda else None
    variant = local_label(torch.version) or (
        f"cu{torch_cuda[0]}{torch_cuda[1]}" if torch_cuda else "cpu"
    )
    other_torch: list[_Labelled] = []
    other_cuda: list[_Labelled] = []
    for dist in installed.distributions:
        labelled = _labelled(dist)
        if labelled is None:
            continue
        if labelled.torch != release:
            other_torch.append(labelled)
        elif (
            labelled.cuda is not None
            and torch.cuda_known
            and (torch_cuda is None or labelled.cuda[0] != torch_cuda[0])
        ):
            other_cuda.append(labelled)
    findings = []
    for code, found, what in (
        ("extension-abi-mismatch", other_torch, "another torch"),
        ("cuda-build-mismatch", other_cuda, "another CUDA major than torch's"),
    ):
        if not found:
            continue
        names = [item.dist.name for item in found]
        built = ", ".join(
            f"{item.dist.name} {item.dist.version} (torch {item.torch[0]}.{item.torch[1]}, "
            + (f"CUDA {item.cuda[0]}.{item.cuda[1]})" if item.cuda else "CPU)")
            for item in found
        )
        findings.append(
            Finding(
                code=code,
                severity="error",
                message=(
                    f"{built} {'is' if len(found) == 1 else 'are'} built against {what}, as "
                    f"{'its' if len(found) == 1 else 'their'} version label says; this torch is "
                    f"{torch.version}: the compiled ops fail to load (undefined symbols) or "
                    "crash with a segfault (-11)"
                ),
                evidence=(
                    *(f"{item.dist.name} {item.dist.version}: its label" for item in found),
                    f"torch {torch.version} (CUDA {torch.cuda or 'none'})",
                ),
                fix=wheels_fix(names, f"{release[0]}.{release[1]}", variant),
            )
        )
    return findings


def wheels_fix(names: list[str], release: str | None, variant: str) -> tuple[str, ...]:
    """PyG's wheels of ``names`` for torch ``release`` (``2.1``; None: not known) and
    ``variant`` (``cu121``), from its page alone (``--no-index``: PyPI has only sdists of
    them, which would build against whatever torch the build finds)."""
    names_text = " ".join(shlex.quote(name) for name in names)
    if release is None:
        return (
            f"# PyG's wheels for your torch with {variant}: find its version with "
            "python -c 'import torch; print(torch.__version__)', then, for torch X.Y:",
            f"# pip install --force-reinstall --no-deps --no-index {names_text} "
            f"-f {_PYG_WHEELS}/torch-X.Y.0+{variant}.html",
        )
    return (
        f"# PyG's wheels built against torch {release} ({variant}), where PyG publishes them "
        "for it; else build them against it (pip install --no-build-isolation)",
        f"pip install --force-reinstall --no-deps --no-index {names_text} "
        f"-f {_PYG_WHEELS}/torch-{release}.0+{variant}.html",
    )
