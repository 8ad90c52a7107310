"""A report's table of search controls: the found masks over seeds beside the same search where there is nothing
to find (``runs.controls``' comparison of one target)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any


def _mean_sd(values: Any, scale: float, digits: int) -> str:
    got = [float(v) * scale for v in values or [] if v is not None]
    if not got:
        return "-"
    sd = statistics.stdev(got) if len(got) > 1 else 0.0
    return f"{statistics.fmean(got):.{digits}f} (s.d. {sd:.{digits}f})"


def controls_table(entry: Mapping[str, Any], score: str, *, scale: float = 1.0, digits: int = 2,
                   what: str = "") -> tuple[list[str], list[list[str]], str]:
    """``(headers, rows, caption)``: one row per kind (the real search, then each control) with its seeds, score,
    faithfulness where measured, and kept fraction; the caption says whether the real masks beat every control
    beyond the seed spread."""
    kinds = [k for k in entry if k not in ("score", "verdict", "stability")]
    faithful = any("faithfulness" in entry[k] for k in kinds)
    rows = [[k, ", ".join(map(str, entry[k].get("seeds") or [])), _mean_sd(entry[k].get("score"), scale, digits),
             *([_mean_sd(entry[k].get("faithfulness"), 1.0, 2)] if faithful else []),
             _mean_sd(entry[k].get("density"), 100.0, 1)] for k in kinds]
    verdict = entry.get("verdict") or {}
    word = {True: "yes", False: "no", None: "undecided"}[verdict.get("beats")]
    return (["search", "seeds", score, *(["faithfulness"] if faithful else []), "kept %"], rows,
            f"Search controls{what}: the same search and budget on the model re-initialised by its own "
            "initialiser (`random-weights`) and with the answers permuted (`shuffled-labels`). Beats every control by "
            f"more than the seed spread (the two s.d.s summed): {word} ({verdict.get('reason', 'no verdict')}).")


__all__ = ["controls_table"]
