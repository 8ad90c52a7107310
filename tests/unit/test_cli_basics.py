"""The command-line contract: one `error:` line on stderr, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "subnetlab.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["inspect", "--model", "./no/such/dir"], "no such model directory"),
        (["inspect"], "Missing option '--model'"),
        (["no-such-command"], "No such command"),
    ],
)
def test_bad_input_is_one_error_line_exit_2(args, fragment):
    result = run_cli(*args)
    assert result.returncode == 2
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_models_lists_families_and_alias():
    result = run_cli("models")
    assert result.returncode == 0
    for name in ("bert", "roberta", "gpt2", "vit", "llama", "resnet", "minilm"):
        assert name in result.stdout


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"subnetlab {version('subnetlab')}"
