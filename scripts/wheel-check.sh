#!/usr/bin/env bash
# The package builds and installs as a wheel: `python -m build --wheel --no-isolation` into a temporary dist/, the
# wheel installed into a fresh venv, then `subnetlab --help`, `--version` and `subnetlab models` run from outside
# the source tree, so nothing is imported from src/, and the wheel's package data is checked.
#
# The fresh venv gets the wheel alone (--no-deps) and reads its dependencies from $PYTHON's environment (a path
# line, not that environment's .pth hooks: its editable subnetlab stays out), and `pip check` confirms the wheel's
# declared requirements are met by them: torch is not installed a second time (minutes here). FULL=1 installs
# torch 2.13.0 and the dependencies into the fresh venv instead, as `make install` does.
# Usage: PYTHON=.venv/bin/python scripts/wheel-check.sh   (PYTHON needs `build`: pip install -e ".[lint]")
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
"$PYTHON" -m build --wheel --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/subnetlab-*.whl)
echo "wheel-check: built $(basename "$wheel") in $((SECONDS - t0)) s"
if [ "${FULL:-0}" = 1 ]; then
  "$PYTHON" -m venv "$work/venv"
  "$work/venv/bin/pip" install --quiet --upgrade pip
  "$work/venv/bin/pip" install --quiet torch==2.13.0
  "$work/venv/bin/pip" install --quiet "$wheel"
else  # no pip or setuptools of its own (theirs would shadow the newer ones torch requires)
  "$PYTHON" -m venv --without-pip "$work/venv"
  deps=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  here=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$deps" > "$here/_wheel_check_dependencies.pth"
  "$PYTHON" -m pip --python "$work/venv/bin/python" install --quiet --no-deps --no-index "$wheel"
  "$PYTHON" -m pip --python "$work/venv/bin/python" check
fi
echo "wheel-check: installed into a fresh venv in $((SECONDS - t0)) s"
cd "$work"  # away from src/: the installed wheel is what runs
"$work/venv/bin/subnetlab" --help >/dev/null
"$work/venv/bin/subnetlab" --version
"$work/venv/bin/subnetlab" models >/dev/null
"$work/venv/bin/python" - "$work/venv" <<'PY'
import importlib.resources as r, sys, subnetlab
# package data the wheel must carry: the shipped plan configs and the view page's static files
assert (r.files("subnetlab.models") / "configs").is_dir(), "models/configs missing from the wheel"
assert any(p.name.endswith(".js") for p in (r.files("subnetlab.view") / "static").iterdir()), "view/static missing"
assert subnetlab.__file__.startswith(sys.argv[1]), f"{subnetlab.__file__} is not the wheel's (under {sys.argv[1]})"
PY
echo "wheel-check: ok in $((SECONDS - t0)) s"
