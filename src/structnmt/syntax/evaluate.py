"""evalb-style bracket scoring, and the dependency-to-constituency evaluation on the PTB sample.

:func:`bracket_f1` compares, sentence by sentence, the multisets of ``(start, end,
label)`` over non-preterminal constituents, following evalb's ``COLLINS.prm``:

* punctuation words (gold POS ``,`` ``:`` ``.`` `````` ``''``) are deleted before spans
  are computed, so brackets that differ only in punctuation attachment match, and a
  constituent made only of punctuation is dropped;
* labels are compared without function tags (``NP-SBJ`` = ``NP``), ``ADVP`` = ``PRT``,
  and ``TOP``/``ROOT`` wrapper brackets are not counted;
* the whole-sentence bracket **is** counted (as evalb does) unless ``include_root=False``;
* scores are micro-averaged over all brackets of the corpus.

Command line::

    python -m structnmt.syntax.evaluate --ptb-dir ../shared/data/ptb_sample

reads ``treebank.zip`` (``treebank/combined/*.mrg``) and ``dependency_treebank.zip``
(``dependency_treebank/*.dp``, Malt-TAB ``word tag head``) without extracting them,
aligns the sentences file by file, converts the dependency trees with
:func:`structnmt.syntax.convert.dependency_to_constituency` and prints labelled and
unlabelled bracket precision / recall / F1.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from structnmt.syntax.convert import PTB_TO_UPOS, dependency_to_constituency
from structnmt.syntax.io import PtbSample
from structnmt.syntax.trees import ConstituencyTree

__all__ = ["bracket_f1", "brackets", "load_ptb_sample", "main"]

EVALB_PUNCT = {",", ":", ".", "``", "''"}
_EQ_LABEL = {"PRT": "ADVP"}
_DELETED = {"TOP", "ROOT", ""}


def _clean_label(label: str) -> str:
    if not label.startswith("-"):
        label = re.split(r"[-=]", label, maxsplit=1)[0] or label
    return _EQ_LABEL.get(label, label)


def brackets(tree: ConstituencyTree, punct: list[bool] | None = None, labelled: bool = True,
             include_root: bool = True) -> Counter:
    """Multiset of ``(start, end, label)`` (label ``""`` if unlabelled) after deleting
    the words flagged in ``punct`` (indices re-numbered over the kept words)."""
    n = len(tree.words)
    if punct is None:
        punct = [False] * n
    # position of each word among kept words
    new_index = [0] * (n + 1)
    k = 0
    for i in range(n):
        new_index[i] = k
        if not punct[i]:
            k += 1
    new_index[n] = k
    out: Counter = Counter()
    for node in tree.root.walk():
        if node.is_preterminal:
            continue
        if node.label in _DELETED:
            continue
        if not include_root and node is tree.root:
            continue
        s, e = new_index[node.start], new_index[node.end]
        if e <= s:
            continue  # punctuation only
        out[(s, e, _clean_label(node.label) if labelled else "")] += 1
    return out


def bracket_f1(gold: list[ConstituencyTree], pred: list[ConstituencyTree], labelled: bool = True,
               ignore_punct: bool = True, include_root: bool = True) -> dict:
    """Corpus-level bracket precision, recall and F1 (evalb style; see module docstring).

    Punctuation is decided by the *gold* POS tags and deleted from both trees.
    Returns ``{"precision", "recall", "f1", "n_sentences", "matched", "gold", "pred"}``.
    """
    if len(gold) != len(pred):
        raise ValueError(f"bracket_f1: {len(gold)} gold trees but {len(pred)} predicted trees")
    matched = n_gold = n_pred = 0
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g.words) != len(p.words):
            raise ValueError(f"bracket_f1: sentence {i} has {len(g.words)} gold words but "
                             f"{len(p.words)} predicted words")
        punct = [t in EVALB_PUNCT for t in g.tags] if ignore_punct else None
        gb = brackets(g, punct, labelled, include_root)
        pb = brackets(p, punct, labelled, include_root)
        matched += sum((gb & pb).values())
        n_gold += sum(gb.values())
        n_pred += sum(pb.values())
    prec = matched / n_pred if n_pred else 0.0
    rec = matched / n_gold if n_gold else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"precision": prec, "recall": rec, "f1": f1, "n_sentences": len(gold),
            "matched": matched, "gold": n_gold, "pred": n_pred}


def load_ptb_sample(ptb_dir: str | Path):
    """Aligned ``(gold constituency trees, dependency trees, stats)`` of the PTB sample.

    Gold trees are read with ``-NONE-`` elements and function tags removed. Sentences are
    paired in order within each file; a pair whose word sequences differ is skipped and
    counted in ``stats["mismatched"]``.
    """
    sample = PtbSample(ptb_dir)
    dp_names = sample.dp_names()
    mrg_names = sample.mrg_names()
    gold, deps = [], []
    stats = Counter()
    for name in mrg_names:
        stem = Path(name).stem
        g_trees = sample.constituency(name)
        stats["gold_sentences"] += len(g_trees)
        if stem not in dp_names:
            stats["files_without_dependencies"] += 1
            stats["mismatched"] += len(g_trees)
            continue
        d_trees = sample.dependency(dp_names[stem], upos_of=PTB_TO_UPOS)
        stats["dependency_sentences"] += len(d_trees)
        if len(d_trees) != len(g_trees):
            stats["files_with_count_mismatch"] += 1
        for g, d in zip(g_trees, d_trees):
            if g.words == d.words:
                gold.append(g)
                deps.append(d)
                stats["aligned"] += 1
            else:
                stats["mismatched"] += 1
        stats["mismatched"] += abs(len(d_trees) - len(g_trees))
    stats["files"] = len(mrg_names)
    return gold, deps, stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m structnmt.syntax.evaluate",
                                 description="Bracket F1 of dependency-to-constituency conversion "
                                             "on the PTB sample.")
    ap.add_argument("--ptb-dir", required=True, help="folder with treebank.zip and dependency_treebank.zip")
    ap.add_argument("--style", default="hybrid", choices=["flat", "xbar", "hybrid", "all"],
                    help="conversion style (default: hybrid); 'all' scores every style")
    ap.add_argument("--exclude-root", action="store_true", help="do not count the whole-sentence bracket")
    ap.add_argument("--keep-punct", action="store_true", help="do not delete punctuation (evalb does)")
    args = ap.parse_args(argv)
    gold, deps, stats = load_ptb_sample(args.ptb_dir)
    print(f"files: {stats['files']}  gold sentences: {stats['gold_sentences']}  "
          f"dependency sentences: {stats['dependency_sentences']}  aligned: {stats['aligned']}  "
          f"mismatched/skipped: {stats['mismatched']}")
    styles = ["flat", "xbar", "hybrid"] if args.style == "all" else [args.style]
    for style in styles:
        pred = [dependency_to_constituency(d, style=style) for d in deps]
        for labelled in (True, False):
            r = bracket_f1(gold, pred, labelled=labelled, ignore_punct=not args.keep_punct,
                           include_root=not args.exclude_root)
            kind = "labelled  " if labelled else "unlabelled"
            print(f"{style:6s} {kind} P={100 * r['precision']:.2f} R={100 * r['recall']:.2f} "
                  f"F1={100 * r['f1']:.2f}  (matched {r['matched']}, gold {r['gold']}, "
                  f"pred {r['pred']}, sentences {r['n_sentences']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
