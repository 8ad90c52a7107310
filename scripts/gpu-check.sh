#!/usr/bin/env bash
# subnetlab's GPU check in one command: every `gpu`-marked test, then benchmarks/bench_gpu.py part by part, each
# under its own time limit (so one slow part cannot eat the rest), everything written under $OUT:
#   pytest.txt      the gpu-marked tests' output, its summary line last
#   bench_gpu.json  every benchmark row;  bench_gpu.md  the same as markdown tables
#   shapes/         benchmarks/real_shapes.py on CUDA in bfloat16: GPT-2 small, Pythia-160m, Qwen-2.5-0.5B and
#                   Llama-3.2-1B through every circuit job at 8 x 256 (time / a plain forward+backward, the peak
#                   by torch.cuda.max_memory_allocated beside the plan's prediction); 8b/: the same for EAP, EAP-IG
#                   and an edge-pruning step on a Llama-3.1-8B shape
#   gpu-check.log   the whole run (versions, the device, each part's exit status and time)
# Installs nothing from the network: the GPU image's python3 already holds torch with CUDA, transformers,
# tokenizers, safetensors, scipy, pandas, pyarrow, typer, rich (see scripts/gpu-machine-setup.sh); subnetlab runs
# from src/ (PYTHONPATH). Wheels found in .gpu-wheels/ (`scripts/gpu-machine-setup.sh download`, carried) are
# installed offline into a temporary folder first; the gpu tests and the benchmark do not need them.
#
# The one call a session with a GPU makes (device tool `run`, no carry needed; worst case 350 s of part limits,
# so timeout_s 380 leaves a machine start and a rerun inside the 15 minutes; the shapes and 8b parts add 220 s,
# run them in a second call when the first has finished: GPU_CHECK_PARTS="shapes 8b"):
#   run(command="bash scripts/gpu-check.sh", timeout_s=380)
#   run(command="GPU_CHECK_PARTS='shapes 8b' bash scripts/gpu-check.sh", timeout_s=250)
# The tables come back under files_at; the summary is the end of output_tail. Then give_back unless rerunning.
#
# On a machine without CUDA (a check of the script; the gpu tests are skipped, exit 0):
#   PYTHON=.venv/bin/python OMP_NUM_THREADS=1 scripts/gpu-check.sh --small      # or: make gpu-check SMALL=1
#
# Per-part limits in seconds (override with e.g. GPU_CHECK_LIMITS="tests=90 heads=55 edges=55 memory=150").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-gpu-check-out}
SMALL=()
[[ "${1:-}" == "--small" ]] && SMALL=(--small)
declare -A LIMIT=([tests]=90 [heads]=55 [edges]=55 [memory]=150 [shapes]=120 [8b]=100)
PARTS=${GPU_CHECK_PARTS:-tests heads edges memory}
[[ ${#SMALL[@]} -gt 0 ]] && LIMIT[shapes]=300  # on a shared CPU its one layer of GPT-2 small's width takes minutes
for pair in ${GPU_CHECK_LIMITS:-}; do LIMIT[${pair%%=*}]=${pair#*=}; done

mkdir -p "$OUT"
rm -rf "$OUT"/bench_gpu.json "$OUT"/bench_gpu.md "$OUT"/pytest.txt "$OUT"/gpu-check.log "$OUT"/shapes "$OUT"/8b
exec > >(tee -a "$OUT/gpu-check.log") 2>&1 3>&1  # fd 3: the log, for status lines of parts whose output goes elsewhere
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SITE=""
if compgen -G ".gpu-wheels/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .gpu-wheels/*.whl \
    || echo "gpu-check: the carried wheels did not install; going on without them"
fi
export PYTHONPATH="$PWD/src${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"

"$PY" - <<'EOF'
import platform, torch, transformers
cuda = torch.cuda.is_available()
print(f"gpu-check: python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
      + (f"cuda {torch.version.cuda}, {torch.cuda.get_device_name(0)}, "
         f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB" if cuda else "no CUDA: the gpu tests skip"))
EOF

status=0
timed() {  # name, command...: run under the part's limit, report its exit status and time
  local name=$1; shift
  local started=$SECONDS
  timeout -k 10 "${LIMIT[$name]}" "$@"
  local rc=$?
  local note=""
  [[ $rc == 124 || $rc == 137 ]] && note=" (stopped at its ${LIMIT[$name]} s limit; rows measured before it are kept)"
  echo "gpu-check: $name exit $rc in $((SECONDS - started)) s$note" >&3
  [[ $rc == 0 ]] || status=1
}

want() { [[ " $PARTS " == *" $1 "* ]]; }

# step 1: every gpu-marked test (on a machine without CUDA all of them skip)
if want tests; then
  timed tests "$PY" -m pytest -q -p no:cacheprovider -m gpu -rs tests > "$OUT/pytest.txt" 2>&1
  tail -n 15 "$OUT/pytest.txt"
fi

# steps 2 and 3: the benchmark, one part per process
for part in heads edges memory; do
  want "$part" && timed "$part" "$PY" benchmarks/bench_gpu.py --part "$part" --out "$OUT" "${SMALL[@]}"
done

# step 4: the real shapes (issue 47, item 6); --small: one layer of GPT-2 small on the CPU, a check of the script
if want shapes; then
  if [[ ${#SMALL[@]} -gt 0 ]]; then
    timed shapes "$PY" benchmarks/real_shapes.py --shapes gpt2-small --jobs eap,edge-pruning --layers 1 --rounds 1 \
      --batch 2 --length 16 --no-plan --out "$OUT/shapes"
  else
    timed shapes "$PY" benchmarks/real_shapes.py --device cuda --dtype bfloat16 --batch 8 --length 256 --threads 4 \
      --rounds 2 --job-seconds 5 --out "$OUT/shapes"
  fi
  [[ -f "$OUT/shapes/real_shapes.md" ]] && cat "$OUT/shapes/real_shapes.md"
fi
if want 8b && [[ ${#SMALL[@]} -eq 0 ]]; then
  timed 8b "$PY" benchmarks/real_shapes.py --shapes llama-3.1-8b --jobs eap,eap-ig,edge-pruning --device cuda \
    --dtype bfloat16 --batch 8 --length 256 --threads 4 --rounds 1 --out "$OUT/8b"
  [[ -f "$OUT/8b/real_shapes.md" ]] && cat "$OUT/8b/real_shapes.md"
fi

echo
[[ -f "$OUT/bench_gpu.md" ]] && cat "$OUT/bench_gpu.md"
[[ -f "$OUT/pytest.txt" ]] && echo "gpu-check: tests: $(tail -n 1 "$OUT/pytest.txt")"
echo "gpu-check: $([[ $status == 0 ]] && echo "every part finished" || echo "a part failed or ran out of time (above)"); tables in $OUT"
exit $status
