"""Package names as indexes and installers compare them.

One normalisation for the core (PEP 503: runs of ``-``, ``_`` and ``.`` are one ``-``, case is
ignored). It gives what ``packaging.utils.canonicalize_name`` gives for every valid name; the
audit and resolve paths use this one because ``packaging.utils`` loads ``packaging.tags``, and
with it ``logging`` and ``sysconfig``, for a one-line substitution.
"""

from __future__ import annotations

import re

__all__ = ["canonical_name"]

_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503 normalisation: ``Torch_Vision`` → ``torch-vision``."""
    return _SEPARATORS.sub("-", name).lower()
