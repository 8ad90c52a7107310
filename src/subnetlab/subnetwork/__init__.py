"""The Subnetwork value: masks, sparsity, set operations, and its .safetensors file."""

from subnetlab.subnetwork.subnetwork import FORMAT, Subnetwork, component_index

__all__ = ["FORMAT", "Subnetwork", "component_index"]
