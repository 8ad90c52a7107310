"""MIB's files and numbers against EAP-IG itself: a subnetlab scores file through EAP-IG's ``Graph.from_json`` /
``from_pt`` and back, and MIB's CPR / CMD from EAP-IG's ``evaluate_graph`` beside ``circuit-eval --mib``'s.

On a GPT-2-style model built here (2 layers x 2 heads, hidden 16, seed 0) and ``circuit:ioi`` pairs:

1. subnetlab scores every edge with EAP on its graph with one embedding node, turns them to MIB's orientation
   (MIB attributes the loss, minus the logit difference: ``circuit-eval --mib`` does the same) and writes them
   as EAP-IG JSON and ``.pt`` (``models.mib_graph``), with a 5-edge ``in_graph``;
2. in EAP-IG's own environment (hannamw/EAP-IG at the given git directory, TransformerLens 2.x, numpy < 2,
   built once under ``~/.cache/subnetlab-bench/eap-ig``), ``Graph.from_json`` and ``Graph.from_pt`` load them;
   every edge's score and ``in_graph`` are compared with subnetlab's by name, and ``Graph.to_json`` writes the
   loaded graph back for subnetlab to read;
3. EAP-IG evaluates: the same weights as a ``HookedTransformer``, the same token ids (fed to its
   ``evaluate_graph`` in place of its tokenizer), ``apply_topn(int(pct * edges), absolute, prune=True)`` at
   MIB's sizes, MIB's area formula; CPR from ``absolute=False``, CMD from ``absolute=True``.

    OMP_NUM_THREADS=1 PYTHONPATH=src:. .venv/bin/python benchmarks/bench_mib_files.py --eap-ig /path/to/EAP-IG
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PINS = (["torch==2.13.0"], ["transformer-lens>=2.15,<3", "numpy<2", "datasets<3", "pyarrow<18", "matplotlib", "einops"])

DRIVER = r'''
import json, sys
import torch
import eap.evaluate as ev
from eap.graph import Graph
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
from transformers import GPT2LMHeadModel

job = json.load(open(sys.argv[1]))
out = {}
for key, graph in (("json", Graph.from_json(job["json"])), ("pt", Graph.from_pt(job["pt"]))):
    out[key] = {name: [float(e.score), bool(e.in_graph)] for name, e in graph.edges.items()}
graph = Graph.from_json(job["json"])
graph.to_json(job["back"])

hf = GPT2LMHeadModel.from_pretrained(job["model"], use_safetensors=True).eval()
c = hf.config
cfg = HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
                              d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, n_ctx=c.n_positions,
                              act_fn="gelu_new", normalization_type="LN", eps=c.layer_norm_epsilon)
model = HookedTransformer(cfg)
model.load_state_dict(convert_gpt2_weights(hf, cfg), strict=False)
model.eval()
model.cfg.use_split_qkv_input = True
model.cfg.use_attn_result = True
model.cfg.use_hook_mlp_in = True

pairs = job["pairs"]
clean, corrupted = torch.tensor(pairs["input_ids"]), torch.tensor(pairs["corrupted_input_ids"])
mask = torch.tensor(pairs["attention_mask"])
def tokenize(model, rows):  # the same token ids as subnetlab's, in place of EAP-IG's tokenizer
    ids = corrupted if rows[0] < 0 else clean
    idx = [abs(r) - 1 for r in rows]
    return ids[idx], mask[idx], mask[idx].sum(1), ids.shape[1]
ev.tokenize_plus = tokenize
n = clean.shape[0]
batch = [([i + 1 for i in range(n)], [-(i + 1) for i in range(n)], torch.tensor([pairs["answer_id"], pairs["wrong_id"]]).T)]

def logit_diff(logits, clean_logits, lengths, labels):
    last = logits[torch.arange(len(lengths)), lengths - 1]
    return last.gather(1, labels[:, :1])[:, 0] - last.gather(1, labels[:, 1:])[:, 0]

percentages = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)
graph.apply_topn(len(graph.edges), True)
baseline = ev.evaluate_graph(model, graph, batch, logit_diff, quiet=True).mean().item()
graph.apply_topn(0, True)
corrupted_score = ev.evaluate_graph(model, graph, batch, logit_diff, quiet=True).mean().item()
for absolute in (False, True):
    f, counts = [], []
    for pct in percentages:
        graph.apply_topn(int(pct * len(graph.edges)), absolute, prune=True)
        counts.append(graph.count_included_edges())
        score = ev.evaluate_graph(model, graph, batch, logit_diff, quiet=True).mean().item()
        f.append((score - corrupted_score) / (baseline - corrupted_score))
    under = sum((percentages[i + 1] - percentages[i]) * (f[i] + f[i + 1]) / 2 for i in range(len(f) - 1))
    from_1 = sum((percentages[i + 1] - percentages[i]) * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2 for i in range(len(f) - 1))
    out[f"abs-{absolute}"] = {"faithfulness": f, "edge_counts": counts, "area_under": under, "area_from_1": from_1}
json.dump(out, open(job["out"], "w"))
'''


def environment(cache: Path) -> Path:
    """EAP-IG's virtual environment under ``cache`` (made once); returns its python."""
    python = cache / "venv" / "bin" / "python"
    check = [str(python), "-c", "import transformer_lens, einops, numpy; assert numpy.__version__ < '2'"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(cache / "venv")], check=True)
    for pins in PINS:  # torch first: any other torch would pull CUDA
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    return python


def eap_ig_sources(where: str, folder: Path) -> None:
    """EAP-IG's ``src/eap`` package into ``folder/eap`` from a git directory (HEAD) or a checkout."""
    names = ["__init__.py", "graph.py", "evaluate.py", "utils.py", "visualization.py", "attribute.py",
             "attribute_node.py"]
    (folder / "eap").mkdir(parents=True, exist_ok=True)
    for name in names:
        source = Path(where) / "src" / "eap" / name
        text = source.read_text() if source.is_file() else subprocess.run(
            ["git", "-C", where, "show", f"HEAD:src/eap/{name}"], check=True, capture_output=True, text=True).stdout
        (folder / "eap" / name).write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eap-ig", default="/work/.mirror/hannamw+EAP-IG/repo", help="EAP-IG git dir or checkout")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "subnetlab-bench" / "eap-ig"))
    parser.add_argument("--pairs", type=int, default=16)
    args = parser.parse_args()

    import torch
    from transformers import GPT2Config

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.mib_faithfulness import mib_curves
    from subnetlab.methods.attribution.scores import attribute
    from subnetlab.models import build_model, get_adapter, mib_graph
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    torch.set_num_threads(1)
    python = environment(Path(args.cache))
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        initializer_range=0.3)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1)
    task = get_task("circuit:ioi", n_train=args.pairs, n_eval=args.pairs).bind(tok)
    scores = -attribute(model, adapter, graph, task.pair_batches(tok, "train", 8, None),  # MIB's orientation:
                        lambda logits, b, full: task.metrics(logits, b, full)["logit_diff"], method="eap").edges
    keep = torch.zeros(graph.num_edges, dtype=torch.bool)
    keep[scores.abs().argsort(descending=True)[:5]] = True
    circuit = Circuit(graph, scores, keep)
    evaluate = edge_evaluator(model, adapter, graph, task, tok, "eval", batch_size=args.pairs)
    mine = mib_curves(graph, scores, evaluate)
    batch = next(iter(task.pair_batches(tok, "eval", args.pairs, None)))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model.save_pretrained(d / "model")
        mib_graph.save(circuit, d / "scores.json", config.n_embd)
        mib_graph.save(circuit, d / "scores.pt", config.n_embd)
        eap_ig_sources(args.eap_ig, d / "lib")
        job = {"json": str(d / "scores.json"), "pt": str(d / "scores.pt"), "back": str(d / "back.json"),
               "model": str(d / "model"), "out": str(d / "out.json"),
               "pairs": {k: batch[k].tolist() for k in ("input_ids", "corrupted_input_ids", "attention_mask",
                                                        "answer_id", "wrong_id")}}
        (d / "job.json").write_text(json.dumps(job))
        (d / "driver.py").write_text(DRIVER)
        subprocess.run([str(python), str(d / "driver.py"), str(d / "job.json")], check=True, cwd=d / "lib",
                       env={"PYTHONPATH": str(d / "lib"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
        theirs = json.loads((d / "out.json").read_text())
        back = mib_graph.load(d / "back.json", graph)
    for key in ("json", "pt"):
        loaded = theirs[key]
        score_diff = max(abs(loaded[n][0] - float(scores[i])) for i, n in enumerate(graph.edge_names))
        kept_same = all(loaded[n][1] == bool(keep[i]) for i, n in enumerate(graph.edge_names))
        print(f"EAP-IG Graph.from_{key}: {len(loaded)} edges (subnetlab {graph.num_edges}), max |score difference| "
              f"{score_diff:.3g}, in_graph identical: {kept_same}")
    print(f"EAP-IG Graph.to_json read back by subnetlab: scores identical {torch.equal(back.scores, scores)}, "
          f"in_graph identical {torch.equal(back.in_graph, keep)}")
    for name, ours, key in (("CPR (absolute=False)", mine["signed"], "abs-False"),
                            ("CMD (absolute=True)", mine["absolute"], "abs-True")):
        ref = theirs[key]
        gap = max(abs(a - b) for a, b in zip(ours["faithfulness"]["logit_diff"], ref["faithfulness"]))
        print(f"{name}: subnetlab --mib area_under {ours['area_under']:.6f} area_from_1 {ours['area_from_1']:.6f}; "
              f"EAP-IG {ref['area_under']:.6f} / {ref['area_from_1']:.6f}; max |f difference| {gap:.3g}; "
              f"edge counts after prune equal: {ours['edge_counts'] == ref['edge_counts']}")
    print(f"MIB: CPR {mine['cpr_printed']}, CMD {mine['cmd_printed']} ({graph.num_edges} edges, {args.pairs} pairs)")


if __name__ == "__main__":
    main()
