"""Tiny phrase-structure trees for the HANS-style generator.

A tree is ``(label, *children)``; a child is a tree or one word. Templates
build premises as trees so that "the hypothesis is a constituent" can be
checked against the structure itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Union

Tree = tuple  # (label, *children); a child is a Tree or a single word
Node = Union[Tree, str]


def T(label: str, *children: Node | str) -> Tree:
    """A tree node; a multi-word string child becomes one leaf per word."""
    out: list[Node] = []
    for c in children:
        if isinstance(c, str):
            out.extend(c.split())
        else:
            out.append(c)
    return (label, *out)


def leaves(tree: Node) -> list[str]:
    if isinstance(tree, str):
        return [tree]
    return [w for child in tree[1:] for w in leaves(child)]


def constituents(tree: Node) -> Iterator[list[str]]:
    """The word sequence under every node (leaves included)."""
    yield leaves(tree)
    if not isinstance(tree, str):
        for child in tree[1:]:
            yield from constituents(child)


def render(tree: Node) -> str:
    words = leaves(tree)
    return " ".join([words[0][:1].upper() + words[0][1:], *words[1:], "."])
