"""`subnetlab reproduce circuits` at a toy size: every step writes its file, a rerun skips them, other settings are
refused, and the mechanism check cuts exactly the edges it names (compared with the edge evaluator by hand)."""

from __future__ import annotations

import copy

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.io import read_json


def toy_settings() -> dict:
    s = settings_for(get_reproduction("circuits"), "demo").to_dict()
    s["task"].update(vocab_size=16, length=16, min_span=3, max_span=5, max_gap=2)
    s["model"].update(width=16, mlp_width=32, heads=2)
    s["training"].update(steps=4, batch_size=4, eval_every=2, eval_size=8, warmup=1)
    s["scores_size"] = 8
    s["induction_threshold"] = 0.01  # an untrained model: every last-layer head counts, so edges get cut
    s["circuit"].update(n_train=4, n_eval=4, batch_size=4)
    s["node_pruning"] = None
    s["edge_pruning"] = None
    s["ioi"] = None
    s["search_controls"] = None
    return s


def test_circuits_study_writes_each_step_and_resumes(tmp_path):
    module = get_reproduction("circuits")
    s = toy_settings()
    report = module.run(s, tmp_path)
    for name in ("config.json", "training.json", "head_scores.json", "mechanism.json", "curves.json", "metrics.json",
                 "report.md", "model/config.json", "model/tokenizer.json"):
        assert (tmp_path / name).is_file(), name
    training = read_json(tmp_path / "training.json")
    assert [r["step"] for r in training["curve"]] == [0, 2, 4]
    scores = read_json(tmp_path / "head_scores.json")
    assert len(scores["heads"]) == 4 and len(scores["induction_heads"]) == 2
    mechanism = read_json(tmp_path / "mechanism.json")
    assert mechanism["key_edges"] == [f"a0.h{scores['previous_token_head']['head']}->a1.h{h}<k>" for h in (0, 1)]
    assert set(read_json(tmp_path / "curves.json")["curves"]) == {"random-edges", "random-nodes"}
    text = report.read_text()
    assert "Phase change" in text and "Not run: **node-pruning**" in text and "Not run: **edge-pruning**" in text
    before = (tmp_path / "model" / "model.safetensors").stat().st_mtime_ns
    module.run(s, tmp_path)  # a rerun loads what exists
    assert (tmp_path / "model" / "model.safetensors").stat().st_mtime_ns == before
    other = copy.deepcopy(s)
    other["seed"] = 1
    with pytest.raises(SubnetlabError, match="other settings"):
        module.run(other, tmp_path)


def test_mechanism_cut_is_the_named_edge_patched_from_the_corrupted_prompt(tmp_path):
    from transformers import AutoModelForCausalLM

    from subnetlab.analysis.circuit_evaluation import edge_evaluator
    from subnetlab.experiments.circuits import steps
    from subnetlab.models.adapters import get_adapter
    from subnetlab.models.graph import Graph

    s = toy_settings()
    get_reproduction("circuits").run(s, tmp_path)
    mechanism = read_json(tmp_path / "mechanism.json")
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"), attn_implementation="eager").eval()
    tokenizer = steps.induction_tokenizer(s["task"]["vocab_size"])
    task = steps.circuit_task(s).bind(tokenizer)
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    evaluate = edge_evaluator(model, adapter, graph, task, tokenizer, "eval", batch_size=4)
    name = mechanism["key_edges"][0]
    keep = torch.ones(graph.num_edges, dtype=torch.bool)
    keep[graph.edge_index(name)] = False
    assert evaluate(keep) == pytest.approx(mechanism["cut"][name], rel=1e-5, abs=1e-6)
    assert mechanism["corrupted"]["logit_diff"] == pytest.approx(evaluate.corrupted_run["logit_diff"], abs=1e-5)


@pytest.mark.parametrize("key, value", [("induction_threshold", 0.0), ("scores_size", 0), ("seed", -1)])
def test_circuits_study_refuses_bad_settings(tmp_path, key, value):
    s = toy_settings()
    s[key] = value
    with pytest.raises(SubnetlabError) as err:
        get_reproduction("circuits").run(s, tmp_path)
    assert err.value.setting == key
    assert not (tmp_path / "config.json").exists()


def _check_mib_folder(out, mib):
    """The IOI step's MIB folder (issue 47): ``subnetlab mib-check --any-names`` passes it; its file is EAP on MIB's
    graph of the model (EAP-IG's layout), recomputed here, in MIB's orientation; MIB's CPR is in [-1, 2]."""
    import pytest
    import torch

    from subnetlab.cli import main
    from subnetlab.experiments.circuits.ioi import MIB_PAIRS
    from subnetlab.methods.attribution import attribute
    from subnetlab.models import get_adapter, mib_graph
    from subnetlab.models.graph import Graph
    from subnetlab.models.loading import load_model
    from subnetlab.tasks.circuits.ioi import make_ioi_task
    from subnetlab.tasks.ioi_words import ioi_word_tokenizer
    from tests.unit.test_mib import EapIgGraph

    with pytest.raises(SystemExit) as done:
        main(["mib-check", str(out / "ioi" / "mib"), "--any-names"])
    assert done.value.code == 0
    loaded = load_model(str(out / "ioi" / "model"), head="causal-lm")
    adapter = get_adapter(loaded.model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1, ungrouped_kv=True)
    assert mib["edges"] == graph.num_edges == len(EapIgGraph(adapter.num_layers, adapter.num_heads).edges)
    tok = ioi_word_tokenizer()
    task = make_ioi_task(n_train=8, n_eval=4, seed=0).bind(tok)
    scores = attribute(loaded.model.eval(), adapter, graph, task.pair_batches(tok, "train", 4, MIB_PAIRS),
                       lambda logits, b, full: task.metrics(logits, b, full)["logit_diff"], method="eap").edges
    written = mib_graph.load(out / "ioi" / mib["file"])
    assert torch.allclose(written.scores, -scores, atol=1e-6) and -1 <= mib["cpr"] <= 2


def test_circuits_study_runs_both_pruning_methods(tmp_path):
    s = toy_settings()
    s["node_pruning"] = {"sparsity": 0.5, "overrides": {"warmup_steps": 2, "total_steps": 3, "batch_size": 2,
                                                        "means_examples": 4}}
    s["edge_pruning"] = {"sparsities": [0.5, 0.9], "curve_sparsity": 0.9, "list_up_to": 10,
                         "overrides": {"warmup_steps": 2, "total_steps": 3, "batch_size": 2, "checkpoint_every": 3}}
    s["ioi"] = {"n_train": 8, "n_eval": 4, "steps": 2, "batch_size": 4, "lr": 3e-3, "eval_every": 1,
                "model": {"family": "llama", "layers": 2, "heads": 2, "width": 16, "mlp_width": 32, "mlp": True},
                "edge_pruning": {"sparsities": [0.9], "curve_sparsity": 0.9, "list_up_to": 10,
                                 "overrides": {"warmup_steps": 2, "total_steps": 3, "batch_size": 2,
                                               "checkpoint_every": 3}}}
    s["search_controls"] = {"controls": ["random-weights", "shuffled-labels"], "seeds": [0, 1, 2]}
    get_reproduction("circuits").run(s, tmp_path)
    ioi = read_json(tmp_path / "ioi" / "ioi.json")
    assert [r["step"] for r in ioi["training"]["curve"]] == [0, 1, 2]
    assert set(ioi["curves"]) == {"random-edges", "edge-pruning"} and (tmp_path / "ioi" / "model").is_dir()
    _check_mib_folder(tmp_path, ioi["mib"])
    curves = read_json(tmp_path / "curves.json")
    assert set(curves["curves"]) == {"random-edges", "random-nodes", "node-pruning", "edge-pruning"}
    runs = curves["key_edges_kept"]
    assert [r["sparsity"] for r in runs] == [0.5, 0.9]
    edges = read_json(tmp_path / "mechanism.json")["edges"]
    assert [r["kept"] for r in runs] == [edges - round(0.5 * edges), edges - round(0.9 * edges)]
    assert runs[1]["edges"] is not None and len(runs[1]["edges"]) == runs[1]["kept"]
    # each edge-pruning run holds what a `subnetlab circuit` run holds, and `results` reads it as one
    from subnetlab.executor.results import results_table
    from subnetlab.models.circuit import Circuit
    from subnetlab.subnetwork import Subnetwork

    for run, ep_dir in zip(runs, (tmp_path / "edge-pruning" / "sparsity-0.5", tmp_path / "edge-pruning" / "sparsity-0.9")):
        for name in ("subnetwork.safetensors", "graph.json", "circuit.png", "config.json", "metrics.json"):
            assert (ep_dir / name).is_file(), ep_dir / name
        sub = Subnetwork.load(ep_dir / "subnetwork.safetensors")
        assert sub.count() == run["kept"] and int(Circuit.load(ep_dir / "graph.json").in_graph.sum()) == run["kept"]
        assert read_json(ep_dir / "metrics.json")["faithfulness"] == run["faithfulness"]
    table = results_table(tmp_path / "edge-pruning")
    assert set(table.command) == {"circuit"} and set(table[table.metric.str.startswith("faithfulness")].split) == {"eval"}
    text = (tmp_path / "report.md").read_text()
    assert "Edge pruning's circuits" in text and "## 5. IOI-style task on a second small model" in text
    figures = ["figures/faithfulness.png", "figures/induction-circuit-0.5.png", "figures/induction-circuit-0.9.png",
               "figures/ioi-faithfulness.png", "figures/ioi-circuit-0.9.png"]  # the report shows each, and it exists
    assert all(f"]({name})" in text and (tmp_path / name).is_file() for name in figures), text
    from subnetlab.experiments.circuits.findings import findings
    from subnetlab.experiments.demo.verdicts import NOT_MEASURABLE, NOT_SHOWN, SHOWN

    rows = findings(tmp_path, tmp_path.parent)
    assert len(rows) == 4 and rows[0].verdict in (SHOWN, NOT_SHOWN)  # every result is there
    assert rows[3].verdict == NOT_MEASURABLE and rows[3].rule.startswith("one run")  # one seed of each method
    assert rows[3].this_run.startswith("CPR / CMD: edge pruning") and rows[0].link.startswith(f"{tmp_path.name}/report.md#3-")
    # the search controls: the study's seed-0 run and seeds 1, 2 at the curve's sparsity, each control with 3 seeds;
    # the row's verdict recomputed here from each run's own metrics.json (mean gap against the summed s.d.s)
    import statistics

    def scores(kind):
        dirs = [tmp_path / "edge-pruning" / "sparsity-0.9" if kind == "real" and seed == 0 else
                tmp_path / "controls" / kind / f"seed-{seed}" for seed in (0, 1, 2)]
        return [read_json(d / "metrics.json")["eval"]["logit_diff"] for d in dirs]

    real = scores("real")
    beaten = [statistics.fmean(real) - statistics.fmean(c) > statistics.stdev(real) + statistics.stdev(c)
              for c in (scores("random-weights"), scores("shuffled-labels"))]
    assert rows[2].verdict == (SHOWN if all(beaten) else NOT_SHOWN) and rows[2].this_run.startswith(
        f"logit difference at target sparsity 0.9: real {statistics.fmean(real):.2f}")
    assert rows[1].verdict in ((SHOWN, NOT_SHOWN) if all(beaten) else (NOT_SHOWN,))  # shown only if it computes
    assert read_json(tmp_path / "metrics.json")["search_controls"]["controls"] == ["random-weights", "shuffled-labels"]
    # the real circuits' stability over the three seeds, in the report: the mean pairwise Jaccard from the kept edges
    subs = [Subnetwork.load((tmp_path / "edge-pruning" / "sparsity-0.9" if seed == 0 else
                             tmp_path / "controls" / "real" / f"seed-{seed}") / "subnetwork.safetensors")
            for seed in (0, 1, 2)]
    kept = [set(torch.nonzero(sub.edges.reshape(-1) > 0.5).reshape(-1).tolist()) for sub in subs]
    pairs = [(a, b) for i, a in enumerate(kept) for b in kept[i + 1:]]
    jaccard = statistics.fmean(len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs)
    assert "Pairwise Jaccard of the circuits" in text
    stab = read_json(tmp_path / "controls" / "metrics.json")["targets"]["0.900"]["stability"]
    assert stab["mean_jaccard"] == pytest.approx(jaccard) and stab["kept_in_every"] == len(set.intersection(*kept))
    (tmp_path / "curves.json").unlink()
    assert [r.verdict for r in findings(tmp_path, tmp_path.parent)][1:] == [NOT_MEASURABLE, rows[2].verdict,
                                                                           NOT_MEASURABLE]
    (tmp_path / "controls" / "metrics.json").unlink()
    assert findings(tmp_path, tmp_path.parent)[2].verdict == NOT_MEASURABLE


def test_paper_preset_runs_the_ioi_sweep_on_a_local_model(tmp_path):
    """The paper preset's flow on a tiny GPT-2 saved with the IOI word tokenizer (no hub here)."""
    from subnetlab.experiments.circuits.training import ModelShape, build_model_from, config_for
    from subnetlab.tasks.ioi_words import ioi_word_tokenizer

    tok = ioi_word_tokenizer()
    shape = ModelShape(family="gpt2", layers=2, heads=2, width=16, mlp_width=32)
    model = build_model_from(config_for(shape, len(tok), 32, bos=None, pad=tok.pad_token_id), shape, seed=0)
    model.save_pretrained(str(tmp_path / "tiny"))
    tok.save_pretrained(str(tmp_path / "tiny"))
    module = get_reproduction("circuits")
    s = settings_for(module, "paper").to_dict()
    s.update(model=str(tmp_path / "tiny"), device="cpu", circuit={"n_train": 4, "n_eval": 4, "batch_size": 4})
    s["edge_pruning"].update(sparsities=[0.9, 0.95], curve_sparsity=0.95,
                             overrides={"warmup_steps": 2, "total_steps": 3, "batch_size": 2, "lr_warmup_steps": 1,
                                        "checkpoint_every": 3})
    report = module.run(s, tmp_path / "run")
    result = read_json(tmp_path / "run" / "paper.json")
    assert set(result["curves"]) == {"random-edges", "edge-pruning"} and [r["sparsity"] for r in result["runs"]] == [0.9, 0.95]
    assert "GPT-2 IOI sweep" in report.read_text()
    bad = copy.deepcopy(s)
    bad["edge_pruning"]["curve_sparsity"] = 0.5
    with pytest.raises(SubnetlabError, match="curve_sparsity"):
        module.run(bad, tmp_path / "other")
