"""Ensembles of edge scores: several methods' scores of one graph averaged into one score per edge.

The MIB shared task's best entry (Mondorf et al., BlackboxNLP 2025, "Exploring Ensemble Strategies for Circuit
Localization Methods") combined edge scores of several methods by a plain mean (better than a weighted mean, the
maximum or the minimum), over EAP variants that share one scale, and warm-started Edge Pruning from EAP-IG scores
(``warm_start``). Methods on other scales (log-alphas, exact patching in another metric) need a common
one first; here each method's scores are divided by their largest magnitude (``max_abs``):

* it keeps the sign, which MIB's signed ranking (its CPR) reads, and zero, so an edge no method scores stays 0;
* it keeps each method's ratios between edges (a rank normalisation would flatten a method's few large scores
  into the same steps as its many small ones, and loses the sign);
* the mean of ``max_abs`` scores is one of the reductions the shared task compared, on a scale every method has.

``none`` is the plain mean of the shared task's parallel ensemble, for methods already on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from subnetlab.errors import SubnetlabError

NORMALISATIONS = ("max_abs", "none")


def normalised(scores: Tensor, normalisation: str = "max_abs") -> Tensor:
    """``[edges]`` float64 scores on the ensemble's scale (module docstring); all-zero scores stay zero."""
    if normalisation not in NORMALISATIONS:
        raise SubnetlabError(f"normalisation {normalisation!r}: choose one of {', '.join(NORMALISATIONS)}",
                             setting="normalisation")
    flat = scores.detach().reshape(-1).cpu().double()
    if bool(torch.isnan(flat).any()):
        raise SubnetlabError("scores hold NaN values; every edge needs a score", setting="scores")
    if normalisation == "none":
        return flat
    largest = float(flat.abs().max()) if flat.numel() else 0.0
    return flat / largest if largest > 0 else flat


def average_scores(scores: Sequence[Tensor], normalisation: str = "max_abs",
                   weights: Sequence[float] | None = None) -> Tensor:
    """``[edges]`` the (weighted) mean of each method's ``normalised`` scores, in float32 when every input is."""
    if not scores:
        raise SubnetlabError("an ensemble needs the scores of at least one method", setting="scores")
    sizes = {s.numel() for s in scores}
    if len(sizes) != 1:
        raise SubnetlabError(f"ensemble members score {sorted(sizes)} edges; they need the same number of edges "
                             "(scores of one graph)", setting="scores")
    if weights is None:
        weights = [1.0] * len(scores)
    if len(weights) != len(scores) or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise SubnetlabError(f"ensemble weights {list(weights)}: one non-negative weight per member, not all zero",
                             setting="weights")
    total = sum(float(w) * normalised(s, normalisation) for w, s in zip(weights, scores))
    mean = total / float(sum(weights))
    dtype = torch.float64 if any(s.dtype == torch.float64 for s in scores) else torch.float32
    return mean.to(dtype)


__all__ = ["NORMALISATIONS", "average_scores", "normalised"]
