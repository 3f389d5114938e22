"""flash-attn: the prebuilt wheel its setup.py takes for the installed torch, or a build.

flash-attn is published on PyPI as an sdist only. Built without build isolation after torch
(``BUILT_AGAINST_TORCH``), its ``setup.py`` first guesses the name of a wheel prebuilt for that
torch, CUDA, Python and C++ ABI on its GitHub releases and downloads it; only when there is
none does it compile its CUDA kernels, which needs an nvcc and can take an hour. The guess, as
Dao-AILab/flash-attention@ea6443c73202667d8dae67e7ba418f2e1ac5c647:setup.py
``get_wheel_url()`` makes it::

    flash_attn-{version}+cu{torch CUDA major}torch{torch major.minor}cxx11abi{TRUE|FALSE}
        -cp{py}-cp{py}-linux_{machine}.whl
    at https://github.com/Dao-AILab/flash-attention/releases/download/v{version}/

The C++ ABI is ``torch._C._GLIBCXX_USE_CXX11_ABI`` of the installed torch, which the lock does
not know: both names are looked up, and the note says which are published.
"""

from __future__ import annotations

import os

from packaging.version import InvalidVersion, Version

from cudalock.model import Plan
from cudalock.urls import redact
from cudalock.versions import format_cuda

__all__ = [
    "RELEASES",
    "flash_attn_note",
    "prebuilt_wheel_names",
    "published",
    "releases_base",
]

#: Where flash-attn publishes its prebuilt wheels (``CUDALOCK_FLASH_ATTN_RELEASES``: a mirror).
RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"


def prebuilt_wheel_names(version: str, torch_version: str, plan: Plan) -> tuple[str, ...]:
    """The wheel names flash-attn ``version``'s setup.py guesses for the plan's torch, one per
    C++ ABI; () where it guesses none (a CPU torch, a platform it builds for from source)."""
    if plan.cuda is None or not plan.platform.startswith("linux-"):
        return ()
    try:
        torch = Version(torch_version)
    except InvalidVersion:
        return ()
    python = "cp" + plan.python.rstrip("t").replace(".", "")
    machine = plan.platform.split("-", 1)[1]
    return tuple(
        f"flash_attn-{version}+cu{plan.cuda[0]}torch{torch.major}.{torch.minor}"
        f"cxx11abi{abi}-{python}-{python}-linux_{machine}.whl"
        for abi in ("TRUE", "FALSE")
    )


def releases_base(environ: dict[str, str] | None = None) -> str:
    return (
        (environ if environ is not None else dict(os.environ))
        .get("CUDALOCK_FLASH_ATTN_RELEASES", RELEASES)
        .rstrip("/")
    )


def published(url: str, timeout_s: float) -> bool | None:
    """Whether ``url`` answers (one byte of it); None when that cannot be told."""
    from cudalock import httpget  # http.client and urllib: only when asked

    try:
        httpget.get(url, timeout=timeout_s, limit=2**20, headers={"Range": "bytes=0-0"})
    except httpget.NotFound:
        return False
    except Exception:  # unreachable, refused, a mirror that says no: unknown, and said so
        return None
    return True


def flash_attn_note(version: str, plan: Plan, *, offline: bool, timeout_s: float) -> str:
    """What installing flash-attn ``version`` beside the plan's torch will do, in words."""
    torch = plan.torch_pin.version
    head = (
        f"flash-attn {version} is built last against torch {torch}, without build isolation "
        "(its setup.py imports torch)"
    )
    cuda = format_cuda(plan.cuda) if plan.cuda else None
    compile_note = (
        f"it compiles from source: that needs an nvcc of CUDA {cuda} (CUDA_HOME) and can take "
        "an hour"
        if cuda
        else "it compiles from source, without CUDA kernels for this torch"
    )
    names = prebuilt_wheel_names(version, torch, plan)
    if not names:
        return f"{head}; no prebuilt wheel is published for this platform or torch: {compile_note}"
    base = f"{releases_base()}/v{version}"
    if offline:
        return (
            f"{head}; its setup.py takes the prebuilt {names[0]} or {names[1]} (by torch's C++ "
            f"ABI) from {redact(base)} when published (not checked offline), else " + compile_note
        )
    found = {name: published(f"{base}/{name}", timeout_s) for name in names}
    there = [name for name, answer in found.items() if answer]
    unknown = [name for name, answer in found.items() if answer is None]
    if len(there) == len(names):
        return (
            f"{head}; its setup.py takes the prebuilt {there[0]} (or {there[1]}, by torch's "
            f"C++ ABI) from {redact(base)}"
        )
    if there:
        return (
            f"{head}; its setup.py takes the prebuilt {there[0]} from {redact(base)} when torch "
            f"was built with that C++ ABI; otherwise {compile_note}"
        )
    if unknown:
        return (
            f"{head}; whether {redact(base)} publishes {unknown[0]} could not be checked: if not, "
            + compile_note
        )
    return f"{head}; {redact(base)} publishes no {names[0]} nor {names[1]}: {compile_note}"
