"""subnetlab: find, analyse and transfer the subnetworks inside trained neural networks."""

__version__ = "0.1.0"
