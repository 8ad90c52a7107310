"""subnetlab view's page in a real browser (headless Chromium): counts in the DOM, the slider, no console errors,
a screenshot that is not blank. Skips where Chromium is not installed (.ci/run installs Debian's chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from subnetlab.cli import main
from tests.unit.view_helpers import GRAPH, KEPT, WARNING, circuit_eval_run, circuit_run, touched_nodes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")


def chromium(tmp: Path, url: str, *args: str) -> tuple[str, str]:
    """Run headless Chromium on ``url``; (stdout, stderr)."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
               "--window-size=1300,900", *args, url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return done.stdout, done.stderr


def selftest(dom: str) -> dict:
    found = re.search(r'<pre id="selftest">([^<]*)</pre>', dom)
    assert found and found.group(1), "the page did not record its self-test"
    return json.loads(found.group(1).replace("&quot;", '"'))


def no_errors(dom: str, log: str) -> None:
    assert re.search(r'<div id="errors" data-count="0">', dom), re.findall(r'<div id="errors"[^>]*>[^<]*', dom)
    console = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console


def test_view_page_in_chromium_counts_slider_compare_and_screenshot(tmp_path, capsys) -> None:
    left = circuit_run(tmp_path / "runs" / "seed-0", 0, warning=WARNING)
    right = circuit_run(tmp_path / "runs" / "seed-1", 1)
    evaluated = tmp_path / "eval"
    circuit_eval_run(evaluated, tmp_path / "runs" / "seed-0" / "graph.json", [3, 30, 300], [0.1, 0.4, 1.0])
    single, compare = tmp_path / "single.html", tmp_path / "compare.html"
    for args in ([str(evaluated), "--out", str(single)],
                 [str(tmp_path / "runs" / "seed-0"), str(tmp_path / "runs" / "seed-1"), "--out", str(compare)]):
        with pytest.raises(SystemExit) as done:
            main(["view", *args])
        assert done.value.code in (0, None), capsys.readouterr().err

    # one run (a circuit-eval run's curve of the top k by score): KEPT edges first (from the URL), then the slider
    dom, log = chromium(tmp_path, f"{single.as_uri()}#k={KEPT}&selftest=0,5,{KEPT},100", "--dump-dom")
    no_errors(dom, log)
    result = selftest(dom)
    nodes = len(GRAPH.writers) + 1
    first = result["initial"]["panels"][0]
    top = torch.zeros(GRAPH.num_edges, dtype=torch.bool)  # the curve's circuit: the KEPT highest (signed) scores
    top[torch.sort(left.scores, descending=True).indices[:KEPT]] = True
    assert first == {"nodes": nodes, "active": touched_nodes(GRAPH, top), "edges": KEPT, "selected": KEPT}
    drawn = [step["panels"][0]["edges"] for step in result["steps"]]
    assert drawn == [0, 5, KEPT, 100]  # the slider changes the edges drawn
    assert [step["panels"][0]["active"] for step in result["steps"]][0] == 0
    f_at_kept = 0.1 + (0.4 - 0.1) * (KEPT - 3) / (30 - 3)  # read off the curve between its measured sizes
    shown = re.search(r'id="faithfulness" data-f="([^"]+)"', dom)
    assert shown and float(shown.group(1)) == pytest.approx(f_at_kept), re.findall(r'id="faithfulness"[^>]*', dom)
    assert "CPR 0.610, CMD 0.420" in dom

    # two runs side by side: in both / only left / only right, from the runs' own kept edges
    dom, log = chromium(tmp_path, f"{compare.as_uri()}#selftest=0,{KEPT}", "--dump-dom")
    no_errors(dom, log)
    at_kept = selftest(dom)["steps"][1]
    a, b = left.in_graph, right.in_graph
    assert (at_kept["both"], at_kept["left"], at_kept["right"]) == (int((a & b).sum()), int((a & ~b).sum()),
                                                                    int((b & ~a).sum()))
    assert [p["edges"] for p in at_kept["panels"]] == [KEPT, KEPT]
    assert [p["active"] for p in at_kept["panels"]] == [touched_nodes(GRAPH, a), touched_nodes(GRAPH, b)]
    assert WARNING in dom  # the left run's health warning is on the page

    shot = tmp_path / "compare.png"
    chromium(tmp_path, f"{compare.as_uri()}#click=a1.h0", "--hide-scrollbars", f"--screenshot={shot}")
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (900, 1300)
    assert pixels.std() > 10 and (pixels < 200).mean() > 0.01, "the screenshot is blank"


def test_view_page_shows_the_stability_a_sweep_and_an_evaluation_recorded(tmp_path, capsys) -> None:
    """The stability panel: a sweep's DIR/metrics.json (circuits over seeds) and a circuit-eval's bootstrap over the
    pairs, each on the page as recorded; the Jaccard checked against Python sets of the runs' kept edges."""
    from subnetlab.analysis.stability import mask_stability

    sweep = tmp_path / "sweep"
    circuits = [circuit_run(sweep / "sparsity-0.900" / f"seed-{s}", s) for s in (0, 1)]
    stab = mask_stability([c.in_graph for c in circuits], GRAPH.edge_names, [0.7, 0.9], seed=0)
    stab["seeds"] = [0, 1]
    (sweep / "metrics.json").write_text(json.dumps({"command": "circuit", "controls": [],
                                                    "targets": {"0.900": {"score": "logit_diff", "stability": stab}}}))
    a, b = (set(torch.nonzero(c.in_graph).flatten().tolist()) for c in circuits)
    evaluated = tmp_path / "eval"
    circuit_eval_run(evaluated, sweep / "sparsity-0.900" / "seed-0" / "graph.json", [3, 30, 300], [0.1, 0.4, 1.0])
    measured = json.loads((evaluated / "faithfulness.json").read_text())
    measured["bootstrap"] = {"over": "pairs", "pairs": 40, "resamples": 500, "seed": 3, "level": 0.95,
                             "estimate": {"cpr": 0.61, "cmd": 0.42}, "interval": {"cpr": [0.5, 0.7], "cmd": [0.3, 0.55]},
                             "undefined": {"cpr": 0, "cmd": 0}}
    (evaluated / "faithfulness.json").write_text(json.dumps(measured))
    page = tmp_path / "sweep.html"
    for target, out in ((sweep, page), (evaluated, tmp_path / "eval.html")):
        with pytest.raises(SystemExit) as done:
            main(["view", str(target), "--out", str(out)])
        assert done.value.code in (0, None), capsys.readouterr().err

    dom, log = chromium(tmp_path, page.as_uri(), "--dump-dom")
    no_errors(dom, log)
    shown = re.findall(r'<tr data-mean-jaccard="([^"]+)">', dom)
    assert len(shown) == 1 and float(shown[0]) == pytest.approx(len(a & b) / len(a | b))
    # two seeds: their mean, n and range, never called an interval (MIN_INTERVAL_VALUES)
    assert "seed 0, seed 1" in dom and "0.800 (n = 2) range [0.700, 0.900], no interval" in dom
    dom, log = chromium(tmp_path, (tmp_path / "eval.html").as_uri(), "--dump-dom")
    no_errors(dom, log)
    assert "95% bootstrap over 40 pairs (500 resamples, seed 3): CPR 0.610 [0.500, 0.700], CMD 0.420 [0.300, 0.550]" in dom
