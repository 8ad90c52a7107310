"""lottery-prune / lottery-retrain: bad input is one `error:` line and exit 2."""

from __future__ import annotations

import pytest
import torch

from subnetlab.errors import SubnetlabError
from subnetlab.experiments import get_reproduction, settings_for
from subnetlab.runs.lottery import prune_config
from tests.unit.lottery_helpers import one_thread  # noqa: F401  (autouse fixture)


def _cli(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI entry point in-process (the subprocess contract is covered by test_cli_basics)."""
    from subnetlab.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["lottery-prune", "--model", "m", "--task", "nli-synthetic", "--method", "lottery", "--out", "x"], "--method 'lottery'"),
    (["lottery-prune", "--model", "m", "--task", "nli-synthetic", "--method", "importance", "--threshold", "1.5",
      "--out", "x"], "--threshold 1.5"),
    (["lottery-retrain", "--model", "minilm", "--task", "nli-synthetic", "--subnetwork", "no/such.safetensors",
      "--out", "x"], "no/such.safetensors: no such subnetwork file"),
    (["lottery-prune", "--model", "m", "--task", "nli-synthetic", "--method", "magnitude", "--control-scope", "layer",
      "--out", "x"], "--control-scope 'layer'"),
    (["lottery-prune", "--model", "m", "--task", "nli-synthetic", "--method", "importance", "--bad-fill", "best",
      "--out", "x"], "--bad-fill 'best'"),
    (["lottery-prune", "--model", "m", "--task", "nli-synthetic", "--method", "importance", "--stop-metric", "f1",
      "--out", "x"], "--stop-metric 'f1'"),
    (["lottery-patterns", "--model", "m", "--task", "nli-synthetic", "--counting", "sideways", "--out", "x"], "--counting 'sideways'"),
])
def test_bad_input_is_one_error_line(args, fragment, tmp_path, capsys):
    code, stderr = _cli(capsys, *[a if a != "x" else str(tmp_path / "out") for a in args])
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], stderr
    assert not (tmp_path / "out").exists()


def test_prune_config_defaults_and_validation():
    config = prune_config(model="m", task="t", method="magnitude")
    assert config["threshold"] == 0.9 and config["fraction"] == 0.1 and config["criterion"] == "sensitivity"
    with pytest.raises(SubnetlabError, match="unknown pruning option"):
        prune_config(model="m", task="t", method="magnitude", nope=1)
    with pytest.raises(SubnetlabError, match="unknown importance criterion 'fisher'"):
        prune_config(model="m", task="t", method="importance", criterion="fisher")
    with pytest.raises(SubnetlabError, match="eval_limit 0") as refused:
        prune_config(model="m", task="t", method="magnitude", eval_limit=0)
    assert refused.value.setting == "eval_limit"


def test_reproduction_settings_are_checked():
    module = get_reproduction("lottery")
    with pytest.raises(SubnetlabError, match="retrain_seeds"):  # when the settings are built
        settings_for(module, "demo", {"retrain_seeds": "[5]"})
    with pytest.raises(SubnetlabError, match="retrain_seeds"):  # a mapping, read when the study starts
        module.run({**module.PRESETS["demo"], "retrain_seeds": [5]}, "/nonexistent/never-written")
    assert set(module.PRESETS) == {"demo", "paper", "tour"}


def test_stability_and_patterns_helpers(tmp_path, capsys):
    from subnetlab.cli import main
    from subnetlab.io import read_json
    from subnetlab.models import build_model
    from subnetlab.subnetwork import Subnetwork
    from tests.conftest import tiny_config
    from tests.unit.lottery_helpers import word_tokenizer

    m = build_model(tiny_config("bert"), head="classification", seed=0)
    m.model.save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    files = []
    for i, kept in enumerate([["L0.H0", "L1.H2", "L1.MLP"], ["L0.H0", "L0.H3", "L1.MLP"]]):
        files += ["--subnetwork", str(tmp_path / f"s{i}.safetensors")]
        Subnetwork.from_names(m.adapter, kept, seed=i).save(tmp_path / f"s{i}.safetensors")

    with pytest.raises(SystemExit) as done:
        main(["lottery-stability", *files, "--out", str(tmp_path / "st")])
    assert done.value.code == 0
    summary = read_json(tmp_path / "st" / "stability.json")
    assert summary["super_survivor_heads"] == ["L0.H0"] and summary["super_survivor_mlps"] == ["L1.MLP"]
    assert summary["mean_jaccard"] == pytest.approx(1 / 3) and (tmp_path / "st" / "survival.png").is_file()

    with pytest.raises(SystemExit) as done:
        main(["lottery-patterns", "--model", str(tmp_path / "model"), "--task", "nli-synthetic", "--task-option",
              "n_train=1", "--task-option", "n_eval=3", "--task-option", "hans_per_subcase=1", "--pairs", "3",
              "--subnetwork", str(tmp_path / "s0.safetensors"), "--out", str(tmp_path / "pt")])
    assert done.value.code == 0
    patterns = read_json(tmp_path / "pt" / "patterns.json")
    assert patterns["examples"] == 3 and len(patterns["raw"]["types"]) == 2
    assert set(patterns["shares"]) == {"all heads, raw", "all heads, normed", "kept heads, raw", "kept heads, normed"}
    assert (tmp_path / "pt" / "patterns.png").is_file()


def test_patterns_counted_per_map_inside_the_pruned_model(tmp_path):
    from subnetlab.cli import main
    from subnetlab.io import read_json
    from subnetlab.models import build_model
    from subnetlab.subnetwork import Subnetwork
    from tests.conftest import tiny_config
    from tests.unit.lottery_helpers import word_tokenizer

    m = build_model(tiny_config("bert"), head="classification", seed=0)
    m.model.save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    Subnetwork.from_names(m.adapter, ["L0.H0", "L1.H2", "L1.MLP"]).save(tmp_path / "s.safetensors")
    with pytest.raises(SystemExit) as done:
        main(["lottery-patterns", "--model", str(tmp_path / "model"), "--task", "nli-synthetic", "--task-option",
              "n_train=1", "--task-option", "n_eval=3", "--task-option", "hans_per_subcase=1", "--pairs", "3",
              "--subnetwork", str(tmp_path / "s.safetensors"), "--pruned", "--counting", "per-map",
              "--out", str(tmp_path / "pt")])
    assert done.value.code == 0
    patterns = read_json(tmp_path / "pt" / "patterns.json")
    assert patterns["counting"] == "per-map" and patterns["pruned"]["measured"][0] == [1.0, 0.0, 0.0, 0.0]
    counts = torch.tensor(patterns["pruned"]["raw"]["map_counts"])  # [L, H, 5]
    kept = counts[0, 0] + counts[1, 2]
    assert kept.sum() == 6  # two kept heads x three maps
    share = patterns["shares"]["kept heads, raw"]
    assert [share[t] for t in patterns["type_order"]] == pytest.approx((kept / 6).tolist())


def test_single_sentence_tasks_give_one_sentence_per_map(tmp_path):
    from subnetlab.analysis.attention_types import head_types
    from subnetlab.experiments.lottery.jobs import sentence_pairs
    from subnetlab.models import build_model
    from subnetlab.tasks.registry import get_task
    from tests.conftest import tiny_config
    from tests.unit.lottery_helpers import word_tokenizer

    (tmp_path / "dev.tsv").write_text("s\t1\t\tthe cat sat .\ns\t0\t*\tcat the sat .\n")
    task = get_task("glue-cola", eval=str(tmp_path / "dev.tsv"))
    pairs, source = sentence_pairs(task, "id", 5, "task", None)
    assert pairs == [("the cat sat .", None), ("cat the sat .", None)] and "2 sentences" in source
    m = build_model(tiny_config("bert"), head="base", seed=0, attn_implementation="eager")
    ht = head_types(m.model, word_tokenizer(), pairs)
    assert ht.counts["raw"].sum() == 2 * 2 * 4  # two maps per head
