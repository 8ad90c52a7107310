"""Faithfulness has health (issue 36, item 2): a degenerate baseline is flagged, warned about and refused under
strict; a curve over part of the size range says which part and its areas are labelled partial.

The baseline numbers are recomputed here by hand (each prompt run alone, the logit difference at its last
position), independently of the evaluator's batching; the span's areas by the trapezoid rule over two points.
"""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch

import subnetlab as sl
from subnetlab.cli import main
from subnetlab.errors import SubnetlabError
from subnetlab.progress import set_quiet
from subnetlab.runs.health import MIN_BASELINE_EFFECT

N_PAIRS = 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untrained tiny GPT-2 (its gap between clean and corrupted prompts is noise) and IOI pairs for it."""
    from transformers import GPT2Config

    from subnetlab.models import build_model
    from subnetlab.tasks import get_task
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    root = tmp_path_factory.mktemp("faithfulness-health")
    tok = gpt2_style_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    pairs = get_task("circuit:ioi", n_train=2, n_eval=N_PAIRS, seed=3).bind(tok).pairs("eval")
    return root, model, tok, pairs


def _logit_diff(model, tok, prompt: str, answer: str, wrong: str) -> float:
    """By hand: one prompt, the last position's logit of the answer's token minus the wrong answer's."""
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    a = tok(prompt + answer, add_special_tokens=False)["input_ids"][-1]
    w = tok(prompt + wrong, add_special_tokens=False)["input_ids"][-1]
    with torch.no_grad():
        last = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return float(last[a] - last[w])


def _by_hand(model, tok, rows) -> dict[str, float]:
    clean = torch.tensor([_logit_diff(model, tok, r["clean"], r["answer"], r["wrong"]) for r in rows])
    corrupted = torch.tensor([_logit_diff(model, tok, r["corrupted"], r["answer"], r["wrong"]) for r in rows])
    spread = math.sqrt((float(clean.var()) + float(corrupted.var())) / 2)
    full, empty = float(clean.mean()), float(corrupted.mean())
    return {"full": full, "empty": empty, "effect": abs(full - empty) / spread}


def _pairs_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(pairs, model, tok, *, empty_wins: bool) -> list[dict[str, str]]:
    """The pairs with answer and wrong answer ordered so that, for this model, the corrupted prompt gives the larger
    logit difference on every pair (``empty_wins``) or the clean prompt does."""
    rows = []
    for p in pairs:
        row = {"clean": p.clean, "corrupted": p.corrupted, "answer": p.answer, "wrong": p.wrong}
        gain = (_logit_diff(model, tok, p.corrupted, p.answer, p.wrong)
                - _logit_diff(model, tok, p.clean, p.answer, p.wrong))
        if (gain > 0) != empty_wins:
            row["answer"], row["wrong"] = p.wrong, p.answer  # swapping the answers flips the sign of both
        rows.append(row)
    return rows


FILE_OPTIONS = {"text_column": "clean", "corrupted_column": "corrupted", "answer_column": "answer",
                "wrong_answer_column": "wrong", "eval_fraction": 0.5}


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    set_quiet(False)
    try:
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
    finally:
        set_quiet(True)
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def _node_scores(path):
    from subnetlab.io import save_tensors

    save_tensors(path, {"heads": torch.tensor([[0.9, -0.1], [0.2, 0.8]]), "mlps": torch.tensor([0.05, -0.7])},
                 {"format": "subnetlab.attribution/1"})
    return path


def test_untrained_model_has_a_degenerate_baseline(tiny, tmp_path, capsys, one_thread):
    root, model, tok, pairs = tiny
    rows = [{"clean": p.clean, "corrupted": p.corrupted, "answer": p.answer, "wrong": p.wrong} for p in pairs]
    data = _pairs_file(tmp_path / "pairs.jsonl", rows)
    held = rows  # eval_fraction 1.0 is refused; measure on every row through an eval file of the same rows
    options = {**FILE_OPTIONS, "eval_file": str(data)}
    options.pop("eval_fraction")
    scores = _node_scores(tmp_path / "nodes.safetensors")
    with pytest.warns(sl.HealthWarning, match="degenerate baseline: logit_diff of the full model") as caught:
        result = sl.circuit_eval(str(root / "model"), f"file:{data}", tmp_path / "api", scores=scores,
                                 task_options=options, device="cpu")
    expected = _by_hand(model, tok, held)
    baseline = result["summary"]["health"]["baseline"]
    assert baseline["pairs"] == N_PAIRS
    assert baseline["full"] == pytest.approx(expected["full"], abs=1e-4)
    assert baseline["empty"] == pytest.approx(expected["empty"], abs=1e-4)
    assert baseline["effect"] == pytest.approx(expected["effect"], rel=1e-3, abs=1e-4)
    assert expected["effect"] < MIN_BASELINE_EFFECT  # an untrained model: the gap is noise against the spread
    assert result["summary"]["health"]["problems"] == ["degenerate-baseline"]
    assert [str(w.message) for w in caught] == result["warnings"]
    assert "f divides by this gap" in result["warnings"][0]

    flags = ["--text-column", "clean", "--corrupted-column", "corrupted", "--answer-column", "answer",
             "--wrong-answer-column", "wrong", "--task-option", f"eval_file={data}"]
    code, out, err = _cli(capsys, "circuit-eval", "--model", root / "model", "--task", f"file:{data}", *flags,
                          "--scores", scores, "--device", "cpu", "--out", tmp_path / "cli")
    assert code == 0, err
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: {tmp_path / 'cli'}: {result['warnings'][0].split(': ', 1)[1]}"]
    code, _, err = _cli(capsys, "--strict", "circuit-eval", "--model", root / "model", "--task", f"file:{data}", *flags,
                        "--scores", scores, "--device", "cpu", "--out", tmp_path / "strict")
    assert code == 2 and "degenerate baseline" in err and "refused under strict health checks" in err
    with pytest.raises(SubnetlabError, match="degenerate baseline.*refused under strict"):
        sl.circuit_eval(str(root / "model"), f"file:{data}", tmp_path / "api-strict", scores=scores,
                        task_options=options, device="cpu", strict=True)


@pytest.mark.parametrize("empty_wins", [True, False])
def test_an_empty_circuit_beyond_the_full_model_is_flagged(tiny, tmp_path, one_thread, empty_wins):
    """Answers ordered so that the corrupted prompt wins on every pair: m(empty) > m(full), flagged as inverted;
    ordered the other way the same pairs give a gap in the right direction, which is judged by its effect alone."""
    root, model, tok, pairs = tiny
    rows = _rows(pairs, model, tok, empty_wins=empty_wins)
    data = _pairs_file(tmp_path / "pairs.jsonl", rows)
    options = {k: v for k, v in FILE_OPTIONS.items() if k != "eval_fraction"} | {"eval_file": str(data)}
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = sl.circuit_eval(str(root / "model"), f"file:{data}", tmp_path / "run",
                                 scores=_node_scores(tmp_path / "nodes.safetensors"), task_options=options, device="cpu")
    expected = _by_hand(model, tok, rows)
    health = result["summary"]["health"]
    assert (expected["empty"] > expected["full"]) == empty_wins
    assert health["baseline"]["inverted"] == empty_wins
    flagged = empty_wins or expected["effect"] < MIN_BASELINE_EFFECT
    assert ("degenerate-baseline" in health["problems"]) == flagged
    if empty_wins and expected["effect"] >= MIN_BASELINE_EFFECT:
        assert "the empty circuit scores above the full model, so f is upside down" in health["messages"][0]


def test_two_circuits_cover_a_partial_span(tiny, tmp_path, capsys, one_thread):
    from subnetlab.models import get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.subnetwork import Subnetwork

    root, model, tok, _ = tiny
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter)
    order = torch.randperm(graph.num_edges, generator=torch.Generator().manual_seed(1))
    paths = []
    for share in (0.05, 0.10):
        keep = torch.zeros(graph.num_edges)
        keep[order[: max(1, round(share * graph.num_edges))]] = 1.0
        paths.append(tmp_path / f"c{share}.safetensors")
        Subnetwork.from_edges(adapter, graph, keep).save(paths[-1])
    task = ["--task", "circuit:ioi", "--task-option", "n_train=2", "--task-option", "n_eval=8"]
    code, out, err = _cli(capsys, "circuit-eval", "--model", root / "model", *task, "--circuit", paths[0],
                          "--circuit", paths[1], "--device", "cpu", "--out", tmp_path / "two")
    assert code == 0, err
    written = json.loads((tmp_path / "two" / "faithfulness.json").read_text())
    low, high = written["fractions"]
    assert written["span"] == {"from": low, "to": high, "partial": True}
    f = written["faithfulness"]["logit_diff"]
    assert written["cpr"] == pytest.approx((high - low) * (f[0] + f[1]) / 2, abs=1e-9)  # the trapezoid over the span
    label = f"CPR {written['cpr']:.3f}, CMD {written['cmd']:.3f} over {100 * low:.3g}-{100 * high:.3g}% of edges (partial span)"
    assert label in " ".join(out.split())  # the table's title, however the terminal wraps it
    assert json.loads((tmp_path / "two" / "metrics.json").read_text())["span"]["partial"] is True

    code, out, err = _cli(capsys, "circuit-eval", "--model", root / "model", *task, "--scores",
                          _node_scores(tmp_path / "nodes.safetensors"), "--device", "cpu", "--out", tmp_path / "whole")
    assert code == 0, err
    assert json.loads((tmp_path / "whole" / "metrics.json").read_text())["span"] == {"from": 0.001, "to": 1.0,
                                                                                     "partial": False}
    assert "partial span" not in out
