"""MkDocs hook: docs/reference/cli.md's ``<!-- cli-reference -->`` marker becomes every ``subnetlab`` command's
``--help``, generated at build time from the Typer app (``typer.main.get_command(app)``), so the page is the
command line of the checkout being built, never a copy."""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "<!-- cli-reference -->"
SRC = Path(__file__).resolve().parents[2] / "src"


def _help(command, name: str, parent=None) -> str:
    import click

    ctx = click.Context(command, info_name=name, parent=parent, terminal_width=100, max_content_width=100)
    return command.get_help(ctx), ctx


def cli_reference() -> str:
    """Markdown: the top-level help, then one section per command (and per subcommand of a group), in order."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import click
    import typer

    from subnetlab.cli import app

    root = typer.main.get_command(app)
    text, root_ctx = _help(root, "subnetlab")
    parts = ["```text", text, "```", ""]

    def walk(group, ctx, prefix: str) -> None:
        for name in sorted(group.list_commands(ctx)):
            command = group.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            full = f"{prefix} {name}"
            body, sub_ctx = _help(command, full, parent=None)
            parts.extend([f"## `{full}`", "", "```text", body, "```", ""])
            if isinstance(command, click.Group):
                walk(command, sub_ctx, full)

    walk(root, root_ctx, "subnetlab")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
