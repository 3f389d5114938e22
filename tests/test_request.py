"""The Request parsed once: typed values from the strings flags and cudalock.toml give."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from cudalock.errors import InputError, UsageError
from cudalock.request import (
    Request,
    RequestOptions,
    make_request,
    parse_compat,
    parse_cuda_pin,
    parse_framework,
    parse_torch_spec,
    recorded_request,
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("llamafactory==0.9.5", "requirement"),
        ("finetunekit", "requirement"),
        ("llamafactory[torch,metrics]>=0.9", "requirement"),
        ("name @ https://example.com/x.whl", "requirement"),
        ("git+https://github.com/hiyouga/LlamaFactory@v0.9.5", "url"),
        ("https://example.com/pkg.tar.gz", "url"),
        ("./LlamaFactory", "path"),
        ("/srv/my fw/$(x)", "path"),
        ("~/src/fw", "path"),
        ("../fw", "path"),
    ],
)
def test_framework_kinds(text: str, kind: str) -> None:
    framework = parse_framework(text, Path("/work"))
    assert framework.kind == kind
    assert (framework.requirement is not None) == (kind == "requirement")
    assert (framework.path is not None) == (kind == "path")


def test_a_framework_path_is_absolute_from_the_directory_given() -> None:
    framework = parse_framework("../fw/./x", Path("/work/project"))
    assert framework.path == Path("/work/fw/x") and framework.text == "/work/fw/x"
    home = parse_framework("~/src/fw", Path("/elsewhere"))
    assert home.path == Path.home() / "src" / "fw"


def test_a_requirement_framework_is_parsed_with_its_extras() -> None:
    framework = parse_framework(" transformers[torch]>=4.52 ")
    assert framework.text == "transformers[torch]>=4.52"
    assert framework.requirement is not None
    assert framework.requirement.name == "transformers"
    assert framework.requirement.extras == {"torch"}


@pytest.mark.parametrize("text", ["torch>=2", "deepspeed", "TorchVision==0.20"])
def test_a_framework_naming_torch_or_a_companion_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="pairs with torch itself"):
        parse_framework(text)


def test_frameworks_are_kept_once_in_the_order_given() -> None:
    request = make_request(frameworks=["peft", "trl", "peft"])
    assert [str(f) for f in request.frameworks] == ["peft", "trl"]


@pytest.mark.parametrize(
    ("text", "admitted", "refused"),
    [
        ("2.4", "2.4.1", "2.5.0"),
        ("2.4.1", "2.4.1", "2.4.0"),
        ("==2.4.1", "2.4.1", "2.4.2"),
        (">=2.1,<2.5", "2.4.1", "2.5.0"),
    ],
)
def test_torch_spec_admits(text: str, admitted: str, refused: str) -> None:
    spec = parse_torch_spec(text)
    assert spec.admits(admitted) and spec.admits(Version(admitted))
    assert not spec.admits(refused)
    assert spec.specifier is not None and spec.specifier.contains(admitted)
    assert str(spec) == text


def test_no_torch_spec_admits_every_release() -> None:
    spec = parse_torch_spec(" ")
    assert not spec and spec.specifier is None and spec.admits("1.13.0")


def test_cuda_pin_and_compat_are_typed() -> None:
    assert parse_cuda_pin(" 12.8 ") == (12, 8)
    assert parse_cuda_pin("CPU") == "cpu"
    assert parse_compat("minor") == "minor"
    with pytest.raises(UsageError, match="'loose'"):
        parse_compat("loose")
    with pytest.raises(InputError):
        parse_cuda_pin("twelve")


def test_to_json_gives_the_strings_back() -> None:
    request = make_request(
        torch="2.4", python="3.11.7", cuda="12.1", with_packages=["deepspeed>=0.15"]
    )
    assert request.to_json() == {
        "torch": "2.4",
        "python": "3.11",
        "cuda": "12.1",
        "compat": "strict",
        "with": ["torchvision", "deepspeed>=0.15"],
        "frameworks": [],
        "pytorch_index": "https://download.pytorch.org/whl",
        "pypi_index": None,
    }
    assert Request().to_json() == make_request().to_json()


def test_options_over_a_recorded_request_and_back() -> None:
    recorded = RequestOptions(torch="2.4", python="3.11", with_packages=("none", "deepspeed"))
    given = RequestOptions(python="3.12")
    request = given.to_request(recorded)
    assert (str(request.torch), request.python) == ("2.4", "3.12")
    assert [c.name for c in request.with_packages] == ["deepspeed"]
    assert RequestOptions.of(request).to_request() == request


def test_recorded_request_drops_credentials_from_urls_and_frameworks() -> None:
    request = make_request(
        pypi_index="https://u:tok@mirror.example/simple",
        frameworks=["git+https://alice:TOKEN@git.example/fw.git@v1", "peft"],
    )
    recorded = recorded_request(request)
    assert "tok" not in str(recorded.to_json()) and "TOKEN" not in str(recorded.to_json())
    assert [f.kind for f in recorded.frameworks] == ["url", "requirement"]
