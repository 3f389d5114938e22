"""The environment: the files a Plan is written as (environment.yml, install.sh, requirements,
a uv project, cudalock.toml) and, with ``--create``, the environment built from them.

The names below are imported when first used: ``cudalock lock`` reads ``cudalock.toml`` through
this package and needs none of bootstrap's machinery (the audit, the renderers, YAML).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudalock.envfiles.bootstrap import BootstrapOptions, BootstrapResult, run_bootstrap
    from cudalock.envfiles.render import RenderOptions, render_files
    from cudalock.envfiles.spec import Inputs, Spec, read_inputs, read_spec

#: Each public name and the module that defines it.
_MODULES = {
    "BootstrapOptions": "bootstrap",
    "BootstrapResult": "bootstrap",
    "run_bootstrap": "bootstrap",
    "RenderOptions": "render",
    "render_files": "render",
    "Inputs": "spec",
    "Spec": "spec",
    "read_inputs": "spec",
    "read_spec": "spec",
}

__all__ = [
    "BootstrapOptions",
    "BootstrapResult",
    "Inputs",
    "RenderOptions",
    "Spec",
    "read_inputs",
    "read_spec",
    "render_files",
    "run_bootstrap",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
