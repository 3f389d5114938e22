"""The lock's files, what is built last against the installed torch, and how each installer
installs the lock: the names the lock, the closure and the rendered files share.
"""

from __future__ import annotations

__all__ = [
    "BUILD_REQUIREMENTS",
    "BUILT_AGAINST_TORCH",
    "INSTALL_LINES",
    "LAST_FILE",
    "LOCK_FILE",
    "LOCK_FILES",
    "PIP_FIRST",
    "PIP_LAST",
    "REQUIREMENTS_FILE",
    "UV_FIRST_FILE",
    "UV_SETTINGS_FILE",
]

LOCK_FILE = "pylock.toml"
REQUIREMENTS_FILE = "requirements.lock.txt"
#: DeepSpeed (and any other package built against the installed torch), installed last.
LAST_FILE = "requirements.last.txt"
#: The settings with which ``uv pip sync`` / ``uv pip install`` install ``pylock.toml``.
UV_SETTINGS_FILE = "uv-install.toml"
#: ``pylock.toml`` without what is built last: what install.sh installs first with uv (uv
#: installs every package of a pylock.toml, and would build DeepSpeed there, in isolation).
UV_FIRST_FILE = "pylock.first.toml"
LOCK_FILES = (LOCK_FILE, REQUIREMENTS_FILE, LAST_FILE, UV_SETTINGS_FILE, UV_FIRST_FILE)
#: Packages built against the installed torch, so installed after it without build isolation:
#: DeepSpeed records the torch it was built against (``git_version_info_installed.py``; built in
#: isolation it records none, torch "0.0"); flash-attn's setup.py imports torch, and takes the
#: prebuilt wheel for that torch, CUDA, Python and C++ ABI or compiles against it.
BUILT_AGAINST_TORCH = ("deepspeed", "flash-attn")
#: What each is built with besides torch, locked with it (pip builds without isolation from
#: what is installed). DeepSpeed: its build backend (setuptools builds wheels by itself since
#: 70.1). flash-attn: what its setup.py imports (setuptools, packaging, wheel.bdist_wheel, psutil
#: for its job count) and its setup_requires (packaging, psutil, ninja), per
#: Dao-AILab/flash-attention@ea6443c73202667d8dae67e7ba418f2e1ac5c647:setup.py.
BUILD_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "deepspeed": ("setuptools",),
    "flash-attn": ("setuptools", "wheel", "packaging", "psutil", "ninja"),
}
#: How each installer installs the lock (the header of pylock.toml and docs/commands.md).
PIP_FIRST = f"pip install --no-deps --require-hashes -r {REQUIREMENTS_FILE}"
PIP_LAST = (
    "pip install --no-deps --no-build-isolation --no-cache-dir --force-reinstall "
    f"--require-hashes -r {LAST_FILE}"
)
INSTALL_LINES = (
    f"Install with uv: uv pip sync --config-file {UV_SETTINGS_FILE} {LOCK_FILE}",
    f"With pip: {PIP_FIRST}",
    f"  then, against the installed torch: {PIP_LAST}",
)
