"""Which CUDA build the resolver prefers when several would run: the choice policy.

By default the newest torch built for the **driver's own CUDA major** (the newest minor it
allows): a CUDA 12.1 driver gets 2.5.1+cu121, not the newer 2.7.1+cu118, because the CUDA
toolkit on such a node is 12.x and every extension built against torch (DeepSpeed's JIT ops,
flash-attn, apex) needs torch's CUDA major to match it, and Hopper features need CUDA 12. An
older major is chosen only when no build of the driver's major fits the target and the request;
``--cuda`` pins a build and bypasses the policy. When the target has a CUDA toolkit (nvcc,
CUDA_HOME) and the stack builds against CUDA, the build whose CUDA the toolkit matches comes
first (exactly, else its major).

The resolver searches once per preference, in order, and takes the first that finds a plan; the
best candidate a preference passed over is the plan's alternative, with the reason in words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cudalock.errors import InputError
from cudalock.matrix import TorchBuild
from cudalock.model import Target
from cudalock.request import Request
from cudalock.versions import CudaVersion, format_cuda, parse_cuda_version

__all__ = [
    "CudaPreference",
    "builds_against_cuda",
    "cuda_preferences",
    "declined_reason",
    "target_toolkit",
]

#: Packages that compile CUDA code against the installed torch (at install time or as JIT ops):
#: their build needs a CUDA toolkit whose major matches torch's CUDA.
CUDA_BUILDING_PACKAGES = {
    "deepspeed": "DeepSpeed's ops",
    "flash-attn": "flash-attn",
    "apex": "apex",
}

_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?=\s*(?:$|[\[<>=!~;@ ]))")


@dataclass(frozen=True)
class CudaPreference:
    """One pass of the search: the CUDA builds it takes, and why in words."""

    major: int
    #: An exact CUDA version (the toolkit's) to take, or None for any minor of ``major``.
    exact: CudaVersion | None
    #: "the driver's own CUDA major" / "the CUDA 12.1 toolkit on this machine".
    why: str
    #: The toolkit this preference follows (None: the driver's).
    toolkit: CudaVersion | None = None

    def accepts(self, build: TorchBuild) -> bool:
        if build.cuda is None:
            return True
        if self.exact is not None:
            return build.cuda == self.exact
        return build.cuda[0] == self.major

    def describe(self) -> str:
        wanted = format_cuda(self.exact) if self.exact else f"{self.major}.x"
        return f"CUDA {wanted}, {self.why}"


def builds_against_cuda(request: Request) -> str | None:
    """What in the requested stack compiles CUDA code against torch, in words (None: nothing)."""
    found: list[str] = []
    names = [str(companion) for companion in request.with_packages]
    names += [f.requirement.name for f in request.frameworks if f.requirement is not None]
    for text in names:
        # A requirement's name, normalised as PEP 503 does; a framework given as a local path
        # or VCS URL names nothing here: its name is known only once it is read.
        match = _NAME_RE.match(text.strip())
        if match is None:
            continue
        name = re.sub(r"[-_.]+", "-", match.group(0)).lower()
        words = CUDA_BUILDING_PACKAGES.get(name)
        if words is not None and words not in found:
            found.append(words)
    return ", ".join(found) or None


def target_toolkit(targets: Sequence[Target]) -> tuple[CudaVersion, str] | None:
    """The CUDA toolkit every target has (version, where it was found), or None when a target
    has none or the targets differ."""
    found: set[CudaVersion] = set()
    where = ""
    for target in targets:
        text = target.host.cuda_toolkit
        if text is None:
            return None
        try:
            found.add(parse_cuda_version(text))
        except InputError:
            return None
        where = where or (target.host.cuda_toolkit_path or "")
    if len(found) != 1:
        return None
    return found.pop(), where


def cuda_preferences(
    driver_cuda: CudaVersion | None,
    targets: Sequence[Target],
    request: Request,
) -> tuple[CudaPreference, ...]:
    """The passes the search makes before taking any build that runs, most preferred first."""
    if request.cuda is not None or driver_cuda is None:
        return ()
    preferences: list[CudaPreference] = []
    toolkit = target_toolkit(targets)
    building = builds_against_cuda(request)
    if toolkit is not None and building is not None:
        cuda, where = toolkit
        subject = f"the CUDA {format_cuda(cuda)} toolkit{f' at {where}' if where else ''}"
        why = f"the one {subject} matches, which builds {building} against torch"
        preferences.append(CudaPreference(cuda[0], cuda, why, cuda))
        preferences.append(CudaPreference(cuda[0], None, f"the major {subject} matches", cuda))
    own = CudaPreference(
        driver_cuda[0],
        None,
        f"the driver's own CUDA major (it supports CUDA {format_cuda(driver_cuda)})",
    )
    if not any(p.exact is None and p.major == own.major for p in preferences):
        preferences.append(own)
    return tuple(preferences)


def declined_reason(
    preference: CudaPreference,
    build: TorchBuild,
    driver_cuda: CudaVersion | None,
    building: str | None,
) -> str:
    """Why ``build``, which would run and is newer, is not the choice."""
    assert build.cuda is not None
    cuda = format_cuda(build.cuda)
    if preference.toolkit is not None:
        toolkit = format_cuda(preference.toolkit)
        if build.cuda[0] != preference.toolkit[0]:
            consequence = (
                f"the CUDA {toolkit} toolkit cannot build {building or 'extensions'} against "
                f"a CUDA {build.cuda[0]} torch"
            )
        else:
            consequence = (
                f"its CUDA {cuda} does not match the CUDA {toolkit} toolkit that builds "
                f"{building or 'extensions'} against torch (DeepSpeed refuses some minor "
                "mismatches)"
            )
        return f"{consequence}; --cuda {cuda} chooses it"
    node = f"this CUDA {format_cuda(driver_cuda)} node" if driver_cuda else "this node"
    if build.cuda[0] < preference.major:
        consequence = (
            f"CUDA {cuda} on {node} is an older major: extensions built with the node's CUDA "
            f"{preference.major}.x toolkit (DeepSpeed ops, flash-attn) refuse a CUDA "
            f"{build.cuda[0]} torch, and what needs CUDA {preference.major} (FP8 on Hopper, "
            "current prebuilt flash-attn wheels) is missing"
        )
    else:
        consequence = f"CUDA {cuda} is not the major of the driver on {node}"
    return f"{consequence}; --cuda {cuda} chooses it"
