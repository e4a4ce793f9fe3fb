"""Moses pre-tokenization: fairseq's text pipeline before subwords, and its inverse after decoding.

fairseq's Multi30k and WMT recipes run every side through Moses before learning BPE::

    normalize-punctuation.perl -l LANG | tokenizer.perl -l LANG [| lowercase.perl]

and ``detokenizer.perl -l LANG`` on the output. ``structnmt prepare --moses`` does the same
with ``sacremoses`` (the maintained Python port of those scripts) before SentencePiece, so
a dataset can be prepared the way fairseq's are; the vocabulary keeps the language of each
side (:class:`structnmt.data.vocab.Vocab`'s ``moses``), so translation pre-tokenizes its
input and detokenizes its output with no step left to the user.

Two choices, both the readable form of fairseq's: no XML escaping (``tokenizer.perl
-no-escape``: SentencePiece reads ``'`` and ``&`` as they are, and a detokenized output
carries no ``&apos;``), and no aggressive hyphen splitting (``-a`` writes ``@-@``, which
SentencePiece would learn as pieces of their own).
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


def moses_pretokenize(line: str, lang: str) -> str:
    """``normalize-punctuation.perl -l lang | tokenizer.perl -l lang -no-escape`` on one line.

    Example (``lang="de"``): ``'Ein Schild: „Welcome“.'`` -> ``'Ein Schild : " Welcome " .'``
    """
    return moses_tokenizer(lang).tokenize(_normalizer(lang).normalize(line), escape=False, return_str=True)


def moses_detokenize(text: str, lang: str) -> str:
    """``detokenizer.perl -l lang`` on one line of tokens separated by spaces."""
    return _detokenizer(lang).detokenize(text.split(), unescape=False)
