#!/usr/bin/env bash
# On this (CPU) machine, with spaCy installed, from the repository root: fill .gpu/ with what a lent GPU
# machine needs to train and score grid rows there (docs/experiments.md, "Many runs on one GPU"):
#   .gpu/whl/          wheels of the dependencies the GPU image lacks (pure Python)
#   .gpu/data/D.tar.xz the prepared dataset D (its fingerprint must match the grid's committed runs)
#   .gpu/parses.jsonl.gz the dataset parser's parses of its test splits and of the blind inputs
#   .gpu/blind/        the blind English inputs the grids translate (../shared does not travel)
# Then call the device tool with carry [".gpu"] and `bash scripts/gpu_run.sh ...` as the command.
#
#   bash scripts/gpu_carry.sh data-bin/multi30k_en_de_spacy
set -euo pipefail
if [ $# -ne 1 ] || [ ! -f "$1/manifest.json" ]; then
  echo "gpu_carry: give one prepared dataset directory (one holding manifest.json), e.g. data-bin/multi30k_en_de_spacy" >&2
  exit 2
fi
data=${1%/}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >> .git/info/exclude; }
mkdir -p .gpu/whl .gpu/data .gpu/blind
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  subword-nmt==0.3.8 mock==5.2.0 sacremoses==0.2.0 deepsig==1.2.8 dill==0.4.1 sacrebleu==2.6.0
cp ../shared/data/blind/*.en.gz .gpu/blind/
tar -cf - -C "$(dirname "$data")" "$(basename "$data")" | xz -9e -T1 > ".gpu/data/$(basename "$data").tar.xz"
inputs=()
for f in "$data"/*.src.txt; do
  case $(basename "$f") in valid.*) ;; *) inputs+=("$f") ;; esac
done
structnmt parse --data "$data" --input "${inputs[@]}" .gpu/blind/*.en.gz --out .gpu/parses.jsonl.gz
size=$( (git ls-files -co --exclude-standard -z; find .gpu -type f -print0) | du -cb --files0-from=- | tail -1 | cut -f1)
echo "gpu_carry: the working tree with .gpu/ is $((size / 1048576)) MiB of the 64 MiB that travel"
[ "$size" -le $((64 * 1048576)) ] || { echo "gpu_carry: over 64 MiB: the device call would be refused" >&2; exit 1; }
