"""Which CUDA build the resolver prefers when several would run: the choice policy.

By default the newest torch built for the **driver's own CUDA major** (the newest minor it
allows): a CUDA 12.1 driver gets 2.5.1+cu121, not the newer 2.7.1+cu118, because the CUDA
toolkit on such a node is 12.x and every extension built against torch (DeepSpeed's JIT ops,
flash-attn, apex) needs torch's CUDA major to match it, and Hopper features need CUDA 12. An
older major is chosen only when no build of the driver's major fits the target and the request;
``--cuda`` pins a build and bypasses the policy. When the target has a CUDA toolkit (nvcc,
CUDA_HOME) and the stack builds against CUDA, the builds the toolkit can build against come first,
by the checks the builds make (:class:`ToolkitRule`): torch's cpp_extension (flash-attn, apex,
DeepSpeed's JIT ops) refuses a torch of another CUDA major and only warns on another minor, so
any build of the toolkit's major will do; DeepSpeed's op builder also refuses another minor
unless both versions are in its ``cuda_minor_mismatch_ok`` list (compat_matrix/deepspeed.toml).

The resolver searches once per preference, in order, and takes the first that finds a plan; the
best candidate a preference passed over is the plan's alternative, with the reason in words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from cudalock.errors import InputError
from cudalock.matrix import Matrix, TorchBuild
from cudalock.model import Target
from cudalock.packagenames import canonical_name
from cudalock.request import Request
from cudalock.versions import CudaVersion, format_cuda, parse_cuda_version

__all__ = [
    "CudaPreference",
    "ToolkitRule",
    "builds_against_cuda",
    "cuda_preferences",
    "declined_reason",
    "target_toolkit",
    "toolkit_rule",
]

#: Packages that compile CUDA code against the installed torch (at install time or as JIT ops):
#: their build needs a CUDA toolkit whose major matches torch's CUDA.
CUDA_BUILDING_PACKAGES = {
    "deepspeed": "DeepSpeed's ops",
    "flash-attn": "flash-attn",
    "apex": "apex",
}

_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?=\s*(?:$|[\[<>=!~;@ ]))")


#: What judges the toolkit against torch's CUDA when the stack compiles CUDA against torch:
#: - torch's cpp_extension, for every CUDA extension build (flash-attn, apex, DeepSpeed's JIT
#:   ops): ``_check_cuda_version`` raises ``CUDA_MISMATCH_MESSAGE`` when nvcc's major differs
#:   from ``torch.version.cuda``'s and only logs ``CUDA_MISMATCH_WARN`` when the minor does
#:   (https://github.com/pytorch/pytorch/blob/main/torch/utils/cpp_extension.py,
#:   ``_check_cuda_version``);
#: - DeepSpeed's op builder: ``assert_no_cuda_mismatch`` in op_builder/builder.py passes equal
#:   major.minor, and another minor only when both versions are in its
#:   ``cuda_minor_mismatch_ok[major]``; anything else raises CUDAMismatchException unless
#:   DS_SKIP_CUDA_CHECK=1 (the lists per release, with their sdists: compat_matrix/deepspeed.toml).
CPP_EXTENSION_RULE = "torch's cpp_extension refuses a torch of another CUDA major"


@dataclass(frozen=True)
class ToolkitRule:
    """Which torch CUDA builds the machine's toolkit can build the stack's extensions against."""

    toolkit: CudaVersion
    #: What compiles against torch, in words ("DeepSpeed's ops, flash-attn").
    building: str
    #: DeepSpeed's op builder in the stack: its release and the versions its list allows beside
    #: the toolkit's major (None: no DeepSpeed; an empty list: it allows no other minor).
    deepspeed: tuple[str, tuple[CudaVersion, ...]] | None = None

    def accepts(self, cuda: CudaVersion) -> bool:
        if cuda[0] != self.toolkit[0]:
            return False  # cpp_extension raises on another major
        if self.deepspeed is None or cuda == self.toolkit:
            return True  # cpp_extension only warns on another minor
        allowed = self.deepspeed[1]
        return self.toolkit in allowed and cuda in allowed

    @property
    def exact_only(self) -> bool:
        """Only the toolkit's own CUDA: DeepSpeed's list does not name the toolkit's minor."""
        return self.deepspeed is not None and self.toolkit not in self.deepspeed[1]

    def reason(self) -> str:
        """Why the toolkit takes the builds it takes, in words."""
        toolkit = format_cuda(self.toolkit)
        if self.deepspeed is None:
            return f"{CPP_EXTENSION_RULE} and only warns on another minor"
        release, allowed = self.deepspeed
        if self.exact_only:
            return (
                f"DeepSpeed {release}'s op builder allows no minor mismatch for CUDA {toolkit}: "
                "its list does not name it"
            )
        listed = ", ".join(format_cuda(cuda) for cuda in allowed)
        return (
            f"DeepSpeed {release}'s op builder accepts another CUDA {self.toolkit[0]} minor "
            f"when both are in its list: {listed}"
        )


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
    #: The toolkit's rule, when this preference takes what it builds against.
    rule: ToolkitRule | None = None

    def accepts_cuda(self, cuda: CudaVersion) -> bool:
        if self.exact is not None:
            return cuda == self.exact
        if self.rule is not None:
            return self.rule.accepts(cuda)
        return cuda[0] == self.major

    def accepts(self, build: TorchBuild) -> bool:
        return build.cuda is None or self.accepts_cuda(build.cuda)

    def describe(self) -> str:
        wanted = format_cuda(self.exact) if self.exact else f"{self.major}.x"
        return f"CUDA {wanted}, {self.why}"


def _deepspeed_requested(request: Request) -> SpecifierSet | bool | None:
    """The DeepSpeed the request names: its specifier (None: any version); False: none."""
    for companion in request.with_packages:
        if canonical_name(companion.name) == "deepspeed":
            return companion.specifier
    for framework in request.frameworks:
        if framework.requirement is not None and framework.requirement.name.lower() == "deepspeed":
            return framework.requirement.specifier or None
    return False


def toolkit_rule(
    toolkit: CudaVersion, building: str, request: Request, matrix: Matrix | None
) -> ToolkitRule:
    """The rule for ``toolkit`` and the stack: with DeepSpeed, the list of the newest release
    in the matrix the request allows (the one resolve pairs with a current torch)."""
    wanted = _deepspeed_requested(request)
    if wanted is False or matrix is None:
        return ToolkitRule(toolkit, building)
    releases = []
    for release in matrix.deepspeed:
        try:
            version = Version(release.version)
        except InvalidVersion:
            continue
        if wanted is None or (isinstance(wanted, SpecifierSet) and version in wanted):
            releases.append((version, release.version))
    if not releases:
        return ToolkitRule(toolkit, building, ("(unknown)", ()))
    newest = max(releases)[1]
    check = matrix.deepspeed_cuda_check(newest)
    allowed = check.minor_mismatch_ok.get(toolkit[0], ()) if check is not None else ()
    return ToolkitRule(toolkit, building, (newest, tuple(allowed)))


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
        name = canonical_name(match.group(0))
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
    matrix: Matrix | None = None,
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
        rule = toolkit_rule(cuda, building, request, matrix)
        if rule.exact_only:
            why = f"the one {subject} matches, for {building} ({rule.reason()})"
            preferences.append(CudaPreference(cuda[0], cuda, why, cuda, rule))
        else:
            why = f"the builds {subject} is compatible with for {building} ({rule.reason()})"
            preferences.append(CudaPreference(cuda[0], None, why, cuda, rule))
        if rule.deepspeed is not None:
            # Extensions other than DeepSpeed's still build against any build of the major.
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
        rule = preference.rule
        if build.cuda[0] != preference.toolkit[0]:
            consequence = (
                f"the CUDA {toolkit} toolkit cannot build {building or 'extensions'} against "
                f"a CUDA {build.cuda[0]} torch ({CPP_EXTENSION_RULE})"
            )
        elif rule is not None and rule.deepspeed is not None:
            consequence = (
                f"its CUDA {cuda} does not match the CUDA {toolkit} toolkit, and DeepSpeed "
                f"{rule.deepspeed[0]}'s op builder refuses that minor mismatch (unless "
                "DS_SKIP_CUDA_CHECK=1)"
            )
        else:
            consequence = (
                f"its CUDA {cuda} does not match the CUDA {toolkit} toolkit that builds "
                f"{building or 'extensions'} against torch"
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
