"""The compatibility matrix: the sourced facts in ``compat_matrix/``, loaded and typed.

``cudalock.matrix.check`` holds the cross-file rules, ``cudalock.matrix.show`` the table people
read and ``cudalock.matrix.refresh`` the update from PyPI and the PyTorch index.
"""

from cudalock.matrix.load import default_matrix_dir, load_matrix, matrix_dir_from
from cudalock.matrix.model import (
    CudaToolkit,
    DeepSpeedRelease,
    GpuModel,
    Matrix,
    Provenance,
    TorchBuild,
    TorchRelease,
)

__all__ = [
    "CudaToolkit",
    "DeepSpeedRelease",
    "GpuModel",
    "Matrix",
    "Provenance",
    "TorchBuild",
    "TorchRelease",
    "default_matrix_dir",
    "load_matrix",
    "matrix_dir_from",
]
