"""``report.md`` of the circuits study: the phase change, the heads' attention scores, the mechanism's key edge,
and the faithfulness (CPR / CMD) of every circuit method, with measured numbers only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subnetlab.experiments.circuits.figures import circuit_figures, curves_figure
from subnetlab.experiments.circuits.settings import CircuitsSettings
from subnetlab.io import read_json, write_text
from subnetlab.report.markdown import num, table
from subnetlab.report.search_controls import controls_table
from subnetlab.report.stability import stability_tables

_FAMILY = {"gpt2": "GPT-2 with learned absolute positions", "llama": "Llama-style decoder with rotary positions"}


def _curve_rows(training: dict[str, Any]) -> list[list[Any]]:
    return [[r["step"], num(r["repeat_loss"]), num(r["repeat_accuracy"]), num(r["first_loss"]),
             num(r["previous_token_L0"]), num(r["induction_last"])] for r in training["curve"]]


def _phase(training: dict[str, Any]) -> str:
    p = training["phase_change"]
    fall = p.get("steepest_fall")
    parts = []
    if fall:
        parts.append(f"steepest fall of the held-out loss on the repeat between steps {fall['from_step']} and "
                     f"{fall['to_step']} ({num(fall['loss_from'])} -> {num(fall['loss_to'])} nats)")
    for t in ("0.5", "0.9"):
        step = p.get(f"accuracy_{t}")
        parts.append(f"accuracy on the repeat first >= {t} at step {step}" if step is not None
                     else f"accuracy on the repeat never reached {t}")
    return "; ".join(parts)


def _ioi_section(settings: CircuitsSettings, ioi: dict[str, Any] | None) -> list[str]:
    if ioi is None:
        return ["## 5. IOI-style task", "", "Not run (`ioi` is off in these settings).", ""]
    s, t = settings.ioi, ioi["training"]
    m = t["model"]
    lines = ["## 5. IOI-style task on a second small model trained here", "",
             f"A {m['layers']}-layer {_FAMILY[m.get('family', 'gpt2')]} ({m['heads']} heads, width {m['width']}"
             f"{', MLPs' if m['mlp'] else ''}) trained from scratch for {s['steps']} steps on {s['n_train']} clean IOI "
             f"prompts (`circuit:ioi`, word-level tokenizer of {t['vocabulary']} tokens; loss on the answer only), "
             f"in {t['seconds']} s. Held-out prompts ({s['n_eval']}, none seen in training):", "",
             table(["step", "accuracy", "logit diff (IO - S)"],
                   [[r["step"], num(r["accuracy"]), num(r["logit_diff"])] for r in t["curve"]]), "",
             f"Circuit task ({ioi['edges']} edges; corrupted = every name replaced, ABC): full model logit diff "
             f"{num(ioi['full']['logit_diff'])}, corrupted prompts {num(ioi['corrupted']['logit_diff'])}.", "",
             table(["method", "items", "CPR", "CMD"],
                   [[name, c["items"], num(c["cpr"]), num(c["cmd"])] for name, c in ioi["curves"].items()]), ""]
    for r in ioi.get("edge_pruning_runs", []):
        lines += [f"Edge pruning at {r['sparsity']}: {r['kept']} edges kept ({r['undecided']} masks undecided), "
                  f"f (logit diff) {num(r['faithfulness']['logit_diff'])}, f (KL) {num(r['faithfulness']['kl'])}.", ""]
    if "mib" in ioi:
        mib = ioi["mib"]
        lines += [f"MIB's graph (one embedding node, a key and value reader per query head: {mib['edges']} edges), "
                  f"EAP on {mib['pairs']} training pairs: CPR {mib['cpr_printed']}, CMD {mib['cmd_printed']} by MIB's "
                  f"definition (`definition: mib`). Its MIB submission folder: `ioi/{mib['file']}` "
                  "(checked as `subnetlab mib-check` checks it, MIB's task and model names relaxed).", ""]
    for name, why in ioi.get("missing", {}).items():
        lines += [f"Not run: **{name}**: {why}.", ""]
    return lines


def write_report(out: Path, settings: CircuitsSettings, training: dict[str, Any], scores: dict[str, Any],
                 mechanism: dict[str, Any], curves: dict[str, Any], timing: dict[str, Any],
                 ioi: dict[str, Any] | None = None) -> Path:
    task, model = training["task"], training["model"]
    prev, ind = scores["previous_token_head"], scores["induction_head"]
    lines = [
        "# Circuits: the induction mechanism, found edge by edge",
        "",
        f"Preset `{settings.preset or '?'}`, seed {settings.seed}. Wall time {timing['wall_s']} s "
        f"({timing['cpu_s']} s CPU, {timing['threads']} thread(s)); training alone {training['seconds']} s.",
        "",
        "## 1. Training: the phase change",
        "",
        f"A {model['layers']}-layer {_FAMILY[model.get('family', 'gpt2')]} ({model['heads']} heads, width {model['width']}"
        f"{', MLPs' if model['mlp'] else ', MLPs zeroed and frozen: attention only'}) trained on sequences of "
        f"{task['length']} tokens from {task['vocab_size']} in which a span of {task['min_span']}-{task['max_span']} "
        f"random tokens is repeated after a gap of 0-{task['max_gap']} tokens (`tasks.induction`). The loss is the "
        "next-token cross-entropy on the predictable positions (the copy after its first token). Held-out curve "
        "(loss / accuracy on the repeat; loss on the first span, which no mechanism can predict; the best layer-0 "
        "previous-token score and the best last-layer induction score):",
        "",
        table(["step", "repeat loss", "repeat acc", "first-span loss", "prev-token L0", "induction L1"],
              _curve_rows(training)),
        "",
        f"Phase change: {_phase(training)}.",
        "",
        "## 2. The heads' attention scores (independent of any circuit method)",
        "",
        f"On {scores['sequences']} held-out sequences: previous-token score = mean attention from position i to "
        "i - 1; induction score = mean attention from a repeated token to the token after its earlier occurrence "
        "(`analysis.induction_scores`).",
        "",
        table(["head", "previous-token", "induction"],
              [[h["head"], num(h["previous_token"]), num(h["induction"])] for h in scores["heads"]]),
        "",
        f"Previous-token head: **L{prev['layer']}.H{prev['head']}** ({num(prev['score'])}); best induction head: "
        f"**L{ind['layer']}.H{ind['head']}** ({num(ind['score'])}); induction heads (score >= "
        f"{scores['induction_threshold']}): " + (", ".join(f"L{h['layer']}.H{h['head']} ({num(h['score'])})"
                                                   for h in scores["induction_heads"]) or "none") + ".",
        "",
        "## 3. The circuit task and the mechanism's edges",
        "",
        "Clean prompt: a sequence whose repeated span ends it, minus its last token; answer: that token (copied "
        "from the first span). Corrupted: the first span replaced by fresh tokens (no earlier occurrence to copy "
        "from). Wrong answer: the corrupted prompt's token at the answer's source position (what a by-position "
        f"copier would output). {settings.circuit['n_eval']} evaluation pairs; removed edges are patched from "
        f"the corrupted prompt. The model's graph has {mechanism['edges']} edges ({mechanism['writers']} writers, "
        f"{mechanism['readers']} readers).",
        "",
        table(["model", "logit diff", "answer prob", "KL to full"],
              [["full", num(mechanism["full"]["logit_diff"]), num(mechanism["full"]["answer_prob"]),
                num(mechanism["full"]["kl"])],
               ["corrupted prompts", num(mechanism["corrupted"]["logit_diff"]),
                num(mechanism["corrupted"]["answer_prob"]), num(mechanism["corrupted"]["kl"])]]
              + [[f"cut {name}", num(m["logit_diff"]), num(m["answer_prob"]), num(m["kl"])]
                 for name, m in mechanism["cut"].items()]),
        "",
        "Patching replaces an edge's value by the writer's output on the corrupted prompt; where the two prompts "
        "agree (the query token and everything after the first span are the same in both), cutting an edge changes "
        "nothing, so query edges cost nothing to remove and circuits found under this ablation need not keep them.",
        "",
        f"The mechanism's key edges (previous-token head into each induction head's key, induction score >= "
        f"{scores['induction_threshold']}): " + (", ".join(f"`{e}`" for e in mechanism["key_edges"]) or "none") + ".",
        "",
        "## 4. Faithfulness of the circuit methods (MIB: CPR higher is better, CMD lower is better)",
        "",
        "Every curve is normalised by the model on the corrupted prompts (MIB's m(empty)) and integrated over "
        "MIB's sizes 0.1 ... 100% of its items; a model with few nodes has empty node circuits below 100% / "
        "nodes, so node curves are coarse.",
        "",
        table(["method", "items", "CPR", "CMD"],
              [[name, c["items"], num(c["cpr"]), num(c["cmd"])] for name, c in curves["curves"].items()]),
        "",
        *curves_figure(out, curves["curves"], "faithfulness", "induction task: faithfulness of each circuit method"),
    ]
    runs = curves.get("key_edges_kept", [])
    if runs:
        lines += ["Edge pruning's circuits, one per target sparsity (faithfulness by logit difference; the "
                  "mechanism's key edges kept or removed):", "",
                  table(["target", "edges kept", "undecided masks", "f (logit diff)", "f (KL)", "key edges"],
                        [[r["sparsity"], r["kept"], r["undecided"], num(r["faithfulness"]["logit_diff"]),
                          num(r["faithfulness"]["kl"]),
                          ", ".join(f"{e.split('->')[1]} {'kept' if k else 'removed'}" for e, k in r["key_edges"].items())]
                         for r in runs]), ""]
        for r in runs:
            if r["edges"] is not None:
                lines += [f"Edges kept at {r['sparsity']}: " + ", ".join(f"`{e}`" for e in r["edges"]) + ".", ""]
        lines += circuit_figures(out, out, runs, mechanism["key_edges"], "induction-circuit", "induction circuit")
        lines += [f"The edge-pruning curve ranks edges by the log-alphas of the run at "
                  f"{curves['curves']['edge-pruning']['from_sparsity']}.", ""]
    if (out / "controls" / "metrics.json").is_file():
        targets = read_json(out / "controls" / "metrics.json")["targets"]
        for entry in targets.values():
            headers, rows, caption = controls_table(entry, "logit difference", what=" of the circuit at the curve's "
                                                    "sparsity")
            lines += [caption, "", table(headers, rows), ""]
        stability = stability_tables(targets)
        if stability:
            lines += ["Stability of the real circuits over the seeds (edge frequency, pairwise Jaccard, faithfulness "
                      "with a bootstrap interval over seeds):", "", *stability]
    for name, why in curves.get("missing", {}).items():
        lines += [f"Not run: **{name}**: {why}.", ""]
    lines += _ioi_section(settings, ioi)
    if ioi is not None:
        lines += curves_figure(out, ioi["curves"], "ioi-faithfulness", "IOI-style task: faithfulness of each method")
        lines += circuit_figures(out, out / "ioi", ioi.get("edge_pruning_runs", []), [], "ioi-circuit", "IOI circuit")
    path = out / "report.md"
    write_text(path, "\n".join(lines))
    return path


__all__ = ["write_report"]
