"""A few steps of Edge Pruning on a tiny model, as one process or as each rank ``torchrun`` starts (the tests of
``methods.l0.trainer`` across processes): ``torchrun --nproc-per-node 2 tests/unit/torchrun_edge_pruning.py
RESULT.safetensors RUN_DIR``. Rank 0 writes the log-alphas, multipliers and KLs to RESULT (every rank holds the
same ones); a batch of 7 over 2 ranks gives slices of 4 and 3, so the weighting by slice is exercised."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

STEPS = 12


def train_masks(result: Path, run_dir: Path) -> None:
    from subnetlab.distributed import world
    from subnetlab.io import save_tensors
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.train import prune_edges
    from tests.conftest import tiny_model
    from tests.unit.test_edge_pruning import _pairs

    m = tiny_model("llama", layers=2)
    data = _pairs(m, n=21)
    cfg = preset_config("demo", 0.8, seed=1, batch_size=7, accumulation=2, warmup_steps=8, total_steps=STEPS,
                        checkpoint_every=5, node_masks=True)
    out = prune_edges(m.model, m.adapter, data, cfg, run_dir=run_dir)
    if world().is_writer:
        kl = torch.tensor([h["kl"] for h in out.history], dtype=torch.float64)
        lambdas = torch.tensor([[h["lambda1"], h["lambda2"]] for h in out.history], dtype=torch.float64)
        save_tensors(result, {"edges": out.log_alpha_edges, "nodes": out.log_alpha_nodes, "kl": kl,
                              "lambdas": lambdas, "selection": out.selection.edges})


if __name__ == "__main__":
    torch.set_num_threads(1)
    train_masks(Path(sys.argv[1]), Path(sys.argv[2]))
