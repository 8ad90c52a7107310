"""Gradient attribution on the edge graph: EAP, EAP-IG (``scores``, with mean ablation) and node-level attribution
patching, NAP and NAP-IG (``nodes``).

The functions load with their module (torch) on first use, so the methods' names (``names``) stay light."""

from subnetlab.methods.attribution.names import METHODS

_SCORES = ("AttributionScores", "attribute", "attribute_batch", "clean_means", "node_scores")


def __getattr__(name: str):
    if name in _SCORES:
        from subnetlab.methods.attribution import scores

        return getattr(scores, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["METHODS", *_SCORES]
