"""cudalock.toml: read, validate, write, and update keeping the user's comments."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalock.envfiles.spec import (
    OutputSpec,
    Spec,
    TargetSummary,
    parse_spec,
    read_inputs,
    read_spec,
    update_spec,
    update_spec_text,
)
from cudalock.errors import InputError
from cudalock.machine import TargetOptions
from cudalock.matrix import load_matrix
from cudalock.model import Gpu, Target
from cudalock.request import Request, RequestOptions, make_request
from cudalock.resolve import resolve
from cudalock.versions import DriverVersion

SPEC = Spec(
    request=RequestOptions.of(
        make_request(
            torch="==2.1.0",
            python="3.11",
            with_packages=("torchvision", "deepspeed"),
            frameworks=("transformers[torch]>=4.52", "peft", "/src/LLaMA-Factory"),
            pytorch_index="https://mirror.example/whl",
            pypi_index="https://mirror.example/simple",
        )
    ),
    target=TargetSummary(
        driver_version="535.104.05",
        driver_cuda="12.2",
        compute_capabilities=("8.0", "8.6"),
        platform="linux-x86_64",
    ),
    output=OutputSpec(format="venv", name="ft"),
)


def test_round_trip() -> None:
    assert parse_spec(update_spec_text(None, SPEC)) == SPEC


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert read_spec(tmp_path / "cudalock.toml") is None


def test_defaults_fill_what_the_file_leaves_out() -> None:
    spec = parse_spec('[request]\ntorch = "2.4.1"\n')
    assert spec.request == RequestOptions(torch="2.4.1")
    assert spec.request.to_request() == make_request(torch="2.4.1")
    assert spec.target is None
    assert spec.output == OutputSpec()


def test_update_keeps_comments_and_untouched_formatting() -> None:
    original = (
        "# my project's torch, see ticket 42\n"
        "spec_version = 1\n\n"
        "[request]\n"
        "# pinned: 2.2 breaks our kernels\n"
        'torch = "==2.1.0"   # keep\n'
        'python = "3.11"\n'
        'with = ["torchvision"]\n'
        'framework = "old==1"\n'
    )
    changed = Spec(
        request=RequestOptions.of(make_request(torch="==2.1.0", python="3.12")),
        target=None,
        output=OutputSpec(format="conda"),
    )
    text = update_spec_text(original, changed)
    assert text.startswith("# my project's torch, see ticket 42\n")
    assert "# pinned: 2.2 breaks our kernels\n" in text
    assert 'torch = "==2.1.0"   # keep\n' in text  # unchanged value: byte-for-byte
    assert 'python = "3.12"' in text
    assert "framework" not in text  # a value the user dropped is removed
    assert parse_spec(text).request.python == "3.12"
    assert parse_spec(text).output.format == "conda"


def test_a_single_framework_string_reads_as_a_list_and_is_rewritten_as_one() -> None:
    old = '[request]\nframework = "llamafactory==0.9.5"\n'
    spec = parse_spec(old)
    assert spec.request.frameworks == ("llamafactory==0.9.5",)
    text = update_spec_text(old, spec)
    assert 'frameworks = ["llamafactory==0.9.5"]' in text
    assert "\nframework =" not in text
    assert parse_spec(text).request.frameworks == ("llamafactory==0.9.5",)


def test_update_is_stable(tmp_path: Path) -> None:
    path = tmp_path / "cudalock.toml"
    path.write_text(update_spec(path, SPEC))
    assert update_spec(path, SPEC) == path.read_text()


def test_credentials_are_not_recorded() -> None:
    spec = Spec(
        request=RequestOptions.of(
            make_request(
                pytorch_index="https://user:s3cret@mirror.example/whl",
                pypi_index="https://tok@mirror.example/simple",
            )
        )
    )
    text = update_spec_text(None, spec)
    assert "s3cret" not in text and "tok@" not in text
    assert parse_spec(text).request.pytorch_index == "https://mirror.example/whl"


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "cudalock.toml"
    path.write_text('[request]\ntorch = "2.1.0"\npython = = 3.11\n')
    with pytest.raises(InputError, match=r"cudalock\.toml:3:\d+: invalid TOML"):
        read_spec(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[request]\ntorch = 2.1\n", r"\[request\] torch must be a string"),
        ('[request]\nwith = "torchvision"\n', r"\[request\] with must be a list of strings"),
        ('[request]\ntorhc = "2.1"\n', r"\[request\] unknown key 'torhc'"),
        ('[request]\ncompat = "loose"\n', r"compat must be strict or minor"),
        ('[output]\nformat = "spack"\n', r"\[output\] format must be one of conda, venv, uv, pixi"),
        ("spec_version = 2\n", r"spec_version 2 is not supported"),
        ('request = "x"\n', r"\[request\] must be a table"),
        ("[extras]\n", r"unknown key 'extras'"),
        ("[target]\ngpu = 1\n", r"\[target\] gpu must be true or false"),
    ],
)
def test_bad_content_is_an_input_error(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_spec(text)


def test_binary_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cudalock.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not UTF-8"):
        read_spec(path)


def test_target_summary_of_a_fleet_takes_the_lowest_driver_and_every_arch() -> None:
    a = Target(
        platform="linux-x86_64",
        driver_version=DriverVersion("550.54.14"),
        driver_cuda=(12, 4),
        gpus=(Gpu("H100", (9, 0)),),
    )
    b = Target(
        platform="linux-x86_64",
        driver_version=DriverVersion("535.104.05"),
        driver_cuda=(12, 2),
        gpus=(Gpu("A10", (8, 6)), Gpu("A100", (8, 0))),
    )
    summary = TargetSummary.of(resolve(load_matrix(), [a, b], Request()))
    assert summary == TargetSummary(
        driver_version="535.104.05",
        driver_cuda="12.2",
        compute_capabilities=("8.0", "8.6", "9.0"),
        platform="linux-x86_64",
        gpu=True,
    )


def test_target_summary_keeps_one_nodes_driver_and_cuda_together() -> None:
    # node-a's driver is the older, but --driver-cuda says it runs CUDA 12.4; node-b's newer
    # driver is limited to 12.2. The plan is made for node-b; the summary records node-b.
    a = Target(
        platform="linux-x86_64", driver_version=DriverVersion("535.104.05"), driver_cuda=(12, 4)
    )
    b = Target(
        platform="linux-x86_64", driver_version=DriverVersion("550.54.14"), driver_cuda=(12, 2)
    )
    summary = TargetSummary.of(resolve(load_matrix(), [a, b], Request()))
    assert summary is not None
    assert (summary.driver_version, summary.driver_cuda) == ("550.54.14", "12.2")


def test_cpu_target_is_recorded_as_gpu_false() -> None:
    summary = TargetSummary.of(resolve(load_matrix(), [Target(platform="linux-x86_64")], Request()))
    assert summary is not None and summary.gpu is False
    text = update_spec_text(None, Spec(target=summary))
    assert "gpu = false" in text
    assert parse_spec(text).target == summary


_TOML_PIECES = st.sampled_from(
    [
        "[request]\n",
        "[target]\n",
        "[output]\n",
        "[[request]]\n",
        "spec_version = 1\n",
        'torch = "2.1"\n',
        "torch = 2\n",
        'with = ["a", 1]\n',
        "with = []\n",
        "gpu = true\n",
        'compat = "minor"\n',
        'format = "uv"\n',
        "x = {a = 1}\n",
        "= =\n",
        '"\n',
        "\x00",
        "compute_capabilities = [[1]]\n",
        "[request.sub]\n",
        'spec_version = "1"\n',
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), st.lists(_TOML_PIECES, max_size=12).map("".join)))
def test_no_text_makes_the_spec_parser_raise_anything_but_input_error(text: str) -> None:
    try:
        spec = parse_spec(text)
    except InputError:
        return
    assert isinstance(spec, Spec)


def test_updating_the_spec_just_read_reuses_its_text(tmp_path: Path) -> None:
    path = tmp_path / "cudalock.toml"
    path.write_text('# ours\nspec_version = 1\n\n[request]\ntorch = "2.4.1"\n')
    read = read_inputs(RequestOptions(), TargetOptions(), spec_file=None, output_dir=tmp_path)
    path.write_text("not read again")  # what bootstrap and lock rewrite is what they read
    text = update_spec(path, Spec(request=RequestOptions.of(read.request)), read)
    assert text.startswith("# ours\n") and 'torch = "2.4.1"' in text
