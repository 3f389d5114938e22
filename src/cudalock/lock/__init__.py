"""The lock: the whole dependency closure of a Plan, resolved once by uv and fitted to its torch,
as ``pylock.toml`` (PEP 751) and the files pip and uv install it from, and the check that it is
still current."""

from cudalock.lock.closure import (
    Closure,
    FrameworkFit,
    UvOptions,
    check_framework_paths,
    resolve_closure,
)
from cudalock.lock.files import LockResult, check_lock, lock_texts, make_lock
from cudalock.lock.names import (
    BUILT_AGAINST_TORCH,
    LAST_FILE,
    LOCK_FILE,
    LOCK_FILES,
    REQUIREMENTS_FILE,
    UV_FIRST_FILE,
    UV_SETTINGS_FILE,
)
from cudalock.lock.uv import INSTALL_ROUTING_VARIABLES, find_uv
from cudalock.lock.uvfailures import NotOnIndex

__all__ = [
    "BUILT_AGAINST_TORCH",
    "INSTALL_ROUTING_VARIABLES",
    "LAST_FILE",
    "LOCK_FILE",
    "LOCK_FILES",
    "REQUIREMENTS_FILE",
    "UV_FIRST_FILE",
    "UV_SETTINGS_FILE",
    "Closure",
    "FrameworkFit",
    "LockResult",
    "NotOnIndex",
    "UvOptions",
    "check_framework_paths",
    "check_lock",
    "find_uv",
    "lock_texts",
    "make_lock",
    "resolve_closure",
]
