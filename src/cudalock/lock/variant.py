"""What a PyTorch variant index serves (``https://download.pytorch.org/whl/cu121``).

Besides torch, torchvision and torchaudio, a variant index serves the other packages built
for that variant — xformers, torchao, torchcodec, fbgemm-gpu, torchtext, torchdata, triton —
and plain copies of some PyPI packages (numpy, jinja2, ...). Which is which is read, not
guessed: the index's project list (its PEP 503/691 root page) says what it serves, and a
project's page says whether it has builds carrying the variant's local label (``+cu121``).
A package with such builds is routed to the variant index; a plain copy is left to PyPI.

Some of the variant's own packages carry no such label: the triton a release's torch pins
(``triton==3.1.0``), the pytorch-triton a nightly's pins (``pytorch-triton==3.1.0+cf34004b8a``,
a label of its own, served nowhere else). What the torch family on the variant index pins
exactly, and the index serves in that version, is routed there too
(:mod:`cudalock.lock.closure`).
"""

from __future__ import annotations

import html.parser
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cudalock.lock.http import cached_page

__all__ = [
    "ACCEPT",
    "PEP691_JSON",
    "Reader",
    "VariantIndex",
    "label_of",
    "labelled_versions",
    "page_files",
    "page_versions",
    "parse_project_list",
    "read_variant_index",
    "served_versions",
]

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
#: JSON first, HTML when the index (or a mirror) only speaks PEP 503.
ACCEPT = f"{PEP691_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class _Links(html.parser.HTMLParser):
    """The text of every ``<a>`` of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self._open = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = True
            self.texts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = False

    def handle_data(self, data: str) -> None:
        if self._open:
            self.texts[-1] += data


def _is_json(ctype: str, body: bytes) -> bool:
    return "json" in ctype or body.lstrip().startswith(b"{")


def parse_project_list(ctype: str, body: bytes) -> frozenset[str]:
    """The normalised project names of an index's root page (PEP 691 JSON or PEP 503 HTML)."""
    if _is_json(ctype, body):
        document = json.loads(body)
        return frozenset(
            str(canonicalize_name(str(p["name"])))
            for p in document.get("projects", [])
            if isinstance(p, dict) and "name" in p
        )
    links = _Links()
    links.feed(body.decode("utf-8", "replace"))
    return frozenset(str(canonicalize_name(t.strip())) for t in links.texts if t.strip())


def page_files(ctype: str, body: bytes) -> tuple[str, ...]:
    """The file names a project page lists (PEP 691 JSON or PEP 503 HTML)."""
    if _is_json(ctype, body):
        document = json.loads(body)
        names: Iterable[str] = (
            str(f.get("filename", "")) for f in document.get("files", []) if isinstance(f, dict)
        )
    else:
        links = _Links()
        links.feed(body.decode("utf-8", "replace"))
        names = (t.strip() for t in links.texts)
    return tuple(names)


def page_versions(ctype: str, body: bytes) -> frozenset[str]:
    """Every version a project page has a file for (from the file names)."""
    versions = set()
    for name in page_files(ctype, body):
        try:
            if name.endswith(".whl"):
                versions.add(str(parse_wheel_filename(name)[1]))
            elif name.endswith((".tar.gz", ".zip")):
                versions.add(str(parse_sdist_filename(name)[1]))
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
    return frozenset(versions)


def label_of(url: str) -> str:
    """The local label of a variant index's builds: ``cu121`` for ``.../whl/cu121``."""
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class VariantIndex:
    """A variant index and the projects it serves."""

    url: str
    projects: frozenset[str]

    @property
    def label(self) -> str:
        return label_of(self.url)

    def serves(self, name: str) -> bool:
        return canonicalize_name(name) in self.projects


@dataclass(frozen=True)
class Reader:
    """How pages are read: the indexes (for credentials), limits, cache, offline."""

    indexes: Sequence[str]
    timeout_s: float = 60
    retries: int = 3
    offline: bool = False
    use_cache: bool = True

    def page(self, url: str) -> tuple[str, bytes]:
        return cached_page(
            url,
            accept=ACCEPT,
            indexes=self.indexes,
            timeout_s=self.timeout_s,
            retries=self.retries,
            offline=self.offline,
            use_cache=self.use_cache,
        )


def read_variant_index(url: str, reader: Reader) -> VariantIndex:
    """The project list of the variant index ``url`` (cached with the index's validators)."""
    ctype, body = reader.page(url.rstrip("/") + "/")
    return VariantIndex(url=url, projects=parse_project_list(ctype, body))


def served_versions(variant: VariantIndex, name: str, reader: Reader) -> tuple[Version, ...]:
    """Every version of ``name`` the variant index has a file for, oldest first."""
    if not variant.serves(name):
        return ()
    try:
        ctype, body = reader.page(f"{variant.url.rstrip('/')}/{canonicalize_name(name)}/")
    except FileNotFoundError:
        return ()
    found = []
    for text in page_versions(ctype, body):
        try:
            found.append(Version(text))
        except InvalidVersion:
            continue
    return tuple(sorted(found))


def labelled_versions(variant: VariantIndex, name: str, reader: Reader) -> tuple[str, ...]:
    """The versions of ``name`` the variant index has builds of with its label, oldest first."""
    return tuple(str(v) for v in served_versions(variant, name, reader) if v.local == variant.label)
