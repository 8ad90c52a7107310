"""Grouped-query attention in MIB's graph against EAP-IG itself, and what the circuits study's MIB folder costs.

1. **EAP-IG's scores of a grouped-query model**: a tiny Llama (2 layers, 4 query heads, 2 key/value heads, hidden
   16, seed 0) scored by subnetlab's EAP on MIB's graph (one embedding node, a key and value reader per query head:
   ``Graph.ungrouped_kv``, computed from the grouped weights), and by hannamw/EAP-IG's ``attribute(method='EAP')``
   on the same weights as a TransformerLens ``HookedTransformer`` with ``ungroup_grouped_query_attention``, the same
   token ids (fed in place of its tokenizer) and the loss MIB attributes (minus the logit difference); every edge
   compared by name (subnetlab's scores negated: it attributes the metric). EAP-IG runs in its own environment
   (``--python``: TransformerLens 2.x; EAP-IG's ``src/eap`` from ``--eap-ig``, a git directory or checkout). Its
   score matrix is allocated on ``cuda``; the driver allocates it on the CPU instead (nothing else changed).
   The environment measured: a venv of this project's python whose ``.pth`` adds this project's site-packages
   (torch 2.13, transformers 5.24, numpy 2.4.6), with ``pip install --no-deps transformer-lens==2.18.0 jaxtyping
   better-abc typeguard`` (TransformerLens 2.18 imports and runs with numpy 2 here).
2. **The circuits study's MIB folder**: CPU seconds of ``experiments.circuits.ioi.mib_folder`` (EAP on MIB's graph,
   the folder, its check, MIB's CPR / CMD) beside the study's existing random-edges curve of the same step, on the
   demo preset's IOI model shape (randomly initialised: the cost does not depend on the weights).

    OMP_NUM_THREADS=1 PYTHONPATH=src:. .venv/bin/python benchmarks/bench_mib_models.py --python /path/to/tl/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

DRIVER = r'''
import json, sys
import torch
_zeros = torch.zeros
def zeros(*args, **kwargs):  # EAP-IG allocates its score matrix on cuda; this machine has none
    if kwargs.get("device") == "cuda":
        kwargs["device"] = "cpu"
    return _zeros(*args, **kwargs)
torch.zeros = zeros
import eap.attribute as at
from eap.graph import Graph
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions import convert_gemma_weights, convert_llama_weights
from transformers import AutoModelForCausalLM

job = json.load(open(sys.argv[1]))
hf = AutoModelForCausalLM.from_pretrained(job["model"], attn_implementation="eager").eval()
c = hf.config
gemma = c.model_type == "gemma2"
if gemma:
    cfg = HookedTransformerConfig(n_layers=c.num_hidden_layers, d_model=c.hidden_size, d_head=c.head_dim,
                                  n_heads=c.num_attention_heads, n_key_value_heads=c.num_key_value_heads,
                                  d_mlp=c.intermediate_size, d_vocab=c.vocab_size, n_ctx=c.max_position_embeddings,
                                  act_fn="gelu_pytorch_tanh", normalization_type="RMS",
                                  positional_embedding_type="rotary", rotary_dim=c.head_dim, rotary_base=10000,
                                  final_rms=True, gated_mlp=True, eps=c.rms_norm_eps, rotary_adjacent_pairs=False,
                                  use_normalization_before_and_after=True, use_attn_scale=True,
                                  attn_scale=c.query_pre_attn_scalar ** 0.5,
                                  attn_scores_soft_cap=c.attn_logit_softcapping,
                                  output_logits_soft_cap=c.final_logit_softcapping,
                                  original_architecture="Gemma2ForCausalLM", dtype=torch.float32)
else:
    cfg = HookedTransformerConfig(n_layers=c.num_hidden_layers, d_model=c.hidden_size,
                              d_head=c.hidden_size // c.num_attention_heads, n_heads=c.num_attention_heads,
                              n_key_value_heads=c.num_key_value_heads, d_mlp=c.intermediate_size, d_vocab=c.vocab_size,
                              n_ctx=c.max_position_embeddings, act_fn="silu", normalization_type="RMS",
                              positional_embedding_type="rotary", rotary_dim=c.hidden_size // c.num_attention_heads,
                              rotary_base=c.rope_theta if hasattr(c, "rope_theta") else 10000, final_rms=True,
                              gated_mlp=True, eps=c.rms_norm_eps, rotary_adjacent_pairs=False,
                              original_architecture="LlamaForCausalLM", dtype=torch.float32)
model = HookedTransformer(cfg)
model.load_state_dict((convert_gemma_weights if gemma else convert_llama_weights)(hf, cfg), strict=False)
model.eval()
model.cfg.use_split_qkv_input = True
model.cfg.use_attn_result = True
model.cfg.use_hook_mlp_in = True
model.cfg.ungroup_grouped_query_attention = True

pairs = job["pairs"]
clean, corrupted = torch.tensor(pairs["input_ids"]), torch.tensor(pairs["corrupted_input_ids"])
mask = torch.tensor(pairs["attention_mask"])
def tokenize(model, rows, max_length=None):  # the same token ids as subnetlab's, in place of EAP-IG's tokenizer
    ids = corrupted if rows[0] < 0 else clean
    idx = [abs(r) - 1 for r in rows]
    return ids[idx], mask[idx], mask[idx].sum(1), ids.shape[1]
at.tokenize_plus = tokenize
n = clean.shape[0]
labels = torch.tensor([pairs["answer_id"], pairs["wrong_id"]]).T
batch = [([i + 1 for i in range(n)], [-(i + 1) for i in range(n)], labels)]
answer_index = torch.tensor(pairs["answer_index"])

def loss(logits, clean_logits, lengths, labels):  # MIB's loss=True: minus the logit difference, summed
    last = logits[torch.arange(len(lengths)), answer_index]
    return -(last.gather(1, labels[:, :1])[:, 0] - last.gather(1, labels[:, 1:])[:, 0]).sum()

graph = Graph.from_model(model)
at.attribute(model, graph, batch, loss, method="EAP", quiet=True)
out = {"edges": {name: float(e.score) for name, e in graph.edges.items()}, "n_edges": len(graph.edges),
       "circuits": []}
import eap.evaluate as ev
ev.tokenize_plus = tokenize
def logit_diff(logits, clean_logits, lengths, labels):
    last = logits[torch.arange(len(lengths)), answer_index]
    return last.gather(1, labels[:, :1])[:, 0] - last.gather(1, labels[:, 1:])[:, 0]
for kept in job.get("circuits", []):  # evaluate_graph of each circuit (edges by name; it prunes them itself)
    for name, e in graph.edges.items():
        e.in_graph = name in kept
    out["circuits"].append(float(ev.evaluate_graph(model, graph, batch, logit_diff, quiet=True).mean()))
json.dump(out, open(job["out"], "w"))
'''


def eap_ig_sources(where: str, folder: Path) -> None:
    """EAP-IG's ``src/eap`` package into ``folder/eap`` from a git directory (HEAD) or a checkout."""
    from benchmarks.bench_mib_files import eap_ig_sources as copy

    copy(where, folder)


def reference_scores(args: argparse.Namespace, family: str = "llama") -> None:
    import torch
    from transformers import Gemma2Config, LlamaConfig

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.methods.attribution.scores import attribute
    from subnetlab.models import build_model, get_adapter, mib_graph
    from subnetlab.models.graph import Graph
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import llama_style_tokenizer

    tok = llama_style_tokenizer()
    if family == "gemma2":  # soft-capped attention and logits; a window longer than the prompts
        config = Gemma2Config(vocab_size=len(tok), num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              hidden_size=16, head_dim=8, intermediate_size=32, max_position_embeddings=64,
                              query_pre_attn_scalar=8, sliding_window=64, attn_logit_softcapping=5.0,
                              final_logit_softcapping=3.0, initializer_range=0.1)
        model = build_model(config, head="causal-lm", seed=0, attn_implementation="eager").model.eval()
    else:
        config = LlamaConfig(vocab_size=len(tok), num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             hidden_size=16, intermediate_size=32, max_position_embeddings=64, initializer_range=0.3)
        model = build_model(config, head="causal-lm", seed=0).model.eval()
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1, ungrouped_kv=True)
    task = get_task("circuit:ioi", n_train=args.pairs, n_eval=2).bind(tok)
    batch = next(iter(task.pair_batches(tok, "train", args.pairs, None)))
    scores = attribute(model, adapter, graph, [batch],
                       lambda logits, b, full: task.metrics(logits, b, full)["logit_diff"], method="eap").edges
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model.save_pretrained(d / "model")
        eap_ig_sources(args.eap_ig, d / "lib")
        circuits = []  # three random circuits of half the edges, pruned as EAP-IG prunes them
        for seed in range(3):
            keep = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(seed)) < 0.5
            circuits.append(mib_graph.prune(graph, keep)[0])
        job = {"model": str(d / "model"), "out": str(d / "out.json"),
               "circuits": [[graph.edge_names[i] for i in c.nonzero().flatten().tolist()] for c in circuits],
               "pairs": {k: batch[k].tolist() for k in ("input_ids", "corrupted_input_ids", "attention_mask",
                                                        "answer_id", "wrong_id", "answer_index")}}
        (d / "job.json").write_text(json.dumps(job))
        (d / "driver.py").write_text(DRIVER)
        subprocess.run([args.python, str(d / "driver.py"), str(d / "job.json")], check=True, cwd=d / "lib",
                       env={"PYTHONPATH": str(d / "lib"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
        theirs = json.loads((d / "out.json").read_text())
    mine = -scores.double()  # MIB's orientation (the loss); both are means over the pairs
    ref = torch.tensor([theirs["edges"][n] for n in graph.edge_names], dtype=torch.float64)
    same_names = sorted(theirs["edges"]) == sorted(graph.edge_names)
    evaluate = edge_evaluator(model, adapter, graph, task, tok, "train", batch_size=args.pairs, limit=args.pairs)
    ours = [evaluate(c)["logit_diff"] for c in circuits]
    print(f"{family} ({adapter.num_heads} heads, {adapter.num_kv_heads} key/value heads):")
    print(f"EAP-IG Graph.from_model: {theirs['n_edges']} edges, subnetlab's MIB graph {graph.num_edges}; same names: "
          f"{same_names}")
    print(f"EAP on {len(batch['input_ids'])} pairs: max |score difference| {float((mine - ref).abs().max()):.3g} "
          f"(largest |score| {float(ref.abs().max()):.4f}, mean |score| {float(ref.abs().mean()):.4f})")
    gaps = [abs(a - b) for a, b in zip(ours, theirs["circuits"])]
    print(f"evaluate_graph of 3 random pruned circuits: logit diff {', '.join(f'{x:.5f}' for x in theirs['circuits'])}; "
          f"subnetlab's edge masks {', '.join(f'{x:.5f}' for x in ours)}; max |difference| {max(gaps):.3g}")


def study_cost() -> None:
    import torch

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.experiments.circuits.ioi import _split, mib_folder  # noqa: F401 (the study's own split)
    from subnetlab.experiments.circuits.reproduce import PRESETS
    from subnetlab.experiments.circuits.training import ModelShape, build_model_from, config_for
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.circuits.ioi import make_ioi_task
    from subnetlab.tasks.ioi_words import ioi_word_tokenizer

    s = PRESETS["demo"]["ioi"]
    tok = ioi_word_tokenizer()
    task = make_ioi_task(n_train=s["n_train"], n_eval=s["n_eval"], seed=0).bind(tok)
    shape = ModelShape(**s["model"])
    train, held = _split(task, tok, "train"), _split(task, tok, "eval")
    positions = max(train["input_ids"].shape[1], held["input_ids"].shape[1])
    model = build_model_from(config_for(shape, len(tok), positions, bos=None, pad=tok.pad_token_id), shape, 0).eval()
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    start = time.process_time()
    evaluate = edge_evaluator(model, adapter, graph, task, tok, "eval", batch_size=s["batch_size"])
    curve_from_scores(torch.rand(graph.num_edges), evaluate)
    middle = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        result = mib_folder(model, tok, task, Path(tmp), s["batch_size"])
    end = time.process_time()
    print(f"circuits study, IOI step (demo shape, {graph.num_edges} edges): random-edges curve {middle - start:.2f} "
          f"CPU s; mib_folder (EAP on {result['pairs']} pairs, folder, check, MIB's CPR / CMD) {end - middle:.2f} "
          "CPU s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eap-ig", default="/work/.mirror/hannamw+EAP-IG/repo", help="EAP-IG git dir or checkout")
    parser.add_argument("--python", default=None, help="a python with TransformerLens 2.x (EAP-IG's environment)")
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.python:
        for family in ("llama", "gemma2"):
            reference_scores(args, family)
    study_cost()


if __name__ == "__main__":
    main()
