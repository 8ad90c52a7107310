"""The library speaks in its own terms: no string outside ``subnetlab.cli`` names a command-line flag.

Library errors name the setting at fault (``SubnetlabError(..., setting="sparsity")``); only the CLI
knows which flag sets it. Every string constant is checked: messages, docstrings and f-string parts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import subnetlab

PACKAGE = Path(subnetlab.__file__).resolve().parent
CLI = PACKAGE / "cli"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
OPEN_FLAG = re.compile(r"(?<![\w-])--$")  # an f-string part ending where a flag's name is filled in: f"--{key}"


def flag_mentions(source: str, name: str = "<string>") -> list[tuple[int, str]]:
    """``(line, flag)`` for every flag-like word in a string constant of ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in FLAG.finditer(node.value):
                line = node.lineno + node.value.count("\n", 0, match.start())
                found.append((line, match.group()))
        if isinstance(node, ast.JoinedStr):
            for part, after in zip(node.values, node.values[1:]):
                if (isinstance(part, ast.Constant) and isinstance(part.value, str) and OPEN_FLAG.search(part.value)
                        and isinstance(after, ast.FormattedValue)):
                    found.append((node.lineno, "--{...}"))
    return sorted(found)


def test_the_checker_sees_docstrings_messages_and_fstring_parts() -> None:
    source = ('"""Run with --jobs 2."""\nx = f"{1} --max-retries {2}"\ny = "a -- b, x--y, ---, --9"\nz = b"--bytes"\n'
              'w = f"needs --{key}, x--{key} and a -- {b}"\n')
    assert flag_mentions(source) == [(1, "--jobs"), (2, "--max-retries"), (5, "--{...}")]


def test_no_string_outside_the_cli_names_a_flag() -> None:
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if CLI not in p.parents]
    assert len(files) > 50
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {flag}"
                 for path in files for line, flag in flag_mentions(path.read_text(encoding="utf-8"), str(path))]
    assert not offenders, "library strings name command-line flags:\n" + "\n".join(offenders)
