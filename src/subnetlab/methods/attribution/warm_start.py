"""Edge Pruning warm-started from attribution scores: scores to starting log-alphas.

The best entry of MIB's 2025 circuit-localisation track started Edge Pruning from EAP-IG scores. The mapping
here: with ``k`` the edges the target keeps (``round((1 - sparsity) * edges)``), ``tau`` the midpoint between the
``k``-th and ``k+1``-th largest ``|score|`` and ``spread`` the median distance of ``|score|`` from ``tau``::

    log_alpha_e = scale * clamp((|score_e| - tau) / spread, -1, 1)

so the ``k`` edges the scores would keep start kept (log-alpha > 0, keep probability above one half), the rest
start removed, the ones near the threshold start undecided (log-alpha near 0, where the hard-concrete gate's
gradient is largest), and no edge starts further from the boundary than a cold start's constant ``scale``
(Edge Pruning's ``init_log_alpha``). Scores are ranked by magnitude, as circuits are selected from them.
"""

from __future__ import annotations

from torch import Tensor

from subnetlab.errors import SubnetlabError


def warm_start_log_alphas(scores: Tensor, sparsity: float, scale: float) -> Tensor:
    """``[edges]`` starting log-alphas from ``[edges]`` attribution scores (module docstring)."""
    if not 0.0 <= sparsity < 1.0:
        raise SubnetlabError(f"target sparsity {sparsity} must be in [0, 1)", setting="sparsity")
    if scale <= 0:
        raise SubnetlabError(f"log-alpha scale {scale} must be positive", setting="init_log_alpha")
    magnitude = scores.detach().double().abs().reshape(-1).cpu()
    n = magnitude.numel()
    k = min(max(round((1.0 - sparsity) * n), 1), n)
    ordered = magnitude.sort(descending=True).values
    tau = float(ordered[k - 1] + ordered[k]) / 2 if k < n else float(ordered[-1]) - 1e-12
    spread = float((magnitude - tau).abs().median()) or 1.0
    return (scale * ((magnitude - tau) / spread).clamp(-1.0, 1.0)).float()


__all__ = ["warm_start_log_alphas"]
