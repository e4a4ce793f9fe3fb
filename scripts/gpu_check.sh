#!/usr/bin/env bash
# On a lent GPU machine, from the repository root, with .gpu/ carried (made by scripts/gpu_carry.sh): install the
# carried wheels, unpack the datasets and run the GPU check (benchmarks/gpu_check.py) with every cross-paper row
# timed on the spaCy-parsed Multi30k dataset, its table and JSON written to $OUT. Options go to gpu_check.py.
#
#   bash scripts/gpu_check.sh --deadline 420      # the whole check; nothing new starts after 7 minutes
#   bash scripts/gpu_check.sh --rows Transformer 'SA-NMT (shared)' 'RNN (NMT)'
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
[ -L data-bin ] && rm data-bin  # a link made on the CPU machine arrives dangling
mkdir -p data-bin
for t in .gpu/data/*.tar.xz; do
  name=$(basename "$t" .tar.xz)
  [ -f "data-bin/$name/manifest.json" ] || tar -xJf "$t" -C data-bin || exit 1
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 benchmarks/gpu_check.py --out "${OUT:?the device tool sets OUT}" --data data-bin/multi30k_en_de_spacy "$@"
