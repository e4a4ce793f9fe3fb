#!/usr/bin/env bash
# On a lent GPU machine, from the repository root, with .gpu/ carried (made by scripts/gpu_carry.sh): install
# the carried wheels, unpack the datasets, start CUDA MPS and run scripts/gpu_pack.py with the arguments given,
# writing its tarball to $OUT/runs.tar.gz and reading the parses from .gpu/. Run it again on the same warm
# machine to resume the runs stopped at the deadline.
#
#   bash scripts/gpu_run.sh --deadline 530 \
#     --job 'configs/grids/cross_paper_multi30k.yaml:runs_gpu/cross_paper_8k:1,2,3:PhraseTransformer (k=2)' \
#     -- budget.max_updates=8000 train.device=cuda
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
[ -L data-bin ] && rm data-bin  # a link made on the CPU machine arrives dangling
mkdir -p data-bin ../shared/data/blind
for t in .gpu/data/*.tar.xz; do
  name=$(basename "$t" .tar.xz)
  [ -f "data-bin/$name/manifest.json" ] || tar -xJf "$t" -C data-bin || exit 1
done
cp -n .gpu/blind/*.gz ../shared/data/blind/ 2>/dev/null
nvidia-cuda-mps-control -d 2>/dev/null || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, sacrebleu; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'sacrebleu', sacrebleu.__version__)"
python3 scripts/gpu_pack.py --tar "$OUT/runs.tar.gz" "$@" "evaluate.parse_cache=$PWD/.gpu/parses.jsonl.gz"
for f in logs_pack/*.log; do echo "== $f"; tail -n 2 "$f"; done
