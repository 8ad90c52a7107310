"""CPR / CMD of EAP, EAP-IG (k=5), cold and warm-started Edge Pruning at equal steps, on a small model and task.

A 2-layer GPT-2-style model (hidden 64, 4 heads) is trained here for a few hundred steps to answer the builtin
IOI-style task (``circuit:ioi``, the tests' tiny byte-level tokenizer), so it has a circuit to find. Then, on the
same training pairs: EAP and EAP-IG scores; Edge Pruning (``demo`` preset, target sparsity ``--sparsity``) from
the cold constant start and warm-started from the EAP-IG scores (``methods.attribution.warm_start``), the same
steps and seed. Each method's scores (its log-alphas for Edge Pruning) give a faithfulness curve on the
evaluation pairs at MIB's sizes (removed edges patched from the corrupted prompt; ``analysis.faithfulness``):
CPR (higher is better) and CMD (lower is better), and the pruned circuits' own faithfulness.

    OMP_NUM_THREADS=1 PYTHONPATH=src:. .venv/bin/python benchmarks/bench_warm_start.py [--steps 300]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-steps", type=int, default=800)
    parser.add_argument("--steps", type=int, default=300, help="edge pruning steps (cold and warm alike)")
    parser.add_argument("--sparsity", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="eval", help="the pairs faithfulness is measured on")
    parser.add_argument("--fewer", default="50,100,150,200", help="warm runs with these total steps: the fewest "
                        "that reach cold pruning's final circuit faithfulness")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from transformers import GPT2Config

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import circuit_faithfulness, curve_from_scores
    from subnetlab.methods.attribution import attribute
    from subnetlab.methods.attribution.warm_start import warm_start_log_alphas
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.models import build_model, get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.spec import TaskSpec
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    task = TaskSpec("circuit:ioi", {"n_train": 256, "n_eval": 64}).build()
    task.bind(tok)
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=128,
                        bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = build_model(config, head="causal-lm", seed=args.seed).model
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    n = len(task.pairs("train"))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    model.train()
    for step in range(args.train_steps):
        batch = task.pair_batch(tok, "train", torch.randint(0, n, (32,), generator=g).tolist())
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        last = logits[torch.arange(len(logits)), batch["answer_index"]]
        loss = torch.nn.functional.cross_entropy(last, batch["answer_id"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    evaluate = edge_evaluator(model, adapter, graph, task, tok, args.split, batch_size=32)
    full = evaluate(torch.ones(graph.num_edges, dtype=torch.bool))
    print(f"model: 2 layers x 4 heads, hidden 64, trained {args.train_steps} steps ({time.perf_counter() - start:.0f}s, "
          f"last loss {float(loss.detach()):.3f}); {graph.num_edges} edges; {args.split} logit diff {full['logit_diff']:.3f}, "
          f"corrupted {evaluate.corrupted_run['logit_diff']:.3f}")

    def metric(logits, batch, full_logits):
        return task.metrics(logits, batch, full_logits)["logit_diff"]

    rows = {}
    for method, steps in (("eap", 1), ("eap-ig", 5)):
        t = time.perf_counter()
        scores = attribute(model, adapter, graph, task.pair_batches(tok, "train", 32), metric, method=method,
                           steps=steps).edges
        rows[f"{method}{' k=5' if steps > 1 else ''}"] = (scores, None, time.perf_counter() - t)
    data = circuit_data(task, tok, "train")
    cfg = preset_config("demo", args.sparsity, seed=args.seed, total_steps=args.steps,
                        warmup_steps=int(args.steps * 2 / 3))
    warm = warm_start_log_alphas(rows["eap-ig k=5"][0], args.sparsity, cfg.init_log_alpha)
    for name, init in (("edge pruning cold", None), ("edge pruning warm (EAP-IG)", warm)):
        t = time.perf_counter()
        result = prune_edges(model, adapter, data, cfg, init_log_alpha_edges=init)
        rows[name] = (result.log_alpha_edges, result.selection.edges, time.perf_counter() - t)

    print(f"Edge Pruning: demo preset, {args.steps} steps, target sparsity {args.sparsity}, seed {args.seed}; "
          f"warm start = warm_start_log_alphas(EAP-IG scores, scale {cfg.init_log_alpha})")
    print(f"{'method':30s} {'CPR':>7s} {'CMD':>7s} {'circuit f':>10s} {'kept':>6s} {'seconds':>8s}")
    for name, (scores, kept, seconds) in rows.items():
        # attribution scores rank by magnitude; log-alphas by value (a very negative log-alpha is a removed edge)
        curve = curve_from_scores(scores, evaluate, metric="logit_diff", empty=evaluate.corrupted_run,
                                  absolute=kept is None).to_dict()
        f, size = "", ""
        if kept is not None:
            f = f"{circuit_faithfulness(kept, evaluate, empty=evaluate.corrupted_run)['logit_diff']:.3f}"
            size = str(int(kept.sum()))
        print(f"{name:30s} {curve['cpr']:7.3f} {curve['cmd']:7.3f} {f:>10s} {size:>6s} {seconds:8.1f}")

    cold_f = circuit_faithfulness(rows["edge pruning cold"][1], evaluate, empty=evaluate.corrupted_run)["logit_diff"]
    reached = None
    for steps in [int(x) for x in args.fewer.split(",") if x]:
        short = preset_config("demo", args.sparsity, seed=args.seed, total_steps=steps, warmup_steps=int(steps * 2 / 3))
        kept = prune_edges(model, adapter, data, short, init_log_alpha_edges=warm).selection.edges
        f = circuit_faithfulness(kept, evaluate, empty=evaluate.corrupted_run)["logit_diff"]
        print(f"warm edge pruning with {steps:4d} steps: circuit f {f:.3f} (cold at {args.steps}: {cold_f:.3f})")
        if reached is None and f >= cold_f:
            reached = steps
    print(f"fewest warm steps reaching cold pruning's final faithfulness: "
          f"{reached if reached is not None else f'none of {args.fewer} (warm at {args.steps} steps: see table)'}")


if __name__ == "__main__":
    main()
