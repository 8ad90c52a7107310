"""EAP-IG over several step counts and seeds: each run is the library's scores on its own pairs, and the circuits'
frequency and Jaccard are recomputed here by hand (Python sets) from the scores files."""

from __future__ import annotations

import json
import math

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.io import load_tensors
from tests.unit.test_circuit_eval_cli import _run, tiny  # noqa: F401 (the fixture)

TASK8 = ["--task", "circuit:ioi", "--task-option", "n_train=8", "--task-option", "n_eval=2"]


def _top_set(scores: torch.Tensor, k: int) -> set[int]:
    """The k largest |score| edges, ties to the lower index, by a plain Python sort."""
    values = [abs(float(v)) for v in scores]
    return set(sorted(range(len(values)), key=lambda i: (-values[i], i))[:k])


def _jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def test_mask_stability_by_hand():
    from subnetlab.analysis.stability import mask_stability

    sets = [{0, 1, 2}, {1, 2, 3}, {2}]
    masks = [torch.tensor([i in s for i in range(5)], dtype=torch.float32) for s in sets]
    got = mask_stability(masks, list("abcde"))
    assert got["pairwise_jaccard"][0][1] == pytest.approx(2 / 4) and got["pairwise_jaccard"][0][2] == pytest.approx(1 / 3)
    assert got["pairwise_jaccard"][1][2] == pytest.approx(1 / 3)
    assert got["mean_jaccard"] == pytest.approx((2 / 4 + 1 / 3 + 1 / 3) / 3)
    assert got["frequency"] == pytest.approx({"a": 1 / 3, "b": 2 / 3, "c": 1.0, "d": 1 / 3})
    assert got["kept_in_every"] == 1 and got["kept_in_any"] == 4


def test_split_jaccard_separates_steps_from_seeds():
    from subnetlab.runs.attribution_sweep import split_jaccard

    labels = [(5, 0), (5, 1), (10, 0), (10, 1)]
    pj = [[1, .1, .2, .3], [.1, 1, .4, .5], [.2, .4, 1, .6], [.3, .5, .6, 1]]
    got = split_jaccard(pj, labels)
    assert got["mean_jaccard_across_steps"] == pytest.approx((.2 + .5) / 2)  # same seed: (0,2), (1,3)
    assert got["mean_jaccard_across_seeds"] == pytest.approx((.1 + .6) / 2)  # same steps: (0,1), (2,3)
    assert math.isnan(split_jaccard(pj[:2], labels[:1] + [(10, 0)])["mean_jaccard_across_seeds"])


@pytest.mark.parametrize("steps, match", [([5, 0], "steps 0 must be between 1"), ([-2], "steps -2 must be between"),
                                          ([5, 10, 5], "ig_steps 5 given twice"), ([], "at least one step count")])
def test_bad_step_counts(steps, match):
    from subnetlab.runs.attribution_sweep import check_step_counts

    with pytest.raises(SubnetlabError, match=match):
        check_step_counts(steps)


def test_sampled_pairs_are_seeded_and_distinct():
    from subnetlab.runs.attribution import sampled_pairs

    a, b = sampled_pairs(8, 4, 0), sampled_pairs(8, 4, 1)
    assert a == sampled_pairs(8, 4, 0) and len(set(a)) == 4 and a == sorted(a) and a != b
    g = torch.Generator().manual_seed(0)
    assert a == sorted(torch.randperm(8, generator=g)[:4].tolist())


def test_eap_ig_over_steps_and_seeds_end_to_end(tiny, tmp_path, capsys, one_thread, monkeypatch):  # noqa: F811
    from subnetlab.methods.attribution import attribute
    from subnetlab.models.graph import Graph
    from subnetlab.runs.attribution import sampled_pairs
    from subnetlab.tasks.spec import TaskSpec

    root, model, adapter, tok = tiny
    out = tmp_path / "sweep"
    printed = _run(["circuit", "--model", str(root / "model"), *TASK8, "--out", str(out), "--method", "eap-ig",
                    "--ig-steps", "2,4", "--seeds", "0,1", "--limit", "4", "--sparsity", "0.8", "--device", "cpu"],
                   capsys).out
    runs = [(2, 0), (2, 1), (4, 0), (4, 1)]
    scores = {r: load_tensors(out / f"steps-{r[0]}/seed-{r[1]}" / "scores.safetensors")["edges"] for r in runs}
    # one run recomputed from the library's attribution on that seed's draw of 4 of the 8 pairs
    task = TaskSpec("circuit:ioi", {"n_train": 8, "n_eval": 2}).build()
    task.bind(tok)
    chosen = sampled_pairs(8, 4, 1)
    mine = attribute(model, adapter, Graph.from_adapter(adapter), [task.pair_batch(tok, "train", chosen)],
                     lambda logits, batch, full: task.metrics(logits, batch, full)["logit_diff"], method="eap-ig",
                     steps=4)
    assert torch.allclose(scores[(4, 1)], mine.edges, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(scores[(4, 0)], scores[(4, 1)])  # other pairs, other scores
    run_metrics = json.loads((out / "steps-4/seed-1" / "metrics.json").read_text())
    assert run_metrics["seed"] == 1 and run_metrics["scored_pairs"] == chosen and run_metrics["pairs"] == 4

    record = json.loads((out / "metrics.json").read_text())
    stab = record["targets"]["0.800"]["stability"]
    edges = scores[runs[0]].numel()
    k = edges - round(0.8 * edges)
    sets = [_top_set(scores[r], k) for r in runs]
    names = Graph.from_adapter(adapter).edge_names
    assert stab["kept"] == [k] * 4 and stab["runs"] == ["steps-2/seed-0", "steps-2/seed-1", "steps-4/seed-0",
                                                       "steps-4/seed-1"]
    for i in range(4):
        for j in range(4):
            assert stab["pairwise_jaccard"][i][j] == pytest.approx(_jaccard(sets[i], sets[j]))
    every, anyone = set.intersection(*sets), set.union(*sets)
    assert stab["kept_in_every"] == len(every) and stab["kept_in_any"] == len(anyone)
    assert stab["frequency"] == pytest.approx({names[e]: sum(e in s for s in sets) / 4 for e in anyone})
    assert stab["mean_jaccard_across_steps"] == pytest.approx((_jaccard(sets[0], sets[2]) + _jaccard(sets[1], sets[3])) / 2)
    assert "stability at target sparsity 0.800 over 4 runs (steps 2,4 x seeds 0,1)" in printed
    assert "| kept by every circuit / by any | " + f"{len(set.intersection(*sets))} / {len(set.union(*sets))} |" in \
        (out / "stability.md").read_text()

    from subnetlab.view.runs import read_runs, read_stability  # the view keeps each run's circuit as compared

    viewed = read_runs(out)
    assert [r.label for r in viewed] == stab["runs"]
    for run, kept in zip(viewed, sets):
        assert set(torch.nonzero(run.circuit.in_graph).flatten().tolist()) == kept
    panel = read_stability(out)
    assert [p["target"] for p in panel] == ["0.800"] and panel[0]["mean_jaccard"] == stab["mean_jaccard"]

    # a rerun resumes: the finished runs are read back, nothing is scored again, the comparison is the same
    import subnetlab.methods.attribution as attribution_module

    def no_scoring(*args, **kwargs):
        raise AssertionError("a finished run was scored again")

    monkeypatch.setattr(attribution_module, "attribute", no_scoring)
    _run(["circuit", "--model", str(root / "model"), *TASK8, "--out", str(out), "--method", "eap-ig",
          "--ig-steps", "2,4", "--seeds", "0,1", "--limit", "4", "--sparsity", "0.8", "--device", "cpu"], capsys)
    assert json.loads((out / "metrics.json").read_text()) == record


def test_a_step_sweep_without_seeds_scores_the_same_pairs(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    root, model, adapter, tok = tiny
    out = tmp_path / "steps"
    _run(["circuit", "--model", str(root / "model"), *TASK8, "--out", str(out), "--method", "eap-ig",
          "--ig-steps", "1,3", "--device", "cpu"], capsys)
    record = json.loads((out / "metrics.json").read_text())
    assert record["seeds"] is None and list(record["targets"]) == ["0.950"]
    for name in ("steps-1/seed-all", "steps-3/seed-all"):
        assert json.loads((out / name / "metrics.json").read_text())["pairs"] == 8


def test_the_api_sweeps_steps_and_refuses_a_lone_sparsity(tiny, tmp_path, one_thread):  # noqa: F811
    import subnetlab as sl

    root, *_ = tiny
    got = sl.circuit(str(root / "model"), "circuit:ioi", tmp_path / "api", method="eap-ig", ig_steps=[1, 2],
                     sparsity=0.5, task_options={"n_train": 4, "n_eval": 2}, device="cpu")
    assert got["stability"]["0.500"]["stability"]["runs"] == ["steps-1/seed-all", "steps-2/seed-all"]
    written = json.loads((tmp_path / "api" / "metrics.json").read_text())["targets"]["0.500"]["stability"]
    assert written["pairwise_jaccard"] == got["stability"]["0.500"]["stability"]["pairwise_jaccard"]
    assert math.isnan(written["mean_jaccard_across_seeds"])  # no two runs differ in the seed alone
    with pytest.raises(SubnetlabError, match="sets the circuits compared"):
        sl.circuit(str(root / "model"), "circuit:ioi", tmp_path / "one", method="eap-ig", sparsity=0.5,
                   task_options={"n_train": 4, "n_eval": 2}, device="cpu")
    assert not (tmp_path / "one").exists()
