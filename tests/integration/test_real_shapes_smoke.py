"""GPT-2 small's real shape (12 layers, 768 wide, 50,257 tokens, 32,491 edges) through every circuit job once.

Tiny configs hide shape bugs (a reader count off by the embedding nodes, a buffer sized by heads where it needs
key-value heads, a chunk boundary): here each job of ``benchmarks/real_shapes.py`` runs one step at the shape
users start from, through the library entry points the commands call, and ``subnetlab circuit --method eap`` then
``circuit-eval --mib`` run as commands on a saved model of that shape. Random weights: nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from tests.unit.circuit_helpers import gpt2_style_tokenizer

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "real_shapes.py"


@pytest.fixture(scope="module")
def real_shapes():
    spec = importlib.util.spec_from_file_location("real_shapes", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_shapes"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("real_shapes", None)


def test_every_circuit_job_runs_once_at_gpt2_small_shape(real_shapes, one_thread):
    args = real_shapes.arguments(["--batch", "2", "--length", "12", "--rounds", "0", "--ig-steps", "2",
                                  "--exact-edges", "4", "--no-plan", "--threads", "1"])
    result = real_shapes.run_jobs("gpt2-small", args)
    assert result["edges"] == 32_936 and result["layers"] == 12  # token and position embeddings: two writers
    rows = {row["job"]: row for row in result["rows"][1:]}
    assert sorted(rows) == sorted(real_shapes.JOBS)
    failed = {job: row["error"] for job, row in rows.items() if "error" in row}
    assert not failed, failed
    for job, row in rows.items():
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, (job, row)


def test_eap_then_mib_evaluation_as_commands_at_gpt2_small_shape(real_shapes, tmp_path, capsys, one_thread):
    from subnetlab.cli import main

    model = real_shapes.build_model("gpt2-small")
    model.save_pretrained(tmp_path / "model")
    gpt2_style_tokenizer().save_pretrained(tmp_path / "model")
    task = ["--model", str(tmp_path / "model"), "--task", "circuit:ioi", "--task-option", "n_train=2",
            "--task-option", "n_eval=2", "--device", "cpu"]

    def run(args):
        with pytest.raises(SystemExit) as e:
            main(args)
        captured = capsys.readouterr()
        assert e.value.code in (0, None), captured.err
        return captured.out

    run(["circuit", *task, "--method", "eap", "--out", str(tmp_path / "eap")])
    run(["circuit-eval", *task, "--scores", str(tmp_path / "eap" / "scores.safetensors"), "--mib",
         "--out", str(tmp_path / "ev")])
    written = json.loads((tmp_path / "ev" / "faithfulness.json").read_text())
    assert written["definition"] == "mib" and math.isfinite(written["cpr"]) and math.isfinite(written["cmd"])
