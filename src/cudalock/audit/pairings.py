"""Audit: packages built against one torch that declare no torch requirement (torchao) beside
a torch they do not work with, judged by the matrix's sourced pairings
(``torch_pairings.toml``, :mod:`cudalock.resolve.pairings`, the judgement ``lock`` makes)."""

from __future__ import annotations

from cudalock.audit.installed import Installed
from cudalock.matrix import Matrix
from cudalock.model import Finding
from cudalock.resolve.pairings import FINDING_CODE, fitting_releases

__all__ = ["check_torch_pairings"]


def check_torch_pairings(installed: Installed, matrix: Matrix) -> list[Finding]:
    """One ``torch-pairing-mismatch`` error per recorded release beside a torch it rejects."""
    torch = installed.active_torch
    if torch is None or not torch.version:
        return []
    findings = []
    for dist in installed.distributions:
        if not dist.version:
            continue
        pairing = matrix.pairing(dist.name, dist.version)
        if pairing is None or pairing.accepts(torch.version):
            continue
        fitting = fitting_releases(matrix, dist.name, torch.version)
        if fitting:
            fix: tuple[str, ...] = (f"pip install --no-deps '{dist.name}=={fitting[0]}'",)
        else:
            fix = (
                f"# no recorded {dist.name} release works with torch {torch.version}",
                f"pip uninstall -y {dist.name}",
            )
        status = "" if pairing.provenance.verified else ", a fact the matrix marks unverified"
        findings.append(
            Finding(
                code=FINDING_CODE,
                severity="error",
                message=(
                    f"{dist.name} {dist.version} works with {pairing.torch_text}; this torch is "
                    f"{torch.version}: its C++/CUDA extensions are built against another torch, "
                    "so it skips loading them (its kernels are missing) or, without a version "
                    "check, crashes loading them"
                ),
                evidence=(
                    f"{dist.name} {dist.version}: {pairing.read_from}{status}",
                    *(f"source: {source}" for source in pairing.provenance.source),
                    f"torch {torch.version}",
                ),
                fix=fix,
            )
        )
    return findings
