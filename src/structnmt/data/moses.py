"""Moses pre-tokenization: the text pipeline of fairseq's examples before subwords, and its inverse.

fairseq's example data scripts run every side through the Moses scripts before learning BPE
(``prepare-wmt14en2de.sh``: ``normalize-punctuation.perl -l LANG | remove-non-printing-char.perl |
tokenizer.perl -a -l LANG``; ``prepare-iwslt14.sh``: ``tokenizer.perl -l LANG | lowercase.perl``), and
the fairseq Multi30k translations in ``../shared/data/anchors`` were trained on normalised,
tokenized, lowercased text. ``structnmt prepare --moses`` runs ``normalize-punctuation.perl`` and
``tokenizer.perl`` (``sacremoses``, the maintained Python port of those scripts) on each side in
its language before SentencePiece (and ``--lowercase`` after them, fairseq's order); the
vocabulary keeps the language of each side (:class:`structnmt.data.vocab.Vocab`'s ``moses``), so
translation tokenizes its input and detokenizes its output (``detokenizer.perl``'s port) with no
step left to the user.

Two choices, both the readable form of those scripts: no XML escaping (``tokenizer.perl
-no-escape``: SentencePiece reads ``'`` and ``&`` as they are, and a detokenized output carries
no ``&apos;``), and no aggressive hyphen splitting (``-a`` writes ``@-@``, which SentencePiece
would learn as pieces of their own). A language sacremoses has no rules for (its nonbreaking
prefixes) gets its generic ones: :func:`has_rules` says which, and ``prepare`` says so.
"""

from __future__ import annotations

from functools import cache
from typing import Any


def _sacremoses() -> Any:
    try:
        import sacremoses
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ImportError("Moses tokenization needs the 'sacremoses' package (pip install 'sacremoses>=0.1')") from exc
    return sacremoses


@cache
def moses_tokenizer(lang: str) -> Any:
    """sacremoses' ``MosesTokenizer`` for ``lang`` (one per language, built once)."""
    return _sacremoses().MosesTokenizer(lang=lang)


@cache
def _normalizer(lang: str) -> Any:
    return _sacremoses().MosesPunctNormalizer(lang=lang)


@cache
def _detokenizer(lang: str) -> Any:
    return _sacremoses().MosesDetokenizer(lang=lang)


def has_rules(lang: str) -> bool:
    """Whether sacremoses has rules of its own (nonbreaking prefixes) for the language code ``lang``."""
    return lang in _sacremoses().corpus.NonbreakingPrefixes().available_langs.values()


def moses_pretokenize(line: str, lang: str) -> str:
    """``normalize-punctuation.perl -l lang | tokenizer.perl -l lang -no-escape`` on one line.

    Example (``lang="de"``): ``'Ein Schild: „Welcome“.'`` -> ``'Ein Schild : " Welcome " .'``
    """
    return moses_tokenizer(lang).tokenize(_normalizer(lang).normalize(line), escape=False, return_str=True)


def moses_detokenize(text: str, lang: str) -> str:
    """``detokenizer.perl -l lang`` on one line of tokens separated by spaces."""
    return _detokenizer(lang).detokenize(text.split(), unescape=False)
