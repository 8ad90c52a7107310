#!/usr/bin/env bash
# The package builds and installs as a wheel: `python -m build --wheel` into a temporary dist/, the wheel installed
# into a fresh venv (torch==2.13.0 first, as `make install` does, from the same index or local wheel cache), then
# `subnetlab --help` and one tiny command run from outside the source tree, so nothing is imported from src/.
# Usage: PYTHON=.venv/bin/python scripts/wheel-check.sh   (PYTHON needs `build`: pip install -e ".[lint]")
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
"$PYTHON" -m build --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/subnetlab-*.whl)
echo "wheel-check: built $(basename "$wheel") in $((SECONDS - t0)) s"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
"$work/venv/bin/pip" install --quiet torch==2.13.0
"$work/venv/bin/pip" install --quiet "$wheel"
echo "wheel-check: installed into a fresh venv in $((SECONDS - t0)) s"
cd "$work"  # away from src/: the installed wheel is what runs
"$work/venv/bin/subnetlab" --help >/dev/null
"$work/venv/bin/subnetlab" --version
"$work/venv/bin/subnetlab" models
"$work/venv/bin/python" - <<'PY'
import importlib.resources as r, subnetlab
# package data the wheel must carry: the shipped plan configs and the view page's static files
assert (r.files("subnetlab.models") / "configs").is_dir(), "models/configs missing from the wheel"
assert any(p.name.endswith(".js") for p in (r.files("subnetlab.view") / "static").iterdir()), "view/static missing"
assert "site-packages" in subnetlab.__file__, subnetlab.__file__
PY
echo "wheel-check: ok in $((SECONDS - t0)) s"
