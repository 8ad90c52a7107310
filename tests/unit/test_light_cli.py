"""The command line's help and model table load neither torch nor transformers (issue 30: ``--help`` took 3.8 s).

Each check runs a fresh interpreter, since this test process has imported torch already, and asks its
``sys.modules`` afterwards: a statement about what is imported, not a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("torch", "transformers", "datasets", "pandas")

PROBE = """
import json, sys
import subnetlab.cli as cli
try:
    cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "heavy": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def _imported(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["prune", "--help"], ["reproduce", "--help"], ["models"]])
def test_help_and_model_table_import_no_torch(args):
    result = _imported(*args)
    assert result["code"] == 0
    assert result["heavy"] == []


def test_import_subnetlab_is_light_and_its_names_still_load():
    code = ("import sys, subnetlab as sl; light = 'torch' not in sys.modules; "
            "print(light, sl.load_model.__module__, sl.Subnetwork.__name__, 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "subnetlab.models.loading", "Subnetwork", "True"]
