"""Edge Pruning side by side with the authors' code: the same tiny GPT-2, the same pairs, seeds 0-2, two targets.

The authors' code (princeton-nlp/Edge-Pruning: ``src/modeling/l0.py``, ``src/modeling/modeling_fpt2.py``,
``src/prune/fpt2_ioi.py``, read from ``--authors``: its git directory or a checkout) runs in a virtual
environment of its own (``--cache``, made here once: torch 2.13 CPU first, then transformers 4.54, and
datasets and accelerate, which ``fpt2_ioi.py`` and the Hugging Face Trainer import). Nothing of it enters
subnetlab: its files are written to a temporary folder and a driver script runs them there.

1. A 2-layer GPT-2 (4 heads, width 64, MLP 256, no dropout) is trained here on repeated random spans
   (``experiments.circuits.training``, the demo's induction task but GPT-2's learned positions) and saved.
2. The circuit task's pairs (``tasks.induction.make_induction_task``: 200 training pairs, 200 held out).
3. The authors' training, as ``fpt2_ioi.py`` runs it: ``FPT2LMHeadModel.from_pretrained(...,
   with_embedding_nodes=True)`` then ``reset_all_log_alphas()``, ``freeze_all_except_pruning_params``, their
   ``get_optimizers`` (AdamW, linear warm-up schedule) and their ``FPT2InfoTrainer`` (its ``compute_loss``:
   KL to the full model at the answer position plus the edge and node Lagrangians, ``--disable_node_loss``)
   inside the Hugging Face Trainer (its shuffling, its clipping at 1.0); then their evaluation's final circuit
   (``src/eval/ioi.py``: the threshold bisection at the model's own edge sparsity, then the nodes', then
   ``get_edges()``).
4. subnetlab's ``paper`` preset, and its earlier paper settings (``--before``: Adam without decay or clipping,
   the expected L0 in the Lagrangian, the connected top-k at the target) for the before/after.

The paper's rates (lr 0.8, lambda lr 0.8, 3,000 steps with 2,500 of sparsity warm-up and 200 of learning-rate
warm-up, node target 0.72 without node loss) are scaled to ``--steps``. Every circuit is evaluated the same way,
through subnetlab's edge intervention with corrupted-input ablation on the held-out pairs: f = (logit difference
of the circuit - of the empty circuit) / (of the full model - of the empty circuit). Expected sparsity is
``1 - mean P(z != 0)`` over the real edges' log-alphas. Jaccard: of kept edge sets, mean over pairs of seeds
within the authors' runs, and over (subnetlab seed, authors' seed) pairs between the codes.

    OMP_NUM_THREADS=1 PYTHONPATH=src:. .venv/bin/python benchmarks/bench_edge_pruning_authors.py [--steps 1000]

Measured on the shared 2-core machine (torch 2.13 CPU, one thread; authors: transformers 4.54.1), at the default
1,000 steps (the CI-like test suite ran beside it on two threads; seconds are per run):

    model: induction-gpt2-600, repeat accuracy 0.23; graph 137 edges; logit diff full 1.030, empty -1.058;
    1000 steps (sparsity warm-up 833, lr warm-up 67)
    code     seed target edges exp.sp      f J/auth      s
    authors     0   0.90    11  0.881  0.804  0.833  104.2
    authors     1   0.90    11  0.885  0.790  0.917  104.2
    authors     2   0.90    11  0.879  0.790  0.917  104.2
    authors     0   0.95    10  0.908  0.768  0.850  104.2
    authors     1   0.95     9  0.921  0.743  0.894  104.2
    authors     2   0.95     8  0.916  0.729  0.844  104.2
    paper       0   0.90    11  0.881  0.790  0.944   35.4
    paper       1   0.90    11  0.889  0.790  0.944   35.9
    paper       2   0.90    13  0.878  0.810  0.846   36.2
    before      0   0.90    14  0.650  0.382  0.210   34.9
    paper       0   0.95    10  0.903  0.777  0.782   35.6
    paper       1   0.95     9  0.911  0.743  0.930   36.2
    paper       2   0.95     9  0.904  0.757  0.805   38.5
    before      0   0.95     7  0.664  0.291  0.143   36.9
    target 0.9: authors within seeds J 0.889, f 0.790-0.804; paper vs authors J 0.912, f 0.790-0.810;
                before vs authors J 0.210, f 0.382-0.382
    target 0.95: authors within seeds J 0.863, f 0.729-0.768; paper vs authors J 0.839, f 0.743-0.777;
                 before vs authors J 0.143, f 0.291-0.291

The paper preset reaches the targets as the authors' code does (expected sparsity 0.878-0.911 against their
0.879-0.921) and agrees with their circuits as well as they agree with each other (J 0.912 against 0.889 at 0.90;
0.839 against 0.863 at 0.95, within 0.05); its faithfulness is at or just above the top of their seed range (0.810
against 0.804; 0.777 against 0.768). The earlier paper settings (Adam, no decay or clipping, expected L0,
connected top-k) stall at an expected sparsity of 0.65-0.66 and find other, less faithful circuits (J 0.21 / 0.14,
f 0.38 / 0.29). With ``--steps 400`` neither code reaches its target (expected sparsity 0.74-0.82) and the
authors' own seeds agree at J 0.13 / 0.06: too short to compare.

``--task ioi``: the demo's IOI-style model (``reproduce circuits --preset demo``, its ``ioi`` settings: 2 layers,
4 heads, width 64, trained 800 steps on 5,000 prompts) built as a GPT-2 so that the authors' code loads it, its
5,000 training pairs and 200 held-out pairs (ABC corruption). Measured the same way (one thread each, the shared
machine busy with other work, so seconds are loose):

    model: ioi-gpt2-800, held-out accuracy 1.00; graph 137 edges; logit diff full 14.152, empty 0.133; 1000 steps
    code     seed target edges exp.sp      f J/auth      s
    authors     0   0.90    22  0.812  0.687  0.817  263.9
    authors     1   0.90    23  0.811  0.666  0.878  263.9
    authors     2   0.90    22  0.828  0.672  0.895  263.9
    authors     0   0.95    21  0.832  0.658  0.844  263.9
    authors     1   0.95    20  0.834  0.590  0.820  263.9
    authors     2   0.95    19  0.840  0.658  0.881  263.9
    paper       0   0.90    22  0.816  0.698  0.874  107.3
    paper       1   0.90    24  0.819  0.770  0.879  130.2
    paper       2   0.90    22  0.819  0.666  0.750  155.6
    before      0   0.90    14  0.263 -0.020  0.090  162.6
    paper       0   0.95    20  0.841  0.667  0.877  103.7
    paper       1   0.95    20  0.835  0.699  0.820  120.5
    paper       2   0.95    21  0.832  0.740  0.784  140.9
    before      0   0.95     7  0.291 -0.002  0.094   82.6
    target 0.9: authors within seeds J 0.863, f 0.666-0.687; paper vs authors J 0.834, f 0.666-0.770
    target 0.95: authors within seeds J 0.848, f 0.590-0.658; paper vs authors J 0.827, f 0.667-0.740

On IOI, 1,000 steps are too few for either code to reach the targets: both stop at an expected sparsity of
0.81-0.84, the same for both. The paper preset's circuits agree with the authors' within 0.03 of how the authors'
seeds agree with each other (J 0.834 against 0.863; 0.827 against 0.848), have the same sizes (20-24 edges against
19-23), and are as faithful or more (f 0.666-0.770 against 0.590-0.687: two of six runs above the authors' range).
The earlier settings find no faithful circuit at all (f -0.02 / 0.00, J 0.09).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

AUTHORS_FILES = ("src/modeling/l0.py", "src/modeling/modeling_fpt2.py", "src/prune/fpt2_ioi.py")
MIRROR = "/work/.mirror/princeton-nlp+Edge-Pruning/repo"
PAPER_STEPS, PAPER_WARMUP, PAPER_LR_WARMUP, NODE_TARGET = 3000, 2500, 200, 0.72
PINS = (["torch==2.13.0"], ["transformers==4.54.*", "huggingface-hub>=0.34,<1.0", "datasets>=2.19,<4",
                            "accelerate>=0.26,<2"])

DRIVER = r'''
import json, math, os, sys
import torch
from safetensors.torch import load_file
sys.path.insert(0, os.path.join(os.getcwd(), "src", "prune"))
import fpt2_ioi  # appends src/modeling to the path, as in the authors' layout
from fpt2_ioi import FPT2InfoTrainer, freeze_all_except_pruning_params, get_optimizers
from modeling_fpt2 import FPT2LMHeadModel
from transformers import Seq2SeqTrainingArguments, set_seed

job = json.loads(sys.argv[1])
pairs = load_file(job["pairs"])
rows = [{k: pairs[k][i] for k in pairs} for i in range(pairs["input_ids"].shape[0])]

def collate(examples):  # DataCollatorIOI's fields for pre-tokenised pairs: the loss at the answer position
    return {"input_ids": torch.stack([e["input_ids"] for e in examples]),
            "corr_input_ids": torch.stack([e["corrupted_input_ids"] for e in examples]),
            "labels": torch.stack([e["input_ids"] for e in examples]),
            "start_idxes": torch.stack([e["answer_index"] for e in examples]),
            "end_idxes": torch.stack([e["answer_index"] + 1 for e in examples])}

def real_log_alphas(model):
    t = model.transformer
    out = []
    for layer in t.h:
        out += [layer.q_read_log_alphas[:layer.attn_writer_offset].reshape(-1),
                layer.k_read_log_alphas[:layer.attn_writer_offset].reshape(-1),
                layer.v_read_log_alphas[:layer.attn_writer_offset].reshape(-1),
                layer.mlp_read_log_alphas[:layer.mlp_writer_offset]]
    return torch.cat(out + [t.final_read_log_alphas]).detach()

def search(model, set_threshold, sparsity_of, target):  # src/eval/ioi.py:194-217 and 218-240
    l, r = 0, 1
    while r - l > 1e-5:
        threshold = (l + r) / 2
        set_threshold(threshold)
        sparsity = sparsity_of()
        if sparsity > target:
            r = threshold
        else:
            l = threshold
    return threshold, float(sparsity)

results = []
for run in job["runs"]:
    set_seed(run["seed"])
    model = FPT2LMHeadModel.from_pretrained(job["model"], with_embedding_nodes=True)
    model.reset_all_log_alphas()
    full = FPT2LMHeadModel.from_pretrained(job["model"], with_embedding_nodes=True)
    full.reset_all_log_alphas()
    full.eval()
    freeze_all_except_pruning_params(model)
    steps = job["steps"]
    optimizers = get_optimizers(model, edges_lr=job["lr"], layers_lr=job["lr"], reg_edges_lr=job["lr"],
                                reg_layers_lr=job["lr"], num_training_steps=steps, warmup_steps=job["lr_warmup"],
                                disable_node_loss=True)
    args = Seq2SeqTrainingArguments(output_dir=os.path.join(job["tmp"], f"run{len(results)}"), max_steps=steps,
                                    per_device_train_batch_size=job["batch"], seed=run["seed"], save_strategy="no",
                                    report_to=[], logging_steps=10**9, remove_unused_columns=False,
                                    dataloader_num_workers=0, use_cpu=True, disable_tqdm=True,
                                    warmup_steps=job["lr_warmup"])
    trainer = FPT2InfoTrainer(model=model, gpt2_model=full, data_collator=collate, args=args, train_dataset=rows,
                              optimizers=optimizers, start_edge_sparsity=0.0, target_edge_sparsity=run["target"],
                              start_layer_sparsity=0.0, target_layer_sparsity=job["node_target"],
                              num_sparsity_warmup_steps=job["warmup"], warmup_type="linear")
    trainer.train()
    model.eval()
    la = real_log_alphas(model)
    expected = 1 - float((1 - torch.sigmoid(2 / 3 * math.log(0.1 / 1.1) - la)).mean())
    own_edges, own_nodes = model.get_edge_sparsity(), model.get_node_sparsity()
    edge_t, edge_s = search(model, model.set_edge_threshold_for_deterministic, model.get_edge_sparsity, own_edges)
    node_t, node_s = search(model, model.set_node_threshold_for_deterministic, model.get_node_sparsity, own_nodes)
    edges = model.get_edges()
    results.append({**run, "edges": [list(e) for e in edges], "expected_sparsity": expected,
                    "own_edge_sparsity": float(own_edges), "edge_threshold": edge_t, "edge_sparsity": edge_s,
                    "node_threshold": node_t, "node_sparsity": node_s,
                    "effective_sparsity": float(model.get_effective_edge_sparsity())})
    print(f"authors seed {run['seed']} target {run['target']}: {len(edges)} edges", file=sys.stderr, flush=True)
with open(job["out"], "w") as f:
    json.dump(results, f)
'''


def authors_environment(cache: Path) -> Path:
    """The authors' virtual environment under ``cache`` (made once); returns its python."""
    python = cache / "venv" / "bin" / "python"
    if python.exists():
        check = subprocess.run([str(python), "-c", "import transformers, datasets, accelerate, torch; "
                                "print(transformers.__version__)"], capture_output=True, text=True)
        if check.returncode == 0 and check.stdout.startswith("4.54"):
            return python
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(cache / "venv")], check=True)
    for pins in PINS:  # torch first: any other torch would pull CUDA
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    return python


def authors_sources(where: str, folder: Path) -> None:
    """The authors' files into ``folder`` in their layout, from a git directory (HEAD) or a checkout."""
    for name in AUTHORS_FILES:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (Path(where) / name).is_file():
            target.write_text((Path(where) / name).read_text())
        else:
            text = subprocess.run(["git", "-C", where, "show", f"HEAD:{name}"], check=True, capture_output=True,
                                  text=True).stdout
            target.write_text(text)


def scaled(n: int, steps: int) -> int:
    return max(1, round(n * steps / PAPER_STEPS))


def train_model(cache: Path, train_steps: int):
    """The tiny GPT-2 on the induction task, trained once and kept under ``cache``; its circuit task's pairs."""
    from transformers import AutoModelForCausalLM

    from subnetlab.experiments.circuits.training import (
        ModelShape,
        TrainSettings,
        build_induction_model,
        train_induction_model,
    )
    from subnetlab.tasks.induction import InductionConfig, induction_tokenizer, make_induction_task

    task = InductionConfig(vocab_size=32, length=32, min_span=8, max_span=12, max_gap=6)
    shape = ModelShape(family="gpt2", layers=2, heads=4, width=64, mlp_width=256, mlp=True)
    folder = cache / f"induction-gpt2-{train_steps}"
    tokenizer = induction_tokenizer(task.vocab_size)
    if not (folder / "config.json").is_file():
        model = build_induction_model(task, shape, seed=0)
        curve = train_induction_model(model, task, TrainSettings(steps=train_steps, eval_every=max(1, train_steps // 4)))
        model.save_pretrained(str(folder))
        (folder / "curve.json").write_text(json.dumps(curve))
    model = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    trained = json.loads((folder / "curve.json").read_text())[-1]
    pairs = make_induction_task(n_train=200, n_eval=200, seed=0, **task.to_dict()).bind(tokenizer)
    return model, tokenizer, pairs, folder, f"repeat accuracy {trained['repeat_accuracy']:.2f}"


def train_ioi_model(cache: Path, train_steps: int):
    """The demo's IOI-style model (``reproduce circuits --preset demo``, its ``ioi`` settings) as a GPT-2, trained
    once and kept under ``cache``; its circuit task (200 training pairs, 200 held out, ABC corruption)."""
    from transformers import AutoModelForCausalLM

    from subnetlab.experiments.circuits.ioi import train_ioi_model as train
    from subnetlab.experiments.circuits.reproduce import PRESETS
    from subnetlab.experiments.circuits.settings import CircuitsSettings

    demo = PRESETS["demo"]
    ioi = {**demo["ioi"], "steps": train_steps, "model": {**demo["ioi"]["model"], "family": "gpt2"}}
    folder = cache / f"ioi-gpt2-{train_steps}"
    _, tokenizer, task, record = train(CircuitsSettings.from_dict({**demo, "ioi": ioi}), folder)
    model = AutoModelForCausalLM.from_pretrained(str(folder / "model"), attn_implementation="eager").eval()
    return model, tokenizer, task, folder / "model", f"held-out accuracy {record['curve'][-1]['accuracy']:.2f}"


def edge_name(writer: str, reader: str) -> str:
    """The authors' edge names in subnetlab's (``a0.h1.q`` -> ``a0.h1<q>``, ``resid_post`` -> ``logits``)."""
    if reader == "resid_post":
        reader = "logits"
    elif reader.startswith("a"):
        reader = f"{reader[:-2]}<{reader[-1]}>"
    return f"{writer}->{reader}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--authors", default=MIRROR, help="the authors' repository: a git directory or checkout")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "subnetlab-bench" / "edge-pruning-authors"))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--task", choices=("induction", "ioi"), default="induction",
                        help="the model and pairs: the induction GPT-2, or the demo's IOI model as a GPT-2")
    parser.add_argument("--train-steps", type=int, default=None, help="the model's training (600 / 800)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--targets", default="0.9,0.95")
    parser.add_argument("--before-seeds", default="0", help="seeds of subnetlab's earlier paper settings")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from safetensors.torch import save_file

    from subnetlab.intervene.edges import apply_edges, capture_writers
    from subnetlab.methods.edge_pruning.config import preset_config
    from subnetlab.methods.edge_pruning.data import circuit_data
    from subnetlab.methods.edge_pruning.train import prune_edges
    from subnetlab.methods.l0.distribution import prob_closed
    from subnetlab.models import get_adapter
    from subnetlab.models.graph import Graph

    cache = Path(args.cache)
    seeds = [int(s) for s in args.seeds.split(",")]
    before_seeds = [int(s) for s in args.before_seeds.split(",") if s != ""]
    targets = [float(t) for t in args.targets.split(",")]
    python = authors_environment(cache)
    builder, default_steps = (train_model, 600) if args.task == "induction" else (train_ioi_model, 800)
    model, tokenizer, task, model_dir, trained = builder(cache, args.train_steps or default_steps)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    data = circuit_data(task, tokenizer, "train")
    train_batch = task.pair_batch(tokenizer, "train", list(range(len(task.pairs("train")))))
    held = task.pair_batch(tokenizer, "eval", list(range(len(task.pairs("eval")))))
    warmup, lr_warmup = scaled(PAPER_WARMUP, args.steps), scaled(PAPER_LR_WARMUP, args.steps)

    @torch.no_grad()
    def logit_diff(mask: torch.Tensor) -> float:
        values = capture_writers(model, adapter, {"input_ids": held["corrupted_input_ids"]})
        with apply_edges(model, adapter, graph, mask, values):
            logits = model(input_ids=held["input_ids"]).logits
        rows = torch.arange(logits.shape[0])
        at = logits[rows, held["answer_index"]]
        return float((at[rows, held["answer_id"]] - at[rows, held["wrong_id"]]).mean())

    full, empty = logit_diff(torch.ones(graph.num_edges)), logit_diff(torch.zeros(graph.num_edges))
    rows: list[dict] = []

    def record(code: str, seed: int, target: float, kept: set[str], expected: float, seconds: float) -> None:
        mask = torch.tensor([1.0 if n in kept else 0.0 for n in graph.edge_names])
        rows.append({"code": code, "seed": seed, "target": target, "kept": kept, "edges": len(kept),
                     "expected": expected, "f": (logit_diff(mask) - empty) / (full - empty), "seconds": seconds})

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        authors_sources(args.authors, folder)
        (folder / "driver.py").write_text(DRIVER)
        pairs_file = folder / "pairs.safetensors"
        save_file({k: train_batch[k].contiguous() for k in ("input_ids", "corrupted_input_ids", "answer_index")},
                  str(pairs_file))
        job = {"pairs": str(pairs_file), "model": str(model_dir), "steps": args.steps, "warmup": warmup,
               "lr_warmup": lr_warmup, "lr": 0.8, "batch": 32, "node_target": NODE_TARGET, "tmp": tmp,
               "out": str(folder / "authors.json"),
               "runs": [{"seed": s, "target": t} for t in targets for s in seeds]}
        began = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "", "WANDB_MODE": "disabled",
               "TRANSFORMERS_VERBOSITY": "error"}
        subprocess.run([str(python), "driver.py", json.dumps(job)], cwd=folder, check=True, env=env)
        per_run = (time.perf_counter() - began) / len(job["runs"])
        for r in json.loads((folder / "authors.json").read_text()):
            record("authors", r["seed"], r["target"], {edge_name(w, rd) for w, rd in r["edges"]},
                   r["expected_sparsity"], per_run)

    def subnetlab_run(code: str, seed: int, target: float, **overrides) -> None:
        cfg = preset_config("paper", target, seed=seed, total_steps=args.steps, warmup_steps=warmup,
                            lr_warmup_steps=lr_warmup, **overrides)
        began = time.perf_counter()
        result = prune_edges(model, adapter, data, cfg)
        kept = {n for n, k in zip(graph.edge_names, result.selection.edges.tolist()) if k}
        expected = 1 - float((1 - prob_closed(result.log_alpha_edges)).mean())
        record(code, seed, target, kept, expected, time.perf_counter() - began)

    before = dict(optimizer="adam", weight_decay=0.0, max_grad_norm=None, sparsity_estimate="expected",
                  selection="connected", clip_node_target=None)
    for target in targets:
        for seed in seeds:
            subnetlab_run("paper", seed, target)
        for seed in before_seeds:
            subnetlab_run("before", seed, target, **before)

    def jaccard(a: set[str], b: set[str]) -> float:
        return len(a & b) / max(1, len(a | b))

    print(f"model: {model_dir.parent.name if args.task == 'ioi' else model_dir.name}, {trained}; graph {graph.num_edges} "
          f"edges; logit diff full {full:.3f}, empty {empty:.3f}; {args.steps} steps (sparsity warm-up {warmup}, "
          f"lr warm-up {lr_warmup})")
    print(f"{'code':8} {'seed':>4} {'target':>6} {'edges':>5} {'exp.sp':>6} {'f':>6} {'J/auth':>6} {'s':>6}")
    for r in rows:
        authors = [a["kept"] for a in rows if a["code"] == "authors" and a["target"] == r["target"]
                   and a is not r]
        j = sum(jaccard(r["kept"], a) for a in authors) / max(1, len(authors))
        print(f"{r['code']:8} {r['seed']:>4} {r['target']:>6.2f} {r['edges']:>5} {r['expected']:>6.3f} "
              f"{r['f']:>6.3f} {j:>6.3f} {r['seconds']:>6.1f}")
    for target in targets:
        authors = [r for r in rows if r["code"] == "authors" and r["target"] == target]
        within = [jaccard(a["kept"], b["kept"]) for a, b in itertools.combinations(authors, 2)]
        line = [f"target {target}: authors within seeds J {sum(within) / max(1, len(within)):.3f}, "
                f"f {min(a['f'] for a in authors):.3f}-{max(a['f'] for a in authors):.3f}"]
        for code in ("paper", "before"):
            mine = [r for r in rows if r["code"] == code and r["target"] == target]
            if mine:
                between = [jaccard(m["kept"], a["kept"]) for m in mine for a in authors]
                line.append(f"{code} vs authors J {sum(between) / len(between):.3f}, "
                            f"f {min(m['f'] for m in mine):.3f}-{max(m['f'] for m in mine):.3f}")
        print("; ".join(line))


if __name__ == "__main__":
    main()
