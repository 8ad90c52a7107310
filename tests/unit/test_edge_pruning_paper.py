"""The paper preset is the authors' Edge Pruning: their per-tensor final circuit, their optimiser's decay on the
padded read tensors, their untrained node Lagrangian in the clipped norm, their graph without embedding nodes."""

from __future__ import annotations

import math

import numpy as np
import torch

from subnetlab.intervene.edges import apply_edges
from subnetlab.methods.edge_pruning.config import EdgePruneConfig, preset_config
from subnetlab.methods.edge_pruning.tensors import padding_size, per_tensor_edges, per_tensor_nodes, read_tensors
from subnetlab.methods.edge_pruning.train import EdgePruner
from subnetlab.methods.l0.trainer import train
from subnetlab.models.circuit import threshold_choice, threshold_search
from subnetlab.models.graph import Graph
from subnetlab.optim import lr_factor
from tests.conftest import tiny_model
from tests.unit.test_edge_pruning import _pairs

# ---- Edge Pruning's src/modeling/l0.py, written out again here as the independent computation
LIMIT_LEFT, LIMIT_RIGHT, EPS, TEMPERATURE, FACTOR = -0.1, 1.1, 1e-6, 2 / 3, 0.8


def cdf_stretched_concrete(x, log_alpha):
    x_01 = (x - LIMIT_LEFT) / (LIMIT_RIGHT - LIMIT_LEFT)
    intermediate = math.log(x_01) - math.log(1 - x_01)
    return torch.clamp(torch.sigmoid(TEMPERATURE * intermediate - log_alpha), EPS, 1 - EPS)


def deterministic_z_from_log_alpha(log_alpha):
    size = np.prod(log_alpha.shape)
    expected_num_zeros = size - torch.sum(1 - cdf_stretched_concrete(0, log_alpha))
    num_zeros = int(torch.round(expected_num_zeros).item())
    soft_mask = torch.sigmoid(log_alpha / TEMPERATURE * FACTOR).reshape(-1)
    if num_zeros > 0:
        _, indices = torch.topk(soft_mask, k=num_zeros, largest=False)
        soft_mask[indices] = 0
    return soft_mask.reshape(log_alpha.shape)


def authors_circuit(layers, heads, tensors, nodes):
    """modeling_fpt2.py's get_edge_masks / get_edge_sparsity / get_node_sparsity / get_edges and eval/ioi.py's
    searches, on authors-layout tensors (with embedding nodes); returns kept edges by subnetlab name."""
    writers = 2 + layers * (heads + 1)
    det = {k: deterministic_z_from_log_alpha(v.clone()) for k, v in tensors.items()}
    node_det = [deterministic_z_from_log_alpha(v.clone()) for v in nodes]

    def real(l):  # (attention offset, MLP offset) of layer l
        return 2 + l * (heads + 1), 2 + l * (heads + 1) + heads

    def edge_masks(t):
        masks = []
        for l in range(layers):
            a, m = real(l)
            masks += [det[f"q{l}"][:a], det[f"k{l}"][:a], det[f"v{l}"][:a], det[f"mlp{l}"][:m]]
        masks.append(det["final"])
        return [mask if t is None else (mask > t).float() for mask in masks]

    def sparsity(masks):
        s, n = 0, 0
        for mask in masks:
            s, n = s + torch.sum(mask), n + mask.numel()
        return 1 - s / n

    def search(of, target):
        l, r = 0, 1
        while r - l > 1e-5:
            threshold = (l + r) / 2
            if of(threshold) > target:
                r = threshold
            else:
                l = threshold
        return threshold

    et = search(lambda t: sparsity(edge_masks(t)), sparsity(edge_masks(None)))
    nt = search(lambda t: sparsity([(n > t).float() for n in node_det]), sparsity(node_det))
    allowed = torch.cat([(n > nt).reshape(-1) for n in node_det])
    names = ["tok_embeds", "pos_embeds"] + [x for l in range(layers) for x in
                                            [f"a{l}.h{h}" for h in range(heads)] + [f"m{l}"]]
    kept, masks = set(), edge_masks(et)
    for l in range(layers):
        q, k, v, mlp = masks[4 * l: 4 * l + 4]
        for kind, mask in (("q", q), ("k", k), ("v", v)):
            for w in range(mask.shape[0]):
                for h in range(heads):
                    if allowed[w] and mask[w, h] == 1:
                        kept.add(f"{names[w]}->a{l}.h{h}<{kind}>")
        kept |= {f"{names[w]}->m{l}" for w in range(mlp.shape[0]) if allowed[w] and mlp[w] == 1}
    kept |= {f"{names[w]}->logits" for w in range(writers) if allowed[w] and masks[-1][w] == 1}
    return kept


def to_subnetlab(graph: Graph, tensors):
    """The authors' tensors as subnetlab's flat edge log-alphas and padding (tensor after tensor)."""
    flat, padding = torch.empty(graph.num_edges), []
    for t in read_tensors(graph):
        if t.name == "logits":
            key = "final"
        elif t.name.startswith("mlp"):
            key = t.name
        else:
            layer, kind = t.name[4:].split(".")
            key = f"{kind}{layer}"
        tensor = tensors[key]
        rows = (t.real // tensor.shape[1]) if tensor.dim() == 2 else t.real
        real = tensor[:rows]
        flat[t.start:t.start + t.real] = real.t().reshape(-1) if tensor.dim() == 2 else real  # reader by reader
        padding.append(tensor[rows:].reshape(-1))
    return flat, torch.cat(padding)


def hand_made(layers=2, heads=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    writers = 2 + layers * (heads + 1)
    tensors = {}
    for l in range(layers):
        for kind in "qkv":
            tensors[f"{kind}{l}"] = torch.randn(writers, heads, generator=g) * 4
        tensors[f"mlp{l}"] = torch.randn(writers, generator=g) * 4
    tensors["final"] = torch.randn(writers, generator=g) * 4
    for l in range(layers):  # padding decayed near 0, as AdamW leaves it (rows of writers at or after the layer)
        a, m = 2 + l * (heads + 1), 2 + l * (heads + 1) + heads
        for kind in "qkv":
            tensors[f"{kind}{l}"][a:] = 0.05 * torch.rand(writers - a, heads, generator=g)
        tensors[f"mlp{l}"][m:] = 0.05 * torch.rand(writers - m, generator=g)
    nodes = [torch.randn(1, generator=g) * 4, torch.randn(1, generator=g) * 4]
    for _ in range(layers):
        nodes += [torch.randn(heads, generator=g) * 4, torch.randn(1, generator=g) * 4]
    return tensors, nodes


def test_threshold_circuit_equals_the_authors_per_tensor_rule():
    spec = tiny_model("gpt2", layers=2).adapter.spec
    graph = Graph.for_family(spec, 2, 2, 2)
    for seed in range(6):
        tensors, nodes = hand_made(seed=seed)
        flat, padding = to_subnetlab(graph, tensors)
        assert padding.numel() == padding_size(graph)
        edges = per_tensor_edges(graph, flat, padding)
        node_values = per_tensor_nodes(graph, torch.cat(nodes))
        own_edges = 1 - edges.sum() / graph.num_edges
        own_nodes = 1 - node_values.sum() / node_values.numel()
        choice = threshold_choice(graph, edges, own_edges, node_values, own_nodes)
        mine = {n for n, k in zip(graph.edge_names, choice.edges.tolist()) if k}
        assert mine == authors_circuit(2, 2, tensors, nodes), seed


def test_padding_closes_real_edges_below_it():
    """A tensor's decayed padding adds ~0.17 expected zeros per entry and closes the real edges below it."""
    spec = tiny_model("gpt2", layers=2).adapter.spec
    graph = Graph.for_family(spec, 2, 2, 2)
    flat = torch.full((graph.num_edges,), 10.0)
    q0 = read_tensors(graph)[0]  # layer 0's queries: 2 real rows (the embeddings) of 8 writers
    flat[q0.start] = -0.5  # one real edge just below the padding's log-alpha 0
    open_padding = per_tensor_edges(graph, flat, torch.full((padding_size(graph),), 10.0))
    decayed = per_tensor_edges(graph, flat, torch.zeros(padding_size(graph)))
    assert open_padding[q0.start] > 0  # alone it rounds to no zero: P(z = 0) = 0.26
    assert decayed[q0.start] == 0  # 12 padded entries at 0 add 2 expected zeros: the real edge goes first
    assert (decayed[q0.start + 1:q0.start + q0.real] > 0).all()


def test_threshold_search_is_the_authors_bisection_last_midpoint():
    values = torch.tensor([0.1, 0.4, 0.6, 0.8])
    t = threshold_search(values, 0.5)
    assert abs(t - 0.6) < 1e-5  # the boundary of the level, from either side
    assert 1 - float((values > t).float().mean()) in (0.5, 0.75)
    assert abs(threshold_search(values, 0.3) - 0.4) < 1e-5


def test_paper_preset_is_the_authors_training_and_demo_is_unchanged():
    paper = preset_config("paper", 0.95)
    assert (paper.optimizer, paper.weight_decay, paper.max_grad_norm) == ("adamw", 0.01, 1.0)
    assert (paper.sparsity_estimate, paper.selection, paper.clip_node_target) == ("sample", "threshold", 0.72)
    assert (paper.lr, paper.lambda_lr, paper.total_steps, paper.warmup_steps, paper.lr_warmup_steps) == \
        (0.8, 0.8, 3000, 2500, 200)
    assert (paper.init_log_alpha, paper.init_std, paper.batch_size, paper.node_sparsity) == (10.0, 0.01, 32, None)
    demo = preset_config("demo", 0.9)
    assert (demo.optimizer, demo.weight_decay, demo.max_grad_norm, demo.sparsity_estimate, demo.selection,
            demo.clip_node_target) == ("adam", 0.0, None, "expected", "connected", None)
    assert (demo.lr, demo.lambda_lr, demo.total_steps, demo.warmup_steps, demo.init_log_alpha) == \
        (0.1, 0.5, 300, 200, 3.0)


def test_padding_decays_as_adamw_and_the_node_lagrangian_stays_untrained(one_thread):
    m = tiny_model("gpt2", layers=2)
    data = _pairs(m, n=16)
    cfg = preset_config("paper", 0.9, batch_size=8, total_steps=12, warmup_steps=8, lr_warmup_steps=3)
    pruner = EdgePruner(m.model, m.adapter, data, cfg)
    start = pruner.padding.detach().clone()
    train(pruner)
    factor = 1.0
    for step in range(cfg.total_steps):
        factor *= 1 - cfg.lr * lr_factor(step, total=cfg.total_steps, warmup=cfg.lr_warmup_steps) * cfg.weight_decay
    assert torch.allclose(pruner.padding.detach(), start * factor, rtol=1e-5)
    assert float(pruner.clip_nodes.lambda1.detach()) == 0.0 and pruner.clip_nodes.lambda1.grad is not None
    assert float(pruner.clip_nodes.lambda1.grad.detach()) != 0.0  # its gradient is in the clipped norm
    selection = pruner.selection()
    assert selection.edges.shape == (pruner.graph.num_edges,)


def test_graph_without_embedding_nodes_counts_and_runs(one_thread):
    m = tiny_model("gpt2", layers=2)
    assert Graph.for_family(m.adapter.spec, 12, 12, 12, embedding_nodes=0).num_edges == 32046
    graph = Graph.from_adapter(m.adapter, embedding_nodes=0)
    assert graph.writers[0] == "a0.h0" and graph.num_embeddings == 0
    ids = torch.randint(3, 90, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = m.model(input_ids=ids).logits
        with apply_edges(m.model, m.adapter, graph, torch.ones(graph.num_edges)):
            kept = m.model(input_ids=ids).logits
    assert torch.allclose(full, kept, atol=1e-5)
    cfg = EdgePruneConfig.from_dict({**preset_config("paper", 0.9).to_dict(), "embedding_nodes": 0,
                                     "total_steps": 2, "warmup_steps": 1, "lr_warmup_steps": 0, "batch_size": 8})
    pruner = EdgePruner(m.model, m.adapter, _pairs(m, n=8), cfg)
    train(pruner)
    assert pruner.selection().edges.numel() == graph.num_edges


def test_circuit_command_paper_preset_without_embedding_nodes(tmp_path, capsys, one_thread):
    import json

    import pytest
    from transformers import GPT2Config

    from subnetlab.cli import main
    from subnetlab.models import build_model
    from subnetlab.subnetwork import Subnetwork
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    build_model(config, head="causal-lm", seed=0).model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        main(["circuit", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=16",
              "--task-option", "n_eval=8", "--sparsity", "0.9", "--seeds", "0", "--preset", "paper",
              "--embedding-nodes", "0", "--set", "total_steps=6", "--set", "warmup_steps=4", "--set",
              "lr_warmup_steps=1", "--set", "batch_size=8", "--out", str(out)])
    assert e.value.code == 0, capsys.readouterr().err
    graph = Graph.load(out / "graph.json")
    assert graph.num_embeddings == 0 and graph.num_edges == Graph(graph.family, 2, 2, 2, 0).num_edges
    run = out / "sparsity-0.900" / "seed-0"
    metrics = json.loads((run / "metrics.json").read_text())
    assert Subnetwork.load(run / "subnetwork.safetensors").count() == metrics["kept_edges"]
