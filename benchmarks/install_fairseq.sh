#!/usr/bin/env bash
# A virtual environment with fairseq 0.12 for benchmarks/bench_fairseq.py (never needed by structnmt itself).
#
#   bash benchmarks/install_fairseq.sh [VENV]        # default VENV: ~/.cache/structnmt/fairseq-venv
#
# fairseq-fixed==0.12.3.1 is fairseq 0.12.3 with the fixes that let it build on Python 3.11 and current
# torch; it compiles its C++ extensions, about 4 minutes on a 2-core machine. torch is the same version as
# ours (the local CPU wheel where one is in $PIP_FIND_LINKS), so both toolkits run on the same kernels.
set -euo pipefail
VENV="${1:-$HOME/.cache/structnmt/fairseq-venv}"
TORCH_VERSION="$(python3 -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo 2.13.0)"
if [ -x "$VENV/bin/fairseq-train" ]; then
    echo "fairseq already installed in $VENV"
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip wheel setuptools
"$VENV/bin/pip" install -q "torch==${TORCH_VERSION}"
"$VENV/bin/pip" install -q "numpy<2" cython
"$VENV/bin/pip" install -q --no-build-isolation "fairseq-fixed==0.12.3.1"
"$VENV/bin/fairseq-train" --version >/dev/null 2>&1 || "$VENV/bin/python" -c "import fairseq; print('fairseq', fairseq.__version__)"
echo "fairseq installed in $VENV (fairseq-train, fairseq-generate, fairseq-preprocess in $VENV/bin)"
