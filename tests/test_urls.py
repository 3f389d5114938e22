"""Index URL policy (https, or loopback, or --allow-insecure-index) and credential redaction."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudalock.env import RenderOptions, render
from cudalock.errors import UsageError
from cudalock.urls import redact, strip_credentials, validate_index_url
from tests.test_render import make_plan


@pytest.mark.parametrize(
    "url",
    [
        "https://download.pytorch.org/whl/",
        "http://127.0.0.1:8080/whl",
        "http://127.9.9.9/whl",
        "http://[::1]:3141/simple",
        "http://localhost/simple",
        "https://user:tok@mirror.example/simple",
    ],
)
def test_accepted(url: str) -> None:
    assert validate_index_url(url, flag="--pypi-index") == url.rstrip("/")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://mirror.example/whl", "plain http to a non-loopback host"),
        ("http://10.0.0.1/whl", "plain http to a non-loopback host"),
        ("http://localhost.evil.example/whl", "plain http to a non-loopback host"),
        ("ftp://mirror.example/whl", "not an http(s) URL"),
        ("file:///srv/whl", "not an http(s) URL"),
        ("mirror.example/whl", "not an http(s) URL"),
        ("https://mirror.example/whl?x=1", "must not have a query or fragment"),
        ("https://mirror.example/a b", "whitespace or control characters"),
        ("https://mirror.example/a\nb", "whitespace or control characters"),
        ("https://mirror.example:99999/", "not a valid URL"),
    ],
)
def test_refused(url: str, problem: str) -> None:
    with pytest.raises(UsageError, match=re.escape(problem)):
        validate_index_url(url, flag="--pytorch-index")


def test_insecure_flag_allows_plain_http() -> None:
    assert (
        validate_index_url("http://mirror.example/whl", flag="--pytorch-index", allow_insecure=True)
        == "http://mirror.example/whl"
    )


def test_refusal_message_does_not_show_credentials() -> None:
    with pytest.raises(UsageError) as caught:
        validate_index_url("http://bob:hunter2@mirror.example/whl", flag="--pytorch-index")
    assert "hunter2" not in caught.value.message
    assert "http://***@mirror.example/whl" in caught.value.message


def test_redact_and_strip() -> None:
    text = "from https://u:p@a.example/x and http://tok@b.example:8/y, not mail@c.example"
    assert redact(text) == (
        "from https://***@a.example/x and http://***@b.example:8/y, not mail@c.example"
    )
    assert strip_credentials("https://u:p@a.example:8/x") == "https://a.example:8/x"
    assert strip_credentials("https://a.example/x") == "https://a.example/x"


@given(
    st.text(alphabet=st.characters(blacklist_characters="/@"), min_size=1, max_size=20).filter(
        lambda s: not any(ch.isspace() for ch in s)
    )
)
def test_redact_never_leaves_the_secret(secret: str) -> None:
    # (URLs with whitespace are refused before they get anywhere: validate_index_url.)
    assert redact(f"https://{secret}@mirror.example/simple") == "https://***@mirror.example/simple"


def test_hostile_but_valid_index_url_is_quoted_in_install_sh(tmp_path: Path) -> None:
    url = "https://mirror.example/$(touch${IFS}pwned);`touch${IFS}pwned2`'q\"/simple"
    valid = validate_index_url(url, flag="--pypi-index")
    script = render(make_plan(), RenderOptions(name="ft", output_format="venv", pypi_index=valid))[
        "install.sh"
    ]
    # The mirror is the default index: --index-url, before the PyTorch index.
    line = next(ln for ln in script.splitlines() if "--index-url 'https://mirror" in ln)
    quoted = line.split("--index-url ", 1)[1].split(" --extra-index-url", 1)[0].rstrip(" \\")
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert echoed.stdout == url
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_redact_takes_linear_time_on_long_lines() -> None:
    import time

    started = time.monotonic()
    line = "x" * 300_000 + "https://user:pw@host/simple"
    assert redact(line) == "x" * 300_000 + "https://***@host/simple"
    assert time.monotonic() - started < 5
