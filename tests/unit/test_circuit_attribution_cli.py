"""`subnetlab circuit --method eap|eap-ig|...`: the scores file is the library's, and circuit-eval reads it; edge
pruning warm-started from it (``--init-from``) starts from the mapped log-alphas."""

from __future__ import annotations

import json

import pytest
import torch

from subnetlab.io import load_tensors
from tests.unit.test_circuit_eval_cli import TASK, _run, tiny  # noqa: F401 (the fixture)


@pytest.mark.parametrize("method", ["eap", "eap-ig", "eap-ig-activations", "clean-corrupted",
                                    "exact"])
def test_circuit_attribution_writes_the_library_scores(tiny, method, tmp_path, capsys, one_thread):  # noqa: F811
    from subnetlab.methods.attribution import attribute
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.spec import TaskSpec

    root, model, adapter, tok = tiny
    out = tmp_path / method
    steps = ["--ig-steps", "3"] if method.startswith("eap-ig") else []  # --ig-steps is the integrated methods' alone
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(out), "--method", method, *steps,
          "--device", "cpu"], capsys)
    saved = load_tensors(out / "scores.safetensors")
    task = TaskSpec("circuit:ioi", {"n_train": 2, "n_eval": 6}).build()
    task.bind(tok)
    graph = Graph.from_adapter(adapter)
    mine = attribute(model, adapter, graph, task.pair_batches(tok, "train", 16),
                     lambda logits, batch, full: task.metrics(logits, batch, full)["logit_diff"],
                     method=method, steps=3)
    assert torch.allclose(saved["edges"], mine.edges, atol=1e-6, rtol=1e-5)
    assert torch.allclose(saved["heads"].sum() + saved["mlps"].sum() + saved["embeddings"].sum(), saved["edges"].sum(),
                          rtol=1e-4, atol=1e-5)
    assert json.loads((out / "metrics.json").read_text())["pairs"] == 2
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--out", str(tmp_path / "ev"),
          "--scores", str(out / "scores.safetensors"), "--sizes", "10,50,100", "--device", "cpu"], capsys)
    result = json.loads((tmp_path / "ev" / "faithfulness.json").read_text())
    assert result["level"] == "edges" and result["items"] == graph.num_edges
    assert result["faithfulness"]["logit_diff"][-1] == pytest.approx(1.0, abs=1e-5)


def test_edge_pruning_warm_started_from_scores(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """--init-from: the run's log-alphas after two steps at learning rate 1e-9 are the warm-start mapping of the scores."""
    from subnetlab.methods.attribution.warm_start import warm_start_log_alphas

    root = tiny[0]
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(tmp_path / "eap"), "--method", "eap",
          "--device", "cpu"], capsys)
    scores = tmp_path / "eap" / "scores.safetensors"
    out = tmp_path / "warm"
    _run(["circuit", "--model", str(root / "model"), *TASK, "--method", "edge-pruning", "--sparsity", "0.9",
          "--seeds", "0", "--preset", "demo", "--set", "total_steps=2", "--set", "warmup_steps=1", "--set",
          "batch_size=2", "--set", "lr=1e-9", "--init-from", str(scores), "--out", str(out), "--device", "cpu"], capsys)
    alphas = [e["score"] for e in json.loads((out / "sparsity-0.900" / "seed-0" / "graph.json").read_text())["edges"]]
    expected = warm_start_log_alphas(load_tensors(scores)["edges"], 0.9, 3.0)
    assert torch.allclose(torch.tensor(alphas), expected, atol=1e-6)
    assert float(expected.abs().max()) == 3.0
    from subnetlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(["circuit", "--model", str(root / "model"), *TASK, "--method", "edge-pruning", "--sparsity", "0.9",
              "--init-from", str(tmp_path / "missing.safetensors"), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and "--init-from" in err, err


def test_circuit_refuses_unknown_method(tiny, tmp_path, capsys):  # noqa: F811
    from subnetlab.cli import main

    root = tiny[0]
    with pytest.raises(SystemExit) as e:
        main(["circuit", "--model", str(root / "model"), *TASK, "--out", str(tmp_path / "x"), "--method", "acdc"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--method" in err and "eap" in err


def test_a_rerun_with_other_settings_is_refused_and_loses_nothing(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """Rerunning circuit --method eap-ig, or circuit-eval with other sizes, into a finished directory: one error line
    naming the differing setting, exit 2, the first run's files byte for byte as they were (prune refuses alike)."""
    from subnetlab.cli import main

    model = str(tiny[0] / "model")
    scores = tmp_path / "scores"
    _run(["circuit", "--model", model, *TASK, "--out", str(scores), "--method", "eap", "--device", "cpu"], capsys)
    evaluation = tmp_path / "ev"
    _run(["circuit-eval", "--model", model, *TASK, "--out", str(evaluation), "--scores",
          str(scores / "scores.safetensors"), "--sizes", "10,50", "--device", "cpu"], capsys)
    for out, argv, differs in (
            (scores, ["circuit", "--model", model, *TASK, "--out", str(scores), "--method", "eap-ig", "--device",
                      "cpu"], "differs in ig_steps, method"),
            (evaluation, ["circuit-eval", "--model", model, *TASK, "--out", str(evaluation), "--scores",
                          str(scores / "scores.safetensors"), "--sizes", "10,90", "--device", "cpu"], "differs in sizes")):
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        with pytest.raises(SystemExit) as done:
            main(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
        assert done.value.code == 2 and len(err) == 1 and differs in err[0], err
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_node_attribution_and_mean_ablation_through_the_command(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """``circuit --method nap`` writes node scores (no edges, no graph.json) that circuit-eval measures as a node
    curve; ``--method eap --ablation mean`` writes the library's EAP with the clean prompts' writer means, and
    records the ablation in config.json."""
    from subnetlab.methods.attribution import attribute
    from subnetlab.methods.attribution.scores import clean_means, writer_grid
    from subnetlab.models.graph import Graph
    from subnetlab.tasks.spec import TaskSpec

    root, model, adapter, tok = tiny
    task = TaskSpec("circuit:ioi", {"n_train": 2, "n_eval": 6}).build()
    task.bind(tok)
    graph = Graph.from_adapter(adapter)

    def metric(logits, batch, full):
        return task.metrics(logits, batch, full)["logit_diff"]

    nap = tmp_path / "nap"
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(nap), "--method", "nap", "--device", "cpu"],
         capsys)
    saved = load_tensors(nap / "scores.safetensors")
    assert "edges" not in saved and not (nap / "graph.json").exists()
    mine = attribute(model, adapter, graph, task.pair_batches(tok, "train", 16), metric, method="nap")
    expected = writer_grid(graph, mine.writers)
    for key in ("heads", "mlps", "embeddings"):
        assert torch.allclose(saved[key], expected[key], atol=1e-6, rtol=1e-5)
    metrics = json.loads((nap / "metrics.json").read_text())
    assert metrics["level"] == "nodes" and metrics["top_nodes"][0]["node"] in graph.writers
    _run(["circuit-eval", "--model", str(root / "model"), *TASK, "--out", str(tmp_path / "ev"),
          "--scores", str(nap / "scores.safetensors"), "--sizes", "10,50,100", "--device", "cpu"], capsys)
    result = json.loads((tmp_path / "ev" / "faithfulness.json").read_text())
    assert result["level"] == "nodes" and result["items"] == adapter.num_layers * (adapter.num_heads + 1)
    assert result["faithfulness"]["logit_diff"][-1] == pytest.approx(1.0, abs=1e-5)

    mean = tmp_path / "eap-mean"
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(mean), "--method", "eap", "--ablation", "mean",
          "--device", "cpu"], capsys)
    means = clean_means(model, adapter, task.pair_batches(tok, "train", 16))
    by_lib = attribute(model, adapter, graph, task.pair_batches(tok, "train", 16), metric, method="eap", means=means)
    assert torch.allclose(load_tensors(mean / "scores.safetensors")["edges"], by_lib.edges, atol=1e-6, rtol=1e-5)
    assert json.loads((mean / "config.json").read_text())["ablation"] == "mean"
    assert json.loads((mean / "metrics.json").read_text())["ablation"] == "mean"


def test_a_node_sweep_over_seeds_compares_the_top_nodes(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """``--method nap --seeds`` over two draws of one pair: the stability is over heads and MLPs (L0.H0 ...), each
    run's circuit the top nodes of its own scores file."""
    from subnetlab.analysis.circuit_evaluation import node_vector
    from subnetlab.models.circuit import edges_kept, top_k_mask

    root, _, adapter, _ = tiny
    out = tmp_path / "sweep"
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(out), "--method", "nap", "--seeds", "0,1",
          "--limit", "1", "--sparsity", "0.5", "--device", "cpu"], capsys)
    stab = json.loads((out / "metrics.json").read_text())["targets"]["0.500"]["stability"]
    nodes = adapter.num_layers * (adapter.num_heads + 1)
    masks = []
    for seed in (0, 1):
        saved = load_tensors(out / "steps-1" / f"seed-{seed}" / "scores.safetensors")
        masks.append(top_k_mask(node_vector(saved["heads"], saved["mlps"]), edges_kept(0.5, nodes), absolute=True))
    both, either = int((masks[0] & masks[1]).sum()), int((masks[0] | masks[1]).sum())
    assert stab["pairwise_jaccard"][0][1] == pytest.approx(both / either)
    assert stab["runs"] == ["steps-1/seed-0", "steps-1/seed-1"]


def test_sl_circuit_takes_the_node_methods_and_mean_ablation(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    """``sl.circuit(method="nap")`` writes the command's files (no graph among its paths) and
    ``sl.circuit(method="eap", ablation="mean")`` the command's scores."""
    import subnetlab as sl

    root = tiny[0]
    options = {"n_train": 2, "n_eval": 6}
    got = sl.circuit(str(root / "model"), "circuit:ioi", tmp_path / "nap", method="nap", task_options=options,
                     device="cpu")
    assert got["summary"]["level"] == "nodes" and "graph" not in got["paths"]
    assert set(load_tensors(got["paths"]["scores"])) == {"heads", "mlps", "embeddings"}
    api = sl.circuit(str(root / "model"), "circuit:ioi", tmp_path / "api", method="eap", ablation="mean",
                     task_options=options, device="cpu")
    _run(["circuit", "--model", str(root / "model"), *TASK, "--out", str(tmp_path / "cli"), "--method", "eap",
          "--ablation", "mean", "--device", "cpu"], capsys)
    assert torch.equal(load_tensors(api["paths"]["scores"])["edges"],
                       load_tensors(tmp_path / "cli" / "scores.safetensors")["edges"])
