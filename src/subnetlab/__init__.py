"""subnetlab: find, analyse and transfer the subnetworks inside trained neural networks.

    import subnetlab as sl
    m = sl.load_model("minilm", head="classification", num_labels=3)
    sub = sl.Subnetwork.from_names(m.adapter, ["L0.H1", "L3.MLP"])
    with sl.apply_gates(m.model, m.adapter, *sub.gates()):
        logits = m.model(**batch).logits
"""

from subnetlab.errors import SubnetlabError
from subnetlab.intervene import (
    ComponentValues,
    apply_gates,
    capture_activations,
    collect_means,
    mask_weights,
)
from subnetlab.models import build_model, get_adapter, load_model
from subnetlab.subnetwork import Subnetwork

__version__ = "0.1.0"
__all__ = [
    "SubnetlabError", "ComponentValues", "apply_gates", "capture_activations", "collect_means",
    "mask_weights", "build_model", "get_adapter", "load_model", "Subnetwork",
]
