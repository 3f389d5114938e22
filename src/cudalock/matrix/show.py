"""``cudalock matrix show``: the torch builds of the matrix as a table a person can read.

Pure: :func:`select_rows` filters a :class:`Matrix` by torch version, CUDA version, GPU and
platform; :func:`render_table` and :func:`rows_as_json` format the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from cudalock.matrix.model import Matrix, TorchBuild, TorchRelease, arch_covers
from cudalock.request import TorchSpec
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_cc,
    format_cuda,
)

__all__ = [
    "Row",
    "render_table",
    "rows_as_json",
    "select_rows",
]


@dataclass(frozen=True)
class Row:
    release: TorchRelease
    build: TorchBuild
    #: Lowest Linux / Windows driver for the build's CUDA version (None: CPU/ROCm or unknown).
    driver_linux: DriverVersion | None
    driver_windows: DriverVersion | None

    @property
    def pypi_default_on(self) -> tuple[str, ...]:
        return tuple(
            p
            for p in self.build.platforms
            if self.release.pypi_default.get(p) == self.build.variant
        )

    @property
    def unverified(self) -> tuple[str, ...]:
        """What of this row is not verified: the whole build, or some of its fields."""
        if not self.build.provenance.verified:
            return ("build",)
        return self.build.provenance.unverified_fields


def select_rows(
    matrix: Matrix,
    *,
    torch: TorchSpec | None = None,
    cuda: CudaVersion | None = None,
    gpu_cc: ComputeCapability | None = None,
    platform: str | None = None,
) -> list[Row]:
    """The builds that pass every given filter, newest torch first, then newest CUDA first."""
    rows = []
    for release in matrix.torch_releases:
        if torch is not None and not torch.admits(release.version):
            continue
        for build in release.builds:
            if cuda is not None and build.cuda != cuda:
                continue
            if gpu_cc is not None and not arch_covers(build.sass, build.ptx, gpu_cc):
                continue
            if platform is not None and platform not in build.platforms:
                continue
            rows.append(
                Row(
                    release=release,
                    build=build,
                    driver_linux=_driver(matrix, build, "linux-x86_64"),
                    driver_windows=_driver(matrix, build, "windows-x86_64"),
                )
            )
    rows.sort(key=lambda r: (Version(r.release.version), r.build.cuda or (0, 0)), reverse=True)
    return rows


def _driver(matrix: Matrix, build: TorchBuild, platform: str) -> DriverVersion | None:
    return matrix.min_driver_for_cuda(build.cuda, platform) if build.cuda else None


_COLUMNS = (
    "torch",
    "variant",
    "CUDA",
    "driver (linux)",
    "platforms",
    "SASS",
    "PTX",
    "PyPI default",
    "unverified",
)


def _cells(row: Row) -> tuple[str, ...]:
    build = row.build
    return (
        row.release.version,
        build.variant,
        format_cuda(build.cuda) if build.cuda else "-",
        f">= {row.driver_linux}" if row.driver_linux else "-",
        " ".join(build.platforms),
        " ".join(format_cc(cc) for cc in build.sass) or "-",
        " ".join(format_cc(cc) for cc in build.ptx) or "-",
        " ".join(row.pypi_default_on) or "-",
        ", ".join(row.unverified) or "-",
    )


def render_table(rows: list[Row]) -> str:
    """Aligned plain-text columns (no colours, so it pastes into an issue as is)."""
    table = [_COLUMNS] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def rows_as_json(rows: list[Row]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        build = row.build
        out.append(
            {
                "torch": row.release.version,
                "variant": build.variant,
                "cuda": format_cuda(build.cuda) if build.cuda else None,
                "cudnn": build.cudnn,
                "nccl": build.nccl,
                "driver_linux_min": str(row.driver_linux) if row.driver_linux else None,
                "driver_windows_min": str(row.driver_windows) if row.driver_windows else None,
                "platforms": list(build.platforms),
                "sass": [format_cc(cc) for cc in build.sass],
                "ptx": [format_cc(cc) for cc in build.ptx],
                "pypi_default_on": list(row.pypi_default_on),
                "status": build.provenance.status,
                "unverified": list(build.provenance.unverified_fields),
                "source": list(build.provenance.source),
            }
        )
    return out
