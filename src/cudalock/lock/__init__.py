"""The lock: the whole dependency closure of a Plan, resolved by uv, as ``pylock.toml`` (PEP 751)
and ``requirements.lock.txt``, and the check that it is still current."""

from cudalock.lock.pylock import LOCK_FILE, REQUIREMENTS_FILE, LockResult, check_lock, make_lock

__all__ = ["LOCK_FILE", "REQUIREMENTS_FILE", "LockResult", "check_lock", "make_lock"]
