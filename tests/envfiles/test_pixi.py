"""``--format pixi``: the pixi.toml of a plan, checked against pixi's published schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from cudalock.envfiles.render import RenderOptions, render_files
from cudalock.lock.pixi import pixi_changes
from cudalock.tomlfile import tomllib
from tests.envfiles.test_render import make_plan

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "pixi" / "schema.json").read_text())


def _manifest(**plan_args: Any) -> dict[str, Any]:
    text = render_files(make_plan(**plan_args), RenderOptions(name="ft", output_format="pixi"))[
        "pixi.toml"
    ]
    manifest: dict[str, Any] = tomllib.loads(text)
    jsonschema.Draft7Validator(SCHEMA).validate(manifest)
    return manifest


def test_deepspeed_on_cuda12_brings_the_toolkit_and_builds_against_the_installed_torch() -> None:
    manifest = _manifest(deepspeed="0.15.1")
    dependencies = manifest["dependencies"]
    assert isinstance(dependencies, dict)
    assert dependencies["cuda-nvcc"] == "*" and dependencies["cuda-version"] == "12.1.*"
    assert dependencies["libcusparse-dev"] == "*"
    assert manifest["pypi-options"] == {"no-build-isolation": ["deepspeed"]}
    pypi = manifest["pypi-dependencies"]
    assert isinstance(pypi, dict) and pypi["deepspeed"] == "==0.15.1"


def test_a_cpu_plan_declares_no_cuda() -> None:
    manifest = _manifest(variant="cpu", cuda=None)
    workspace = manifest["workspace"]
    assert isinstance(workspace, dict)
    assert workspace["platforms"] == [{"platform": "linux-64"}]


def test_lock_check_reads_only_the_pixi_toml_cudalock_wrote(tmp_path: Path) -> None:
    path = tmp_path / "pixi.toml"
    assert pixi_changes(path, {"torch": "2.1.0"}) == []  # none there
    path.write_text('[pypi-dependencies]\ntorch = "==1.0"\n')
    assert pixi_changes(path, {"torch": "2.1.0"}) == []  # the user's own
    path.write_text(
        "# pixi.toml, written by cudalock bootstrap (matrix x).\n[pypi-dependencies]\n"
        'torch = { version = "==2.1.0+cu121", index = "https://i/whl/cu121" }\n'
        'extra = "==1"\nmine = { path = "/src/mine", editable = true }\n'
    )
    changes = pixi_changes(path, {"torch": "2.1.0+cu121", "filelock": "3.0"})
    assert changes[:2] == [
        f"{path} pins extra==1, which the lock does not hold",
        f"{path} does not pin filelock (locked at 3.0)",
    ]
    assert "bootstrap --format pixi --force" in changes[-1]
