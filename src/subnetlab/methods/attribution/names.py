"""The attribution methods' names, without torch: the command line's help and option checks read them."""

METHODS = ("eap", "eap-ig", "eap-ig-activations", "clean-corrupted", "exact", "nap", "nap-ig")
IG_METHODS = ("eap-ig", "eap-ig-activations", "nap-ig")  # the methods that read ``steps``
NODE_METHODS = ("nap", "nap-ig")  # a score per node (writer), not per edge (``methods.attribution.nodes``)
ABLATIONS = ("corrupted", "mean")  # what the scored change replaces a writer's clean output with
MEAN_METHODS = ("eap", "nap")  # the methods that take mean ablation (MIB's "EAP (mean)")

__all__ = ["ABLATIONS", "IG_METHODS", "MEAN_METHODS", "METHODS", "NODE_METHODS"]
