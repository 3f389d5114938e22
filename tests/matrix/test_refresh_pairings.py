"""``matrix refresh`` of ``torch_pairings.toml``: torchao's newer releases on a PyPI-like index on
127.0.0.1, their version check read from ``torchao/__init__.py`` by range requests.

The scenario is "two more releases" after the newest recorded, each a stand-in wheel whose
``__init__.py`` is a released one (tests/fixtures/torchao) with its version strings moved on:
one in the table form of 0.16.0, one in the minimum form of 0.18.0.
"""

from __future__ import annotations

from pathlib import Path

import tomlkit
from packaging.version import Version

from cudalock.matrix import default_matrix_dir, load_matrix
from cudalock.matrix.fetch import Fetcher
from cudalock.matrix.refresh import _space_headers
from cudalock.matrix.refresh_pairings import apply_pairings, gather_pairings, read_version_check
from tests.conftest import ServeIndexes
from tests.support.wheels import StandIn

FIXTURES = Path(__file__).parent.parent / "fixtures" / "torchao"
TABLE_FORM = (FIXTURES / "0.16.0-__init__.py.txt").read_text(encoding="utf-8")
MINIMUM_FORM = (FIXTURES / "0.18.0-__init__.py.txt").read_text(encoding="utf-8")

SHIPPED = load_matrix(default_matrix_dir())
NEWEST = max(
    (p for p in SHIPPED.torch_pairings if p.package == "torchao"), key=lambda p: Version(p.version)
)


def next_minor(version: str) -> str:
    major, minor, *_ = Version(version).release
    return f"{major}.{minor + 1}.0"


def test_both_released_forms_of_the_check_are_read_as_recorded() -> None:
    # What the shipped table says of 0.16.0 and 0.18.0 is what their own files say.
    for version, source in (("0.16.0", TABLE_FORM), ("0.18.0", MINIMUM_FORM)):
        check = read_version_check(source, version)
        recorded = SHIPPED.pairing("torchao", version)
        assert check is not None and recorded is not None
        assert check.torch == tuple(recorded.torch)
        assert recorded.read_from == f"torchao/__init__.py {check.read_from}"
    # The table names 0.15.0 too, and development builds, which are left out.
    check = read_version_check(TABLE_FORM, "0.15.0")
    assert check is not None and check.torch == ("==2.9.1",)
    # A release the table does not name, and a file with no check, say nothing.
    assert read_version_check(TABLE_FORM, "0.12.0") is None
    assert read_version_check("import torch\n", "0.19.0") is None
    assert read_version_check("this is not Python (", "0.19.0") is None


def test_newer_releases_are_read_and_recorded_with_their_source(
    serve_indexes: ServeIndexes, matrix_copy: Path
) -> None:
    first = next_minor(NEWEST.version)
    second = next_minor(first)
    torch_of_first = "2.13.0"
    # 0.16.0's table, moved on: this release is paired with torch 2.13.0 (and a dev build).
    table_form = TABLE_FORM.replace(
        '_parse_version("0.16.0"), _parse_version("2.10.0")',
        (f'_parse_version("{first}"), _parse_version("{torch_of_first}")'),
    ).replace(
        '_parse_version("0.16.0"), _parse_version("2.11.0.dev")',
        (f'_parse_version("{first}"), _parse_version("2.14.0.dev")'),
    )
    minimum_form = MINIMUM_FORM.replace('_parse_version("2.11.0")', '_parse_version("2.14.0")')
    releases = [
        StandIn("torchao", first, files={"torchao/__init__.py": table_form}),
        StandIn(
            "torchao",
            second,
            files={"torchao/__init__.py": minimum_form},
            tag="cp39-abi3-manylinux_2_28_x86_64",
        ),
        # A release whose file has no check cudalock reads gets no entry, and is said.
        StandIn("torchao", next_minor(second), files={"torchao/__init__.py": "import torch\n"}),
        StandIn("torchao", next_minor(next_minor(second)), kind="sdist"),
    ]
    index = serve_indexes(pypi=releases)

    path = matrix_copy / "torch_pairings.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    gathered = gather_pairings(doc, Fetcher(timeout=10, retries=0, backoff=0.01), index.pypi_url)
    changes = apply_pairings(doc, gathered)
    path.write_text(_space_headers(tomlkit.dumps(doc)), encoding="utf-8")

    assert changes == [
        f"torch_pairings: torchao {first} accepts torch =={torch_of_first} "
        "(torchao/__init__.py torchao_pytorch_compatible_versions)",
        f"torch_pairings: torchao {second} accepts torch >=2.14.0 "
        "(torchao/__init__.py min_torch_version)",
    ]
    assert gathered.unread == [
        f"torchao {next_minor(next_minor(second))}: no wheel on the index",
        f"torchao {next_minor(second)}: its torchao/__init__.py has no torch version check "
        "cudalock reads (min_torch_version, or torchao_pytorch_compatible_versions naming this "
        "release)",
    ]
    refreshed = load_matrix(matrix_copy)
    entry = refreshed.pairing("torchao", first)
    assert entry is not None and entry.provenance.verified
    assert entry.accepts(f"{torch_of_first}+cu128") and not entry.accepts("2.14.0")
    url = index.base_url + index.file_path(releases[0].filename)
    assert entry.provenance.source == (
        f"{url} (sha256:{index.sha256(releases[0].filename)}): torchao/__init__.py, "
        f'(_parse_version("{first}"), _parse_version("{torch_of_first}"))',
    )
    entry = refreshed.pairing("torchao", second)
    assert entry is not None
    assert entry.accepts("2.15.0") and not entry.accepts("2.13.0")
    assert entry.provenance.source[0].endswith('min_torch_version = _parse_version("2.14.0")')
    # Kept in order, after the newest recorded; the rest of the table as it was.
    text = path.read_text(encoding="utf-8")
    assert text.index(f'version = "{NEWEST.version}"') < text.index(f'version = "{first}"')
    assert text.index(f'version = "{first}"') < text.index(f'version = "{second}"')
    assert text.startswith((default_matrix_dir() / "torch_pairings.toml").read_text()[:200])
    assert tomlkit.parse(text)["schema_version"] == 1
    # Read by range requests: the members, never the whole wheel.
    wheel = index.file_path(releases[0].filename)
    assert {s for m, p, s in index.requests if p == wheel and m == "GET"} == {206}


def test_a_listed_package_the_index_lacks_is_said(
    serve_indexes: ServeIndexes, matrix_copy: Path
) -> None:
    index = serve_indexes(pypi=[StandIn("numpy", "2.2.6")])
    doc = tomlkit.parse((matrix_copy / "torch_pairings.toml").read_text(encoding="utf-8"))
    gathered = gather_pairings(doc, Fetcher(timeout=10, retries=0, backoff=0.01), index.pypi_url)
    assert gathered.facts == []
    assert gathered.unread == [f"torchao: {index.pypi_url}/torchao/ has no such project (HTTP 404)"]
    assert apply_pairings(doc, gathered) == []
