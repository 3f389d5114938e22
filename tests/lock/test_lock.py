"""Unit tests of the pure parts of ``cudalock lock``: uv's input, the record, ``--check``."""

from __future__ import annotations

import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.pylock import Pylock
from packaging.requirements import Requirement

from cudalock.errors import EnvironmentFailure, InputError, Unsatisfiable, UsageError
from cudalock.lock.check import LockState, compare, pins_missing_from_lock
from cudalock.lock.installfiles import requirements_files, uv_first_lock, uv_settings
from cudalock.lock.names import LOCK_FILES
from cudalock.lock.pylock import finalize_lock, is_ours, lock_record, parse_lock, state_of
from cudalock.lock.uv import find_uv, run_uv, uv_environment
from cudalock.lock.uvfailures import classify_uv_failure, missing_from_index
from cudalock.lock.uvinput import (
    LockInput,
    build_interpreter,
    input_project,
    input_requirements,
    lock_input,
    target_glibc,
    uv_compile_args,
    uv_python_platform,
)
from cudalock.model import Gpu, Host, PackagePin, Plan, Target
from cudalock.request import Framework, Request, make_request, parse_framework
from cudalock.tomlfile import tomllib
from cudalock.versions import parse_compute_capability, parse_cuda_version, parse_driver_version

PT = "https://download.pytorch.org/whl"
CU121 = f"{PT}/cu121"
PYPI = "https://pypi.org/simple"


def target(
    driver: str = "535.104.05",
    cc: str = "8.0",
    *,
    source: str = "override",
    glibc: str | None = None,
    platform: str = "linux-x86_64",
) -> Target:
    return Target(
        platform=platform,
        driver_version=parse_driver_version(driver),
        driver_cuda=parse_cuda_version("12.2"),
        gpus=(Gpu("A100", parse_compute_capability(cc)),),
        host=Host(glibc=glibc, hostname="secret-node", memory_total_bytes=1 << 40),
        source=source,
    )


def plan(
    *,
    targets: tuple[Target, ...] = (),
    python: str = "3.11",
    packages: tuple[PackagePin, ...] | None = None,
    matrix_version: str = "2026-11-29",
) -> Plan:
    return Plan(
        matrix_version=matrix_version,
        python=python,
        platform="linux-x86_64",
        compat="strict",
        torch_version="2.1.0",
        variant="cu121",
        cuda=parse_cuda_version("12.1"),
        cudnn="8.9.2.26",
        index_url=CU121,
        packages=packages
        if packages is not None
        else (
            PackagePin("torch", "2.1.0+cu121", CU121),
            PackagePin("torchvision", "0.16.0+cu121", CU121),
            PackagePin("deepspeed", "0.19.8", None),
        ),
        targets=targets or (target(),),
    )


REQUEST = make_request(torch="==2.1.0", python="3.11", with_packages=("torchvision", "deepspeed"))


# --- uv's input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "glibc", "expected"),
    [
        ("linux-x86_64", None, "x86_64-manylinux_2_28"),
        ("linux-x86_64", "2.17", "x86_64-manylinux_2_17"),
        ("linux-x86_64", "2.36", "x86_64-manylinux_2_36"),
        ("linux-x86_64", "2.12", "x86_64-manylinux_2_17"),  # below uv's oldest: its floor
        ("linux-x86_64", "2.45", "x86_64-manylinux_2_40"),  # above uv's newest: its ceiling
        ("linux-aarch64", None, "aarch64-manylinux_2_28"),
        ("windows-x86_64", None, "x86_64-pc-windows-msvc"),
        ("macos-arm64", "2.36", "aarch64-apple-darwin"),
    ],
)
def test_uv_python_platform(platform: str, glibc: str | None, expected: str) -> None:
    assert uv_python_platform(platform, glibc) == expected


def test_unknown_platform_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="linux-x86_64, linux-aarch64"):
        uv_python_platform("solaris-sparc")


def test_glibc_comes_only_from_probed_targets() -> None:
    # Override flags carry this machine's host facts, which say nothing about the target.
    assert target_glibc([target(glibc="2.36", source="override")]) is None
    assert (
        target_glibc(
            [target(glibc="2.35", source="nvml"), target(glibc="2.31", source="file:node2.json")]
        )
        == "2.31"
    )


def test_lock_input_routes_the_torch_family_to_its_index_only() -> None:
    inp = lock_input(plan(), REQUEST)
    assert inp.requirements == (
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
        "deepspeed==0.19.8",
    )
    assert [(r.name, r.url, r.packages) for r in inp.routes] == [
        ("pytorch-cu121", CU121, ("torch", "torchvision"))
    ]
    assert inp.default_index == PYPI
    assert inp.index_for("Torch") == CU121
    assert inp.index_for("deepspeed") == PYPI
    assert (inp.python, inp.python_platform) == ("3.11", "x86_64-manylinux_2_28")


def test_lock_input_adds_unpinned_requests_and_keeps_mirror_pins_unrouted() -> None:
    mirror = "https://mirror.example/simple"
    request = make_request(
        with_packages=("torchaudio>=2.1",),
        frameworks=("finetunekit==1.0",),
        pypi_index=mirror,
    )
    pins = (
        PackagePin("torch", "2.1.0+cu121", CU121),
        PackagePin("torchvision", "0.16.0+cu121", CU121),
        PackagePin("deepspeed", "0.19.8", mirror),
    )  # resolve names the mirror for PyPI pins
    inp = lock_input(plan(packages=pins), request)
    assert inp.requirements[-2:] == ("torchaudio>=2.1", "finetunekit==1.0")
    assert inp.default_index == mirror
    assert inp.routes[0].packages == ("torch", "torchvision")


def test_lock_input_refuses_plain_http_mirrors_unless_allowed() -> None:
    with pytest.raises(UsageError, match="plain http") as caught:
        lock_input(plan(), REQUEST, pypi_index="http://u:pw@mirror.example/simple")
    assert "pw" not in caught.value.message
    inp = lock_input(
        plan(), REQUEST, pypi_index="http://mirror.example/simple", allow_insecure=True
    )
    assert inp.default_index == "http://mirror.example/simple"
    loopback = lock_input(plan(), REQUEST, pypi_index="http://127.0.0.1:8080/simple/")
    assert loopback.default_index == "http://127.0.0.1:8080/simple"


def test_path_and_url_frameworks_go_to_a_requirements_file_uv_reads_beside_the_project() -> None:
    request = make_request(
        frameworks=("/src/LLaMA-Factory", "git+https://example.org/fw.git@v1", "peft>=0.15")
    )
    inp = lock_input(plan(), request)
    assert inp.local == ("-e file:///src/LLaMA-Factory", "git+https://example.org/fw.git@v1")
    assert inp.requirements[-1] == "peft>=0.15"
    assert input_requirements(inp) == (
        "-e file:///src/LLaMA-Factory\ngit+https://example.org/fw.git@v1\n"
    )
    args = uv_compile_args("uv", inp, upgrade=False, cache_dir=None)
    assert args[3:5] == ["pyproject.toml", "requirements.in"]
    assert input_requirements(lock_input(plan(), REQUEST)) is None


def test_extras_family_and_additions_reach_uv_routed_as_the_plan_is() -> None:
    request = make_request(frameworks=("transformers>=4.40", "llamafactory==0.9.4"))
    inp = lock_input(
        plan(),
        request,
        family=(PackagePin("torchaudio", "2.1.0+cu121", CU121),),
        extras={"transformers>=4.40": ("torch",)},
        additions=("setuptools", "nvidia-ml-py"),
    )
    assert inp.requirements == (
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
        "deepspeed==0.19.8",
        "torchaudio==2.1.0+cu121",
        "transformers[torch]>=4.40",
        "llamafactory==0.9.4",
        "setuptools",
        "nvidia-ml-py",
    )
    assert inp.routes[0].packages == ("torch", "torchvision", "torchaudio")
    assert inp.index_for("torchaudio") == CU121


def test_a_framework_the_plan_pins_or_pairs_with_torch_is_refused() -> None:
    with pytest.raises(UsageError, match="already pins"):
        # make_request refuses it first; lock_input refuses it for library callers too.
        framework = Framework("deepspeed>=0.15", "requirement", Requirement("deepspeed>=0.15"))
        lock_input(plan(), replace(REQUEST, frameworks=(framework,)))


def test_input_project_pins_routed_packages_to_an_explicit_index() -> None:
    project = tomllib.loads(input_project(lock_input(plan(), REQUEST)))
    assert project["project"]["dependencies"] == [
        "torch==2.1.0+cu121",
        "torchvision==0.16.0+cu121",
        "deepspeed==0.19.8",
    ]
    assert project["tool"]["uv"]["index"] == [
        {"name": "pytorch-cu121", "url": CU121, "explicit": True}
    ]
    assert project["tool"]["uv"]["sources"] == {
        "torch": {"index": "pytorch-cu121"},
        "torchvision": {"index": "pytorch-cu121"},
    }


def test_uv_arguments_target_the_plan_and_ignore_user_config() -> None:
    inp = lock_input(plan(), REQUEST)
    args = uv_compile_args("uv", inp, upgrade=True, cache_dir=Path("/c"))
    assert args[:4] == ["uv", "pip", "compile", "pyproject.toml"]
    joined = " ".join(args)
    for piece in (
        "--format pylock.toml",
        "--python-version 3.11",
        "--python-platform x86_64-manylinux_2_28",
        "--no-config",
        "--upgrade",
        "--cache-dir /c",
        "--output-file pylock.toml",
    ):
        assert piece in joined
    assert PYPI not in joined  # passed through the environment, never argv
    assert "--upgrade" not in uv_compile_args("uv", inp, upgrade=False, cache_dir=None)


def test_uv_builds_with_this_interpreter_only_when_it_is_the_target_python() -> None:
    assert (
        build_interpreter("3.11", executable="/py", version=(3, 11), free_threaded=False) == "/py"
    )
    assert build_interpreter("3.12", executable="/py", version=(3, 11), free_threaded=False) is None
    assert (
        build_interpreter("3.13t", executable="/py", version=(3, 13), free_threaded=False) is None
    )
    assert (
        build_interpreter("3.13t", executable="/py", version=(3, 13), free_threaded=True) == "/py"
    )
    assert build_interpreter("3.13", executable="/py", version=(3, 13), free_threaded=True) is None
    assert build_interpreter("3.11", executable="", version=(3, 11), free_threaded=False) is None
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    inp = lock_input(plan(), REQUEST)
    args = uv_compile_args("uv", inp, upgrade=False, cache_dir=None)
    if inp.python == running and build_interpreter(running) is not None:
        assert args[args.index("--python") + 1] == sys.executable
    else:
        assert "--python" not in args


def test_uv_environment_drops_index_routing_and_sets_limits() -> None:
    env = uv_environment(
        {
            "UV_INDEX_URL": "https://evil",
            "UV_EXTRA_INDEX_URL": "x",
            "HOME": "/root",
            "UV_CACHE_DIR": "/shared",
        },
        timeout_s=7,
        retries=2,
    )
    assert "UV_INDEX_URL" not in env and "UV_EXTRA_INDEX_URL" not in env
    assert env["HOME"] == "/root" and env["UV_CACHE_DIR"] == "/shared"
    assert (env["UV_HTTP_TIMEOUT"], env["UV_HTTP_RETRIES"]) == ("7", "2")


# --- the lock file ----------------------------------------------------------------------------

UV_OUTPUT = """\
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "nvidia-cudnn-cu12"
version = "8.9.2.26"
marker = "platform_machine == 'x86_64' and sys_platform == 'linux'"
wheels = [{ url = "https://files.example/nvidia_cudnn_cu12-8.9.2.26-py3-none-manylinux1_x86_64.whl", hashes = { sha256 = "aa" } }]

[[packages]]
name = "torch"
version = "2.1.0+cu121"
wheels = [{ url = "https://download.pytorch.org/whl/cu121/torch-2.1.0%2Bcu121-cp311-cp311-linux_x86_64.whl", hashes = { sha256 = "bb" } }]

[[packages]]
name = "deepspeed"
version = "0.19.8"
sdist = { url = "https://files.example/deepspeed-0.19.8.tar.gz", hashes = { sha256 = "cc" } }
"""  # noqa: E501


def finalized(p: Plan | None = None, request: Request = REQUEST) -> tuple[str, LockInput]:
    p = p or plan()
    inp = lock_input(p, request)
    record = lock_record(p, request, inp, cudalock_version="9.9", uv_version="0.13.9")
    text, _data = finalize_lock(tomllib.loads(UV_OUTPUT), record, inp, cudalock_version="9.9")
    return text, inp


def test_finalized_lock_is_valid_pep751_and_records_its_inputs() -> None:
    text, _inp = finalized()
    lock, data = parse_lock(text, source="test")
    assert isinstance(lock, Pylock)
    assert data["created-by"] == "cudalock"
    assert data["requires-python"] == "==3.11.*"
    assert data["environments"] == ["sys_platform == 'linux' and platform_machine == 'x86_64'"]
    indexes = {p.name: p.index for p in lock.packages}
    assert indexes == {"nvidia-cudnn-cu12": PYPI, "torch": CU121, "deepspeed": PYPI}
    record = data["tool"]["cudalock"]
    assert record["cudalock-version"] == "9.9"
    assert record["matrix-version"] == "2026-11-29"
    assert record["targets"] == [
        {
            "name": "this machine",
            "platform": "linux-x86_64",
            "driver-version": "535.104.05",
            "driver-cuda": "12.2",
            "compute-capabilities": ["8.0"],
        }
    ]
    assert record["plan"]["torch"]["variant"] == "cu121"
    assert "secret-node" not in text  # host names stay out of committed lockfiles


def test_credentials_never_reach_the_lock() -> None:
    request = make_request(
        torch="==2.1.0",
        pytorch_index="https://u:tok@mirror.example/whl",
        pypi_index="https://u:tok@mirror.example/simple",
    )
    pins = (PackagePin("torch", "2.1.0+cu121", "https://u:tok@mirror.example/whl/cu121"),)
    text, inp = finalized(plan(packages=pins), request)
    assert "tok" not in text
    lock, _ = parse_lock(text, source="test")
    files = requirements_files(
        lock,
        default_index=inp.default_index,
        python="3.11",
        platform="linux-x86_64",
        cudalock_version="9.9",
    )
    assert not [name for name, body in files.items() if "tok" in body]
    assert "tok" not in uv_settings(lock, default_index=inp.default_index, cudalock_version="9")


def test_a_token_in_a_vcs_framework_never_reaches_the_lock() -> None:
    framework = "git+https://alice:TOKEN@git.example/org/fw.git@v1"
    request = make_request(torch="==2.1.0", python="3.11", frameworks=(framework,))
    p = plan()
    inp = lock_input(p, request)
    # uv records the VCS URL as it was given, token and all.
    uv_text = UV_OUTPUT + (
        '\n[[packages]]\nname = "fw"\nversion = "1.0"\nvcs = { type = "git", url = '
        '"https://alice:TOKEN@git.example/org/fw.git", requested-revision = "v1", '
        'commit-id = "0123456789abcdef0123456789abcdef01234567" }\n'
    )
    record = lock_record(p, request, inp, cudalock_version="9.9", uv_version="0.13.9")
    text, _data = finalize_lock(tomllib.loads(uv_text), record, inp, cudalock_version="9.9")
    assert "TOKEN" not in text and "alice" not in text
    lock, data = parse_lock(text, source="test")
    vcs = next(package.vcs for package in lock.packages if package.name == "fw")
    assert vcs is not None and vcs.url == "https://git.example/org/fw.git"
    assert vcs.commit_id == "0123456789abcdef0123456789abcdef01234567"
    recorded = data["tool"]["cudalock"]["request"]["frameworks"]
    assert recorded == ["git+https://git.example/org/fw.git@v1"]
    # --check compares records made the same way: the token does not make the lock stale.
    assert LockState.from_record(data["tool"]["cudalock"], source="test").request == (
        state_of(p, request).request
    )


def test_requirements_files_split_what_is_built_against_torch_from_the_rest() -> None:
    text, inp = finalized()
    lock, _ = parse_lock(text, source="test")
    files = requirements_files(
        lock,
        default_index=inp.default_index,
        python="3.11",
        platform="linux-x86_64",
        cudalock_version="9.9",
    )
    first = files["requirements.lock.txt"].splitlines()
    assert first[4:] == [
        f"--index-url {PYPI}",
        f"--extra-index-url {CU121}",
        "",
        'nvidia-cudnn-cu12==8.9.2.26 ; platform_machine == "x86_64" and sys_platform == "linux" \\',
        "    --hash=sha256:aa",
        "torch==2.1.0+cu121 \\",
        "    --hash=sha256:bb",
    ]
    assert "--no-build-isolation" in files["requirements.last.txt"]
    assert files["requirements.last.txt"].splitlines()[3:] == [
        f"--index-url {PYPI}",
        "",
        "deepspeed==0.19.8 \\",
        "    --hash=sha256:cc",
    ]


def test_uv_settings_build_deepspeed_against_the_locked_torch() -> None:
    text, inp = finalized()
    lock, _ = parse_lock(text, source="test")
    settings = tomllib.loads(
        uv_settings(lock, default_index=inp.default_index, cudalock_version="9.9")
    )
    assert settings["extra-build-dependencies"] == {"deepspeed": ["torch==2.1.0+cu121"]}
    assert settings["index"] == [
        {"name": "pytorch-cu121", "url": CU121},
        {"name": "default", "url": PYPI, "default": True},
    ]


def test_a_build_the_index_lacks_is_named_with_its_index() -> None:
    inp = lock_input(plan(), REQUEST)
    err = missing_from_index(
        "  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because torch was not found in the package registry and the request needs "
        "torch==2.1.0+cu121, we can conclude that your requirements are unsatisfiable.\n",
        inp,
    )
    assert err is not None and err.exit_code == 3
    assert err.message == f"{CU121} serves no torch==2.1.0+cu121 for Python 3.11 on linux-x86_64"
    assert missing_from_index("Because finetunekit==1.0 depends on torch>=2.4", inp) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lock-version = [", "not valid TOML"),
        ('lock-version = "1.0"\npackages = []\n', "not a valid PEP 751 lock"),  # no created-by
        (
            'lock-version = "1.0"\ncreated-by = "x"\n[[packages]]\nname = "a"\nversion = "1"\n'
            'wheels = [{ url = "https://x/a.whl", hashes = {} }]\n',
            "not a valid PEP 751 lock",
        ),
    ],
)
def test_invalid_locks_are_input_errors(text: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        parse_lock(text, source="pylock.toml")


def test_is_ours_tells_cudalock_files_from_others(tmp_path: Path) -> None:
    text, inp = finalized()
    lock, data = parse_lock(text, source="test")
    texts = {"pylock.toml": text}
    texts |= requirements_files(
        lock,
        default_index=inp.default_index,
        python=inp.python,
        platform=inp.platform,
        cudalock_version="9.9",
    )
    texts["uv-install.toml"] = uv_settings(
        lock, default_index=inp.default_index, cudalock_version="9.9"
    )
    texts["pylock.first.toml"] = uv_first_lock(data, cudalock_version="9.9")
    assert sorted(texts) == sorted(LOCK_FILES)
    foreign = {
        "pylock.toml": 'lock-version = "1.0"\ncreated-by = "pip"\n',
        "pylock.first.toml": 'lock-version = "1.0"\ncreated-by = "pip"\n',
        "requirements.lock.txt": "torch==2.1.0\n",
        "requirements.last.txt": "deepspeed\n",
        "uv-install.toml": "# mine\n[pip]\nno-build-isolation = true\n",
    }
    (tmp_path / "other").mkdir()
    for name in LOCK_FILES:
        ours = tmp_path / name
        ours.write_text(texts[name])
        assert is_ours(ours), name  # regenerated without --force
        theirs = tmp_path / "other" / name
        theirs.write_text(foreign[name])
        assert not is_ours(theirs), name


# --- uv failures ------------------------------------------------------------------------------


def test_no_solution_is_unsatisfiable() -> None:
    err = classify_uv_failure(
        "  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because finetunekit==1.0 depends on torch>=2.4 ...\n"
    )
    assert isinstance(err, Unsatisfiable)
    assert "finetunekit==1.0 depends on torch>=2.4" in err.message


def test_network_failure_is_an_environment_failure() -> None:
    err = classify_uv_failure(
        "error: Request failed after 3 retries\n"
        "  Caused by: Failed to fetch: `https://***@mirror.example/simple/filelock/`\n"
        "  Caused by: HTTP status server error (500 Internal Server Error)\n"
    )
    assert isinstance(err, EnvironmentFailure)
    assert err.exit_code == 3
    assert "Request failed after 3 retries" in err.message
    assert "500 Internal Server Error" in err.message
    assert err.message.startswith("resolving the closure failed")


def test_a_failed_sdist_build_is_named() -> None:
    err = classify_uv_failure(
        "error: Failed to build `deepspeed==0.19.8`\n"
        "  cause: The build backend returned an error\n"
        "  cause: ModuleNotFoundError: No module named 'torch'\n"
    )
    assert isinstance(err, EnvironmentFailure)
    assert err.message.startswith("uv had to build deepspeed==0.19.8 from source")


def test_run_uv_streams_stderr_redacted(tmp_path: Path) -> None:
    script = tmp_path / "fake-uv"
    script.write_text(
        "#!/bin/sh\necho 'Fetching https://user:s3cret@mirror.example/x' >&2\necho done\nexit 4\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    seen: list[str] = []
    result = run_uv([str(script)], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, echo=seen.append)
    assert seen == ["Fetching https://***@mirror.example/x"]
    assert result.returncode == 4 and not result.ok
    assert "s3cret" not in result.stderr and result.stdout == "done\n"


def test_run_uv_reads_a_lock_larger_than_a_pipe_buffer_while_uv_still_talks(
    tmp_path: Path,
) -> None:
    # uv prints the whole pylock on stdout as well (90 KB for a real closure) and talks on
    # stderr meanwhile: reading one stream to the end first would block both processes.
    script = tmp_path / "fake-uv"
    script.write_text(
        "#!/bin/sh\n"
        "echo 'Resolved 134 packages' >&2\n"
        "head -c 300000 /dev/zero | tr '\\0' x\n"
        "head -c 100000 /dev/zero | tr '\\0' y >&2\n"
        "echo >&2\n"
        "echo done >&2\n"
    )
    script.chmod(0o755)
    seen: list[str] = []
    result = run_uv([str(script)], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, echo=seen.append)
    assert result.ok
    assert len(result.stdout) == 300_000
    assert seen[0] == "Resolved 134 packages" and seen[-1] == "done"


def test_a_uv_run_past_its_limit_is_stopped_and_says_so(tmp_path: Path) -> None:
    script = tmp_path / "fake-uv"
    script.write_text("#!/bin/sh\nsleep 30 &\nwait\n")
    script.chmod(0o755)
    with pytest.raises(EnvironmentFailure, match=r"did not finish within 0\.5 s") as caught:
        run_uv([str(script)], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=0.5)
    assert caught.value.exit_code == 3


def test_missing_uv_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uv", None)  # the uv package is not installed
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EnvironmentFailure) as caught:
        find_uv()
    assert caught.value.exit_code == 3
    assert caught.value.hint is not None and "pip install uv" in caught.value.hint


# --- --check ----------------------------------------------------------------------------------


def recorded_state(p: Plan | None = None, request: Request = REQUEST) -> LockState:
    text, _ = finalized(p, request)
    _lock, data = parse_lock(text, source="test")
    return LockState.from_record(data["tool"]["cudalock"], source="pylock.toml")


def test_check_finds_nothing_when_inputs_are_unchanged() -> None:
    assert compare(recorded_state(), state_of(plan(), REQUEST)) == []


def test_check_names_a_new_driver() -> None:
    now = state_of(plan(targets=(target("550.54.14"),)), REQUEST)
    assert compare(recorded_state(), now) == [
        "the target's NVIDIA driver changed: 535.104.05 → 550.54.14"
    ]


def test_check_names_new_gpus_matrix_python_and_spec() -> None:
    changed = plan(targets=(target(cc="9.0"),), python="3.10", matrix_version="2027-01-15")
    request = make_request(
        torch=">=2.1,<2.2", python="3.10", with_packages=("torchvision", "deepspeed")
    )
    assert compare(recorded_state(), state_of(changed, request)) == [
        "the compatibility matrix changed: 2026-11-29 → 2027-01-15",
        "the target's GPU compute capabilities changed: 8.0 → 9.0",
        "the spec's torch requirement changed: ==2.1.0 → >=2.1,<2.2",
        "the spec's Python requirement changed: 3.11 → 3.10",
        "the target Python changed: 3.11 → 3.10",
    ]


def test_check_names_an_added_framework() -> None:
    before = replace(REQUEST, frameworks=(parse_framework("transformers"),))
    after = replace(REQUEST, frameworks=(*before.frameworks, parse_framework("peft")))
    assert compare(recorded_state(request=before), state_of(plan(), after)) == [
        "the spec's frameworks (--framework) changed: transformers → transformers, peft"
    ]


def test_check_names_a_changed_pin_and_a_new_node() -> None:
    pins = (
        PackagePin("torch", "2.1.2+cu121", CU121),
        PackagePin("torchvision", "0.16.2+cu121", CU121),
        PackagePin("deepspeed", "0.19.8", None),
    )
    assert compare(recorded_state(), state_of(plan(packages=pins), REQUEST)) == [
        "the plan's torch changed: 2.1.0+cu121 → 2.1.2+cu121",
        "the plan's torchvision changed: 0.16.0+cu121 → 0.16.2+cu121",
    ]
    fleet = plan(targets=(target(), target("550.54.14")))
    assert compare(recorded_state(), state_of(fleet, REQUEST)) == [
        "the targets changed: 1 node(s) when locked, 2 now"
    ]


def test_check_catches_a_hand_edited_lock() -> None:
    assert pins_missing_from_lock({"torch": "2.1.0+cu121"}, {"torch": "2.5.0"}) == [
        "the lock pins torch 2.5.0, the plan says 2.1.0+cu121"
    ]
    assert pins_missing_from_lock({"torch": "2.1.0+cu121"}, {"torch": "2.1.0+cu121"}) == []


def test_a_lock_without_our_record_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"no \[tool\.cudalock\] record"):
        LockState.from_record(None, source="pylock.toml")
    with pytest.raises(InputError, match="malformed"):
        LockState.from_record({"plan": {}}, source="pylock.toml")
