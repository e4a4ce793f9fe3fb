#!/usr/bin/env bash
# The device call of 2026-11-29 (one H200): (1) the GPU check (main's code, alone on the GPU), then (2) the en->cs grid's
# missing runs packed under CUDA MPS with the code that trained the grid's other runs (.gpu/code = commit 6aa99ac).
# Usage: bash .gpu/go.sh END_SECONDS CHECK_DEADLINE DEVICE [overrides...]
set -u
END=$1; CHECK=$2; DEV=$3; shift 3
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
lscpu | grep -m1 "Model name"
python3 -c "import torch, sacrebleu; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'sacrebleu', sacrebleu.__version__)"
if [ "$CHECK" -gt 0 ]; then
  extra=(); [ "$DEV" = cpu ] && extra=(--device cpu --smoke)
  PYTHONPATH=/tmp/site:$R/src timeout $((CHECK + 90)) python3 benchmarks/gpu_check.py --out "$OUT/check" --deadline "$CHECK" "${extra[@]}"
  echo "check ended rc $? at ${SECONDS}s"
fi
cd .gpu/code || exit 1
mkdir -p data-bin ../shared/data/blind
[ -f data-bin/multi30k_en_cs_spacy/manifest.json ] || tar -xJf ../data/multi30k_en_cs_spacy.tar.xz -C data-bin || exit 1
cp -n ../blind/*.gz ../shared/data/blind/
[ "$DEV" = cuda ] && { nvidia-cuda-mps-control -d 2>/dev/null || true; }
D=$((END - SECONDS))
echo "pack starts at ${SECONDS}s with deadline ${D}s"
G=configs/grids/cross_paper_multi30k_en_cs.yaml
PYTHONPATH=/tmp/site:$PWD/src python3 scripts/gpu_pack.py --deadline "$D" --min-left 0 --tar "$OUT/runs.tar.gz" \
  --job "$G:runs_gpu/cs:2:+ Heterogeneous QUERYK (1-2):+ Rel_Pos + Heterogeneous QUERYK (1-2):+ DEA + RHE:+ MG-SA (syntactic + ON-LSTM)" \
  --job "$G:runs_gpu/cs:3:+ Rel_Pos:+ Heterogeneous QUERYK (1-2):+ Rel_Pos + Heterogeneous QUERYK (1-2):+ DEA + RHE:+ MG-SA (syntactic + ON-LSTM)" \
  -- "train.device=$DEV" "evaluate.device=$DEV" "evaluate.parse_cache=$R/.gpu/parses.jsonl.gz" "$@"
echo "pack ended rc $? at ${SECONDS}s"
for f in logs_pack/*.log; do echo "== $f"; tail -n 2 "$f"; done
