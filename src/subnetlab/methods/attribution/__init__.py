"""Gradient attribution on the edge graph: EAP, EAP-IG and node-level attribution patching (``scores``)."""

from subnetlab.methods.attribution.scores import (METHODS, AttributionScores, attribute, attribute_batch,
                                                  node_scores)

__all__ = ["METHODS", "AttributionScores", "attribute", "attribute_batch", "node_scores"]
