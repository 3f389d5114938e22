"""The environment: the files a Plan is written as (environment.yml, install.sh, requirements,
a uv project, cudalock.toml) and, with ``--create``, the environment built from them."""

from cudalock.env.bootstrap import BootstrapOptions, BootstrapResult, run_bootstrap
from cudalock.env.render import RenderOptions, render
from cudalock.env.spec import Inputs, Spec, read_inputs, read_spec

__all__ = [
    "BootstrapOptions",
    "BootstrapResult",
    "Inputs",
    "RenderOptions",
    "Spec",
    "read_inputs",
    "read_spec",
    "render",
    "run_bootstrap",
]
