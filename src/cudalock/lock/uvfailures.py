"""uv's failures in cudalock's terms: a build the index does not serve (exit 3, not a network
fault to retry), no solution (exit 1), anything else (exit 3), from uv's stderr.
"""

from __future__ import annotations

import re

from cudalock.errors import EnvironmentFailure, Unsatisfiable
from cudalock.lock.uvinput import INPUT_PROJECT, LockInput
from cudalock.urls import redact

__all__ = [
    "NO_SOLUTION",
    "NoWheelsForPython",
    "NotOnIndex",
    "classify_uv_failure",
    "missing_from_index",
    "no_wheels_for_python",
]


#: How uv's "no solution" starts in cudalock's words (the cause follows).
NO_SOLUTION = "uv found no set of versions that fits the plan: "


class NotOnIndex(EnvironmentFailure):
    """The index does not serve the build the plan chose (an incomplete mirror, say): exit 3,
    but not a network failure that trying again later would mend."""


def missing_from_index(stderr: str, inp: LockInput) -> NotOnIndex | None:
    """The routed pin uv found no file for ("torch was not found in the package registry"):
    the index does not serve the build the plan chose, which no framework can change."""
    for route in inp.routes:
        for name in route.packages:
            pattern = (
                rf"(?:\b{re.escape(name)} was not found in the package registry"
                rf"|there is no version of {re.escape(name)}==)"
            )
            if re.search(pattern, stderr):
                version = next(
                    (r.split("==", 1)[1] for r in inp.requirements if r.startswith(f"{name}==")),
                    "?",
                )
                return NotOnIndex(
                    f"{redact(route.url)} serves no {name}=={version} for Python {inp.python} "
                    f"on {inp.platform}",
                    hint="Check --pytorch-index (a mirror must carry this build), or choose "
                    "another build with --torch or --cuda.",
                )
    return None


class NoWheelsForPython(Unsatisfiable):
    """uv's answer proves the closure does not install on the Python it resolved for: a
    package it needs has no wheel for that Python (and no sdist, or ``--only-binary`` forbids
    building it). A default Python then steps down (:mod:`cudalock.lock.python`)."""

    def __init__(self, python: str, package: str, *, hint: str | None = None) -> None:
        #: What has no wheel for the Python ("sentencepiece 0.2.0", "torchaudio").
        self.package = package
        self.python = python
        super().__init__(
            f"uv found no wheel of {package} for Python {python}, so the closure does not "
            f"install on Python {python}",
            hint=hint or "Choose a Python the whole stack has wheels for with --python.",
        )


#: uv's words for a package without a wheel for the Python: ``torch==2.5.1+cu124 has no wheels
#: with a matching Python ABI tag (e.g., `cp313`)``; with ``--only-binary``, ``sentencepiece==0.2.0
#: has no usable wheels`` or ``all versions of sentencepiece have no usable wheels``.
_NO_WHEEL_RE = re.compile(
    r"(?:all versions of (?P<all>[A-Za-z0-9._-]+) have|(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)"
    r" has) no (?P<why>usable wheels|wheels with a matching Python (?:ABI|implementation) tag)"
)


def no_wheels_for_python(stderr: str, inp: LockInput) -> NoWheelsForPython | None:
    """The package uv found no wheel of for ``inp``'s Python, when that is why it failed: no
    wheel with the Python's tag, or none at all of a package ``--only-binary`` names (which has
    wheels for other Pythons). A wheel missing for the platform is not the Python's doing."""
    from packaging.utils import canonicalize_name

    binary_only = {canonicalize_name(name) for name in inp.only_binary}
    for found in _NO_WHEEL_RE.finditer(stderr):
        name = found.group("all") or found.group("name")
        if found.group("why") == "usable wheels" and canonicalize_name(name) not in binary_only:
            continue
        version = found.group("version")
        return NoWheelsForPython(inp.python, f"{name} {version}" if version else name)
    return None


def classify_uv_failure(stderr: str) -> Exception:
    """Turn uv's failure into cudalock's: no solution → exit 1, anything else → exit 3."""
    text = stderr.replace(f"{INPUT_PROJECT} depends on", "the request needs")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("warning:")]
    missing = re.search(r"Because (\S+) was not found in the cache", text)
    if missing or "the network was disabled" in text:
        what = missing.group(1) if missing else "what the closure needs"
        return EnvironmentFailure(
            f"offline, and uv's cache does not hold {what}",
            hint="Run it again where the indexes can be reached (without --offline).",
        )
    causes = [
        line.removeprefix("cause:").strip()
        for line in lines
        if line.startswith(("cause:", "╰─▶", "Caused by:"))
    ]
    if "no solution found" in text.lower() or "unsatisfiable" in text.lower():
        explanation = " ".join(c.removeprefix("╰─▶").strip() for c in causes) or lines[-1]
        return Unsatisfiable(
            NO_SOLUTION + explanation,
            hint="Relax the framework or --with requirements, or pin another torch with --torch.",
        )
    build = re.search(r"Failed to build `?([^`\s:]+)", text)
    if build:
        return EnvironmentFailure(
            f"uv had to build {build.group(1)} from source to read its dependencies, and the "
            "build failed",
            hint="Packages without wheels (DeepSpeed is an sdist) run their setup code while "
            "locking: see uv's output above, or lock without that package (--with).",
        )
    first = next(
        (line for line in lines if line.startswith("error:")),
        lines[0] if lines else "uv failed without a message",
    )
    detail = first.removeprefix("error:").strip()
    if causes and causes[-1] not in detail:
        detail += f" ({causes[-1].removeprefix('Caused by:').strip()})"
    return EnvironmentFailure(
        f"resolving the closure failed: {detail}",
        hint="Check the network and the index URLs (--pytorch-index, --pypi-index): uv retried "
        "each request --retries times, waiting --timeout seconds.",
    )
