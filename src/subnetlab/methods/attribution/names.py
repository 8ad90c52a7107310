"""The attribution methods' names, without torch: the command line's help and option checks read them."""

METHODS = ("eap", "eap-ig", "eap-ig-activations", "clean-corrupted", "exact")
IG_METHODS = ("eap-ig", "eap-ig-activations")  # the methods that read ``steps``

__all__ = ["IG_METHODS", "METHODS"]
