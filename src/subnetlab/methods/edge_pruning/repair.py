"""A trained circuit's loss measured exactly, for the greedy repair of ``select.greedy_repair``.

Hard-concrete training optimises a smoothed objective, and a mask that closes
early gets almost no gradient to reopen: the binary circuit it leaves can miss a
better one of the same size by one swapped edge (on an 8-edge GPT-2 the 4-edge
circuit missed the exhaustive optimum by 0.319 in faithfulness). The repair
evaluates binary circuits with the edges applied exactly (no sampling), on the
pruning data, with the run's ablation:

* ``logit_diff``: minus the faithfulness ``f = (m(C) - m(empty)) / (m(N) - m(empty))`` of the mean logit
  difference, ``m(empty)`` the circuit with no edge (MIB's normalisation);
* ``kl``: ``KL(p_full || p_circuit)`` at the prediction position, the training objective without the sampling.

The two optima differ: on that 8-edge model the best 4-edge circuit by KL has ``f`` 0.620, the best by ``f`` 0.733.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.intervene.edges import WriterValues, apply_edges, capture_writers
from subnetlab.methods.edge_pruning.config import REPAIR_OBJECTIVES
from subnetlab.methods.l0.data import PruningData, to_device
from subnetlab.models.adapters import Adapter
from subnetlab.models.graph import Graph
from subnetlab.runtime import model_device
from subnetlab.tasks.circuits.pairs import corrupted_inputs


class CircuitLoss:
    """``loss(keep [edges] bool) -> float``, lower is better (module docstring); counts its ``evaluations``.

    The full model's prediction logits and (under corrupted ablation) every batch's corrupted writer outputs are
    computed once and held: memory grows with the pairs x positions x writers x width of the data."""

    def __init__(self, model: nn.Module, adapter: Adapter, graph: Graph, data: PruningData, objective: str,
                 ablation: str, values: WriterValues | None = None, batch_size: int = 64) -> None:
        if objective not in REPAIR_OBJECTIVES:
            raise SubnetlabError(f"repair objective {objective!r}: expected one of {', '.join(REPAIR_OBJECTIVES)}",
                                 setting="repair_objective")
        self.model, self.adapter, self.graph, self.data, self.objective = model, adapter, graph, data, objective
        self.evaluations = 0
        device = model_device(model)
        self.batches: list[tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Any]] = []
        with torch.no_grad():
            for indices in data.batches(batch_size):
                batch = to_device(data.batch_at(indices), device)
                inputs = data.model_inputs(batch)
                full = data.task_logits(model(**inputs), batch).float()  # [B, V]
                batch_values = capture_writers(model, adapter, corrupted_inputs(batch)) if ablation == "corrupted" \
                    else (values if ablation == "mean" else None)
                self.batches.append((batch, inputs, full, batch_values))
        if objective == "logit_diff":
            self.full = self.logit_diff(torch.ones(graph.num_edges, dtype=torch.bool))
            self.empty = self.logit_diff(torch.zeros(graph.num_edges, dtype=torch.bool))
            if self.full == self.empty:
                raise SubnetlabError("the full model and the empty circuit have the same logit difference: "
                                     "faithfulness is undefined, repair by kl instead", setting="repair_objective")

    @torch.no_grad()
    def circuit_logits(self, keep: Tensor) -> list[Tensor]:
        """``[B, V]`` prediction logits of every batch with only ``keep``'s edges (exact, no sampling)."""
        mask = keep.reshape(-1).float().to(model_device(self.model))
        out = []
        for batch, inputs, _, values in self.batches:
            with apply_edges(self.model, self.adapter, self.graph, mask, values):
                out.append(self.data.task_logits(self.model(**inputs), batch).float())
        return out

    def logit_diff(self, keep: Tensor) -> float:
        total, count = 0.0, 0
        for logits, (batch, _, _, _) in zip(self.circuit_logits(keep), self.batches):
            rows = torch.arange(logits.shape[0], device=logits.device)
            total += float((logits[rows, batch["answer_id"]] - logits[rows, batch["wrong_id"]]).sum())
            count += logits.shape[0]
        return total / count

    def kl(self, keep: Tensor) -> float:
        total, count = 0.0, 0
        for logits, (_, _, full, _) in zip(self.circuit_logits(keep), self.batches):
            log_q, log_p = torch.log_softmax(logits, -1), torch.log_softmax(full, -1)
            total += float(torch.nn.functional.kl_div(log_q, log_p, reduction="sum", log_target=True))
            count += logits.shape[0]
        return total / count

    def faithfulness(self, keep: Tensor) -> float:
        """``f`` of the mean logit difference (the ``logit_diff`` objective only)."""
        return (self.logit_diff(keep) - self.empty) / (self.full - self.empty)

    def __call__(self, keep: Tensor) -> float:
        self.evaluations += 1
        return -self.faithfulness(keep) if self.objective == "logit_diff" else self.kl(keep)


__all__ = ["CircuitLoss", "REPAIR_OBJECTIVES"]
