"""The IOI-style task on a small model trained here (``ioi`` settings of the circuits study).

A 2-layer decoder is trained from scratch on the clean prompts of
``circuit:ioi`` (``tasks.circuits.ioi``: "When Mary and John went to the store,
John gave a drink to" -> " Mary") with a word-level tokenizer of the
templates' words (``tasks.ioi_words``), the cross-entropy of the answer at the
last prompt position only; its held-out accuracy and logit difference (IO
minus S) are recorded along the way. The circuit task is then measured on its
``eval`` pairs (ABC corruption: every name replaced), with random edge
circuits and Edge Pruning on the same scale as the induction model's, and
EAP on MIB's graph (``mib_folder``): its CPR / CMD by MIB's definition and a
MIB submission folder (``ioi/mib/ioi_demo-llama/importances.json``, checked
as ``subnetlab mib-check`` checks it, MIB's task and model names relaxed).
Everything lands in ``out/ioi/`` (``model/``, ``ioi.json``, ``mib/``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from subnetlab import optim
from subnetlab.experiments.circuits.settings import CircuitsSettings
from subnetlab.experiments.circuits.training import ModelShape, build_model_from, config_for, load_trained_model
from subnetlab.io import atomic_directory, read_json, write_json
from subnetlab.progress import stage


def _split(task, tokenizer, split: str) -> dict[str, torch.Tensor]:
    return task.pair_batch(tokenizer, split, list(range(len(task.pairs(split)))))


def _answer_logits(model, batch: dict[str, torch.Tensor], rows: torch.Tensor | None = None) -> torch.Tensor:
    ids, mask, index = batch["input_ids"], batch["attention_mask"], batch["answer_index"]
    if rows is not None:
        ids, mask, index = ids[rows], mask[rows], index[rows]
    logits = model(input_ids=ids, attention_mask=mask).logits
    return logits[torch.arange(len(index)), index]


def _evaluate(model, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = _answer_logits(model, batch)
    model.train()
    answer, wrong = batch["answer_id"][:, None], batch["wrong_id"][:, None]
    return {"accuracy": float((logits.argmax(-1) == batch["answer_id"]).float().mean()),
            "logit_diff": float((logits.gather(1, answer) - logits.gather(1, wrong)).mean())}


def train_ioi_model(settings: CircuitsSettings, out: Path):
    """The trained IOI model, its tokenizer, its task and its training record (trained unless saved before)."""
    from subnetlab.tasks.circuits.ioi import make_ioi_task
    from subnetlab.tasks.ioi_words import ioi_word_tokenizer

    s, seed = settings.ioi, int(settings.seed)
    tokenizer = ioi_word_tokenizer()
    task = make_ioi_task(n_train=int(s["n_train"]), n_eval=int(s["n_eval"]), seed=seed).bind(tokenizer)
    model_dir, record_file = out / "model", out / "training.json"
    if model_dir.is_dir() and record_file.is_file():
        model = load_trained_model(model_dir)
        return model, tokenizer, task, read_json(record_file)
    shape = ModelShape(**s["model"])
    train, held = _split(task, tokenizer, "train"), _split(task, tokenizer, "eval")
    positions = max(train["input_ids"].shape[1], held["input_ids"].shape[1])
    model = build_model_from(config_for(shape, len(tokenizer), positions, bos=None, pad=tokenizer.pad_token_id),
                             shape, seed)
    steps, batch_size, every = int(s["steps"]), int(s["batch_size"]), int(s["eval_every"])
    stage(f"IOI: training a {shape.layers}-layer {shape.family} model on {len(task.pairs('train'))} prompts for "
          f"{steps} steps")
    optimizer = optim.make_optimizer(model, "adamw", lr=float(s["lr"]), weight_decay=0.01, no_decay_1d=True)
    generator = torch.Generator().manual_seed(seed)
    curve = [{"step": 0, **_evaluate(model, held)}]
    started = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        rows = torch.randint(len(train["answer_id"]), (batch_size,), generator=generator)
        loss = F.cross_entropy(_answer_logits(model, train, rows), train["answer_id"][rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps:
            curve.append({"step": step, **_evaluate(model, held)})
            stage(f"IOI model: step {step}/{steps}, held-out accuracy {curve[-1]['accuracy']:.2f}, "
                  f"logit difference {curve[-1]['logit_diff']:.2f}")
    model.eval()
    record = {"model": s["model"], "vocabulary": len(tokenizer), "curve": curve,
              "seconds": round(time.perf_counter() - started, 1)}
    with atomic_directory(model_dir) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    write_json(record_file, record)
    return model, tokenizer, task, record


MIB_PAIRS = 200  # training pairs EAP scores the edges on for the MIB folder: one forward and backward per batch
MIB_MODEL = "demo-llama"  # the folder's model name (not one of MIB's: checked with MIB's names relaxed)


def mib_folder(model, tokenizer, task, out: Path, batch_size: int) -> dict[str, Any]:
    """EAP scores of MIB's graph of the model (one embedding node, a key and value reader per query head), in MIB's
    orientation, written as a MIB submission folder ``out/mib`` and checked; MIB's CPR and CMD of them on the
    ``eval`` pairs (``analysis.mib_faithfulness``). A few forwards of a 2-layer model: negligible beside the
    study."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.mib_faithfulness import mib_curves
    from subnetlab.methods.attribution import attribute
    from subnetlab.models import mib_submission
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph

    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1, ungrouped_kv=True)
    pairs = min(MIB_PAIRS, len(task.pairs("train")))
    scores = attribute(model, adapter, graph, task.pair_batches(tokenizer, "train", batch_size, pairs),
                       lambda logits, b, full: task.metrics(logits, b, full)["logit_diff"], method="eap").edges
    circuit = Circuit(graph, -scores.float())  # MIB's orientation: it attributes the loss, minus the logit difference
    path = mib_submission.write(out / "mib", "ioi", MIB_MODEL, circuit, adapter.hidden_size)
    check = mib_submission.check(out / "mib", mib_names=False)
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=batch_size)
    curves = mib_curves(graph, circuit.scores, evaluate)
    return {"method": "eap", "pairs": pairs, "edges": graph.num_edges, "file": str(path.relative_to(out)),
            "check": check, "cpr": curves["cpr"], "cmd": curves["cmd"], "cpr_printed": curves["cpr_printed"],
            "cmd_printed": curves["cmd_printed"]}


def ioi_study(settings: CircuitsSettings, out: Path) -> dict[str, Any]:
    """Train the IOI model, then its circuit task: full, corrupted, random edge circuits, Edge Pruning."""
    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.analysis.faithfulness import curve_from_scores
    from subnetlab.experiments.circuits.curves import edge_pruning_runs
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph

    out = out / "ioi"
    path = out / "ioi.json"
    if path.is_file():
        return read_json(path)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer, task, training = train_ioi_model(settings, out)
    s, seed = settings.ioi, int(settings.seed)
    stage("IOI: the circuit task on the trained model, random edge circuits")
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=int(s["batch_size"]))
    everything = torch.ones(graph.num_edges, dtype=torch.bool)
    random_scores = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(seed + 21))
    curves = {"random-edges": curve_from_scores(random_scores, evaluate).to_dict()}
    result: dict[str, Any] = {"training": training, "edges": graph.num_edges, "full": evaluate(everything),
                              "corrupted": evaluate.corrupted_run, "curves": curves, "missing": {}}
    if not s.get("edge_pruning"):
        result["missing"]["edge-pruning"] = "ioi.edge_pruning is off in these settings"
    else:
        runs = edge_pruning_runs(model, tokenizer, task, [], s["edge_pruning"], seed, int(s["batch_size"]),
                                 curves["random-edges"]["empty"], out, model_name=str(out / "model"))
        curves["edge-pruning"] = runs["curve"]
        result["edge_pruning_runs"] = runs["runs"]
    stage("IOI: EAP on MIB's graph, a MIB submission folder (ioi/mib) and MIB's CPR / CMD")
    result["mib"] = mib_folder(model, tokenizer, task, out, int(s["batch_size"]))
    write_json(path, result)
    return result


__all__ = ["MIB_MODEL", "MIB_PAIRS", "ioi_study", "mib_folder", "train_ioi_model"]
