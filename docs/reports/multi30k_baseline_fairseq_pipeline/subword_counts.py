"""How differently SentencePiece's BPE and subword-nmt's BPE cut the Moses-tokenized Multi30k training text.

fairseq's Multi30k pipeline learns 10,000 joint merges with subword-nmt on lowercased, normalised,
Moses-tokenized text; ``structnmt prepare --lowercase --moses --vocab-size 10000`` tokenizes the same
way and learns a joint SentencePiece BPE model of 10,000 pieces. This script counts, on the training
text, the pieces each makes per language and the piece types in use.

    pip install subword-nmt
    python docs/reports/multi30k_baseline_fairseq_pipeline/subword_counts.py \
        --data ../shared/data/multi30k/train --spm data-bin/multi30k_en_de_lc_moses/spm.model
"""
from __future__ import annotations

import argparse
import gzip
import io

import sentencepiece as spm
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

from structnmt.data.moses import moses_pretokenize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="training prefix: {data}.en.gz and {data}.de.gz")
    ap.add_argument("--spm", required=True, help="the spm.model of a dataset prepared with --lowercase --moses")
    ap.add_argument("--merges", type=int, default=10000, help="subword-nmt merges (default 10,000)")
    args = ap.parse_args()
    text = {}
    for lang in ("en", "de"):
        with gzip.open(f"{args.data}.{lang}.gz", "rt", encoding="utf-8") as f:
            text[lang] = [moses_pretokenize(line.strip(), lang).lower() for line in f]  # fairseq's order
    codes = io.StringIO()
    learn_bpe(io.StringIO("\n".join(text["en"] + text["de"]) + "\n"), codes, args.merges)
    codes.seek(0)
    bpe = BPE(codes)
    sp = spm.SentencePieceProcessor(model_file=args.spm)
    print("| | pieces (en) | pieces (de) | piece types in use (both sides) |")
    print("|---|---:|---:|---:|")
    for name, cut in (("subword-nmt BPE", lambda s: bpe.process_line(s).split()),
                      ("SentencePiece BPE", lambda s: sp.encode(s, out_type=str))):
        pieces = {lang: [p for line in text[lang] for p in cut(line)] for lang in text}
        print(f"| {name} | {len(pieces['en']):,} | {len(pieces['de']):,} | "
              f"{len(set(pieces['en']) | set(pieces['de'])):,} |")


if __name__ == "__main__":
    main()
