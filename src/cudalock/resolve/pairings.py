"""Packages built against one torch that declare no torch requirement (torchao): which of their
releases fit a torch, from the matrix's sourced pairings (``torch_pairings.toml``). Pure.

``lock`` narrows such a package to the releases that accept the plan's torch (uv alone takes
the newest, torchao 0.18.0 for torch 2.7.1); ``audit`` reports an installed pair that does not
fit. Both judge by :meth:`cudalock.matrix.model.TorchPairing.accepts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from cudalock.matrix import Matrix
from cudalock.matrix.model import TorchPairing

__all__ = ["FINDING_CODE", "PairingFit", "fitting_releases", "pairing_fit"]

#: The finding code of an installed pair that does not fit (``audit``).
FINDING_CODE = "torch-pairing-mismatch"


@dataclass(frozen=True)
class PairingFit:
    """What the pairings of one package say for one torch."""

    #: The specifier that keeps only releases accepting the torch ("<0.13.0"): for uv.
    specifier: str
    #: The newest recorded release that accepts it; None when none does.
    newest: str | None
    #: The pairing of the release that was rejected, quoted as the evidence.
    rejected: TorchPairing


def fitting_releases(matrix: Matrix, name: str, torch_version: str) -> list[str]:
    """The recorded releases of ``name`` that accept ``torch_version``, newest first."""
    rows = sorted(matrix.pairings_of(name), key=lambda p: Version(p.version), reverse=True)
    return [p.version for p in rows if p.accepts(torch_version)]


def pairing_fit(matrix: Matrix, name: str, version: str, torch_version: str) -> PairingFit | None:
    """None when ``name`` ``version`` is not recorded or accepts ``torch_version``; else the
    specifier that keeps ``name`` to recorded releases accepting it: every recorded release that
    rejects it is excluded, and above the newest accepting one only unrecorded releases
    could remain, so the oldest rejecting release above it bounds the range. Where no recorded
    release accepts it, only releases older than the records remain (their pairing unknown)."""
    rejected = matrix.pairing(name, version)
    if rejected is None or rejected.accepts(torch_version):
        return None
    rows = sorted(matrix.pairings_of(name), key=lambda p: Version(p.version))
    accepting = [p for p in rows if p.accepts(torch_version)]
    if not accepting:
        return PairingFit(specifier=f"<{rows[0].version}", newest=None, rejected=rejected)
    newest = Version(accepting[-1].version)
    above = [p for p in rows if Version(p.version) > newest]
    parts = [f"<{above[0].version}"] if above else []
    parts += [
        f"!={p.version}.*"
        for p in rows
        if Version(p.version) < newest and not p.accepts(torch_version)
    ]
    return PairingFit(specifier=",".join(parts), newest=accepting[-1].version, rejected=rejected)
