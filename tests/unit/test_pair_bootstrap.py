"""The bootstrap of MIB's CPR and CMD over the prompt pairs, against independent computations.

``numpy`` recomputes the percentile bootstrap on the same resample indices (the areas by the trapezoid rule written
out again); the estimate must be the plain metric; identical pairs must give a zero-width interval.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from subnetlab.errors import SubnetlabError
from tests.unit.test_mib import PERCENTAGES, tiny  # noqa: F401  (the tiny GPT-2 and its evaluator)


def _numpy_areas(full, empty, signed, absolute):
    """CPR / CMD by the trapezoid rule, written out in numpy (MIB's evaluate_area_under_curve)."""
    x = np.array(PERCENTAGES)
    fs, fa = (signed - empty) / (full - empty), (absolute - empty) / (full - empty)
    cpr = float(np.sum(np.diff(x) * (fs[1:] + fs[:-1]) / 2))
    cmd = float(np.sum(np.diff(x) * (np.abs(1 - fa[1:]) + np.abs(1 - fa[:-1])) / 2))
    return cpr, cmd


def _fake_pairs(pairs: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sizes = len(PERCENTAGES)
    return {"full": 3.0 + torch.rand(pairs, generator=g, dtype=torch.float64),
            "empty": torch.rand(pairs, generator=g, dtype=torch.float64) - 1.0,
            "signed": torch.rand(sizes, pairs, generator=g, dtype=torch.float64) * 3,
            "absolute": torch.rand(sizes, pairs, generator=g, dtype=torch.float64) * 3}


def test_bootstrap_matches_numpy_on_the_same_resamples():
    from subnetlab.analysis.mib_faithfulness import mib_bootstrap
    from subnetlab.analysis.stability import resample_indices

    per_pair = _fake_pairs(12)
    got = mib_bootstrap(per_pair, resamples=200, seed=7)
    index = resample_indices(12, 200, 7).numpy()
    arrays = {k: v.numpy() for k, v in per_pair.items()}
    draws = np.array([_numpy_areas(*(arrays[k][..., row].mean(-1) for k in ("full", "empty", "signed", "absolute")))
                      for row in index])
    for j, name in enumerate(("cpr", "cmd")):
        assert got["interval"][name] == pytest.approx(list(np.percentile(draws[:, j], [2.5, 97.5])), abs=1e-12)
    plain = _numpy_areas(*(arrays[k].mean(-1) for k in ("full", "empty", "signed", "absolute")))
    assert (got["estimate"]["cpr"], got["estimate"]["cmd"]) == pytest.approx(plain, abs=1e-12)
    assert got["pairs"] == 12 and got["resamples"] == 200 and got["undefined"] == {"cpr": 0, "cmd": 0}
    again = mib_bootstrap(per_pair, resamples=200, seed=7)
    assert again["interval"] == got["interval"]  # seeded: the same draws
    assert mib_bootstrap(per_pair, resamples=200, seed=8)["interval"] != got["interval"]


def test_identical_pairs_collapse_the_interval():
    from subnetlab.analysis.mib_faithfulness import mib_bootstrap

    one = _fake_pairs(1)
    same = {k: v.expand(*v.shape[:-1], 9).clone() for k, v in one.items()}
    got = mib_bootstrap(same, resamples=50, seed=0)
    for name in ("cpr", "cmd"):
        low, high = got["interval"][name]
        assert low == pytest.approx(got["estimate"][name], abs=1e-12) and high == pytest.approx(low, abs=1e-12)


def test_undefined_draws_are_counted_and_left_out():
    from subnetlab.analysis.stability import pair_bootstrap

    # pair 0: full == empty; pair 1: full - empty = 2. A resample of pair 0 only has no faithfulness.
    per_pair = {"full": torch.tensor([1.0, 3.0], dtype=torch.float64),
                "empty": torch.tensor([1.0, 1.0], dtype=torch.float64),
                "c": torch.tensor([1.0, 2.0], dtype=torch.float64)}

    def f(means):
        d = float(means["full"] - means["empty"])
        return {"f": float(means["c"] - means["empty"]) / d if d else float("nan")}

    got = pair_bootstrap(per_pair, f, resamples=400, seed=3)
    from subnetlab.analysis.stability import resample_indices

    index = resample_indices(2, 400, 3)
    assert got["undefined"]["f"] == int((index == 0).all(1).sum()) > 0
    assert got["estimate"]["f"] == pytest.approx(0.5)
    assert got["interval"]["f"] == pytest.approx([0.5, 0.5])  # every defined draw: (c - e) / (full - e) = 1/2


@pytest.mark.parametrize("resamples", [0, -3, 2.5, True])
def test_bad_resample_counts_are_refused(resamples):
    from subnetlab.analysis.mib_faithfulness import mib_bootstrap

    with pytest.raises(SubnetlabError, match="resamples"):
        mib_bootstrap(_fake_pairs(3), resamples=resamples, seed=0)


def test_per_pair_values_average_to_the_evaluators_means(tiny, one_thread):  # noqa: F811
    _, _, graph, scores, evaluate = tiny
    keep = scores.abs() >= scores.abs().median()
    per_pair, means = evaluate.per_pair(keep), evaluate(keep)
    assert set(per_pair) == set(means)
    for name, values in per_pair.items():
        assert values.shape == (evaluate.count,) and values.dtype == torch.float64
        assert float(values.mean()) == pytest.approx(means[name], rel=1e-6, abs=1e-7)


def test_mib_bootstrap_estimate_is_the_plain_metric(tiny, one_thread):  # noqa: F811
    from subnetlab.analysis.mib_faithfulness import mib_curves

    _, _, graph, scores, evaluate = tiny
    plain = mib_curves(graph, -scores, evaluate)
    booted = mib_curves(graph, -scores, evaluate, bootstrap=300, seed=1)
    boot = booted["bootstrap"]
    assert boot["estimate"]["cpr"] == pytest.approx(booted["cpr"], abs=1e-12)
    assert boot["estimate"]["cmd"] == pytest.approx(booted["cmd"], abs=1e-12)
    assert booted["cpr"] == pytest.approx(plain["cpr"], abs=1e-5) and booted["cmd"] == pytest.approx(plain["cmd"], abs=1e-5)
    for name in ("cpr", "cmd"):
        low, high = boot["interval"][name]
        assert low <= high and boot["pairs"] == evaluate.count == 8


def test_circuit_eval_bootstrap_end_to_end(tiny, tmp_path, capsys, one_thread):  # noqa: F811
    from subnetlab.cli import main
    from subnetlab.models.circuit import Circuit

    model, tok, graph, scores, _ = tiny
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    Circuit(graph, scores).save(tmp_path / "scores.json")
    args = ["circuit-eval", "--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=8",
            "--task-option", "n_eval=8", "--scores", str(tmp_path / "scores.json"), "--mib", "--bootstrap", "200",
            "--bootstrap-seed", "4", "--out", str(tmp_path / "a")]
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr().out
    assert e.value.code == 0
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    boot = metrics["bootstrap"]
    assert boot["resamples"] == 200 and boot["seed"] == 4 and boot["over"] == "pairs"
    assert boot["estimate"]["cpr"] == pytest.approx(metrics["cpr"], abs=1e-12)
    assert "95% percentile bootstrap over 8 pairs" in out

    from subnetlab.view.runs import read_runs, read_stability  # the view reads a MIB run and its bootstrap

    written = json.loads((tmp_path / "a" / "faithfulness.json").read_text())
    run = read_runs(tmp_path / "a")[0]
    absolute = written["absolute"]
    assert run.curve.points == [(c, f) for c, f in zip(absolute["edge_counts"], absolute["faithfulness"]["logit_diff"])]
    panel = read_stability(tmp_path / "a")
    assert panel[0]["kind"] == "pairs" and panel[0]["cpr"]["interval"] == boot["interval"]["cpr"]


def test_the_api_bootstraps_as_the_command_does(tiny, tmp_path, one_thread):  # noqa: F811
    import subnetlab as sl
    from subnetlab.models.circuit import Circuit

    model, tok, graph, scores, _ = tiny
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    Circuit(graph, scores).save(tmp_path / "scores.json")
    got = sl.circuit_eval(str(tmp_path / "model"), "circuit:ioi", tmp_path / "api", scores=tmp_path / "scores.json",
                          task_options={"n_train": 8, "n_eval": 8}, definition="mib", bootstrap=200, bootstrap_seed=4)
    boot = got["result"]["bootstrap"]
    assert boot["seed"] == 4 and boot["estimate"]["cmd"] == pytest.approx(got["summary"]["cmd"], abs=1e-12)
    with pytest.raises(SubnetlabError, match="computed for MIB's CPR and CMD"):
        sl.circuit_eval(str(tmp_path / "model"), "circuit:ioi", tmp_path / "b", scores=tmp_path / "scores.json",
                        task_options={"n_train": 8, "n_eval": 8}, bootstrap=200)
