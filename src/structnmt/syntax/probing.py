"""Probing labels for MG-SA §4.2 (the five tasks of Shi et al. 2016), derived from trees.

Tasks, from sentence-level to word-level granularity:

* **Voice** (sentence): ``"active"``/``"passive"`` of the *main verb* (see
  :func:`main_verb_chain`): passive iff the main verb is ``VBN`` and one of the
  auxiliaries above it in the main verb chain is a form of "be" or "get".
* **Tense** (sentence): ``"past"``/``"non-past"`` of the main clause: past iff the
  finite verb (first verb of the main verb chain) is ``VBD`` ("held", "was eaten",
  "had gone", "did go"), or the chain is a lone ``VBN`` with no auxiliary (a
  past-tense verb tagged as a participle). Modals are non-past, including
  "could"/"would" (``MD`` carries no tense tag).
* **TSS** (sentence): the labels of the top node's children joined by spaces, e.g.
  ``"NP VP ."``; the 19 most frequent sequences of the corpus are kept as classes and
  every other sequence becomes ``"other"`` (20 classes).
* **SPC** (word): the label of the smallest phrase constituent above each word, i.e.
  the lowest non-preterminal ancestor (the preterminal's parent).
* **POS** (word): the preterminal labels.

Phrase labels (TSS, SPC) drop PTB function tags and indices (``NP-SBJ-1`` -> ``NP``);
labels starting with ``-`` (``-NONE-``, ``-LRB-``) are kept. A unary ``ROOT``/``TOP``
wrapper above the top node is skipped, so TSS reads the children of ``S``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from structnmt.syntax.trees import ConstituencyTree, Node

__all__ = [
    "BE_FORMS",
    "GET_FORMS",
    "main_verb_chain",
    "pos_labels",
    "probing_labels",
    "smallest_phrase_constituent",
    "tense",
    "top_level_sequence",
    "tss_classes",
    "voice",
]

VERB_TAGS = frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD", "TO"})
"""Preterminals that can be part of the main verb chain (auxiliaries, modals, infinitival to)."""
CLAUSE_LABELS = frozenset({"S", "SINV", "SQ", "SBAR", "SBARQ"})
BE_FORMS = frozenset(
    {"be", "is", "are", "was", "were", "been", "being", "am", "'s", "'re", "'m", "s", "re", "m"}
)
GET_FORMS = frozenset({"get", "gets", "got", "gotten", "getting"})
ROOT_WRAPPER_LABELS = frozenset({"ROOT", "TOP", ""})
OTHER = "other"


def _base(label: str) -> str:
    """Drop function tags / indices: ``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; ``-NONE-`` stays."""
    if label.startswith("-"):
        return label
    for sep in ("-", "="):
        label = label.split(sep, 1)[0]
    return label


def _top(tree: ConstituencyTree) -> Node:
    root = tree.root
    while (
        root.label in ROOT_WRAPPER_LABELS
        and len(root.children) == 1
        and not root.children[0].is_preterminal
    ):
        root = root.children[0]
    return root


def main_verb_chain(tree: ConstituencyTree) -> list[Node]:
    """The verb preterminals of the main clause, outermost first: auxiliaries..., main verb.

    From the top node, repeatedly: collect the verb preterminals (``VB*``, ``MD``, ``TO``)
    that are direct children of the current node, then descend into its first ``VP``
    child; if it has none, into its first clause child (``S``, ``SINV``, ``SQ``, ``SBAR``,
    ``SBARQ``) as long as no verb has been collected yet. The last collected verb is the
    main verb; the earlier ones are its auxiliaries. For coordinated VPs the first conjunct
    is followed. Empty when the sentence has no verb.
    """
    def verb_of(c: Node) -> Node | None:
        """A verb preterminal, or a unary VP over one (how head projection wraps auxiliaries:
        ``(VP (VP (VBZ has)) (VP (VBN been) ...))``)."""
        if c.is_preterminal:
            return c if c.label in VERB_TAGS else None
        if _base(c.label) == "VP" and len(c.children) == 1:
            return verb_of(c.children[0])
        return None

    chain: list[Node] = []
    node: Node | None = _top(tree)
    while node is not None:
        chain.extend(v for v in map(verb_of, node.children) if v is not None)
        nxt = next((c for c in node.children if _base(c.label) == "VP" and verb_of(c) is None), None)
        if nxt is None and not chain:
            nxt = next((c for c in node.children if _base(c.label) in CLAUSE_LABELS), None)
        node = nxt
    return chain


def voice(tree: ConstituencyTree) -> str:
    """``"passive"`` iff the main verb is ``VBN`` under a "be"/"get" auxiliary in its chain, else ``"active"``.

    "was eaten", "has been eaten", "got fired" are passive; "has eaten", "was eating"
    and verbless sentences are active. Adjectival participles ("is gone") count as
    passive — the rule sees tags, not meaning.
    """
    chain = main_verb_chain(tree)
    if not chain or chain[-1].label != "VBN":
        return "active"
    aux = {tree.words[n.start].lower() for n in chain[:-1]}
    return "passive" if aux & (BE_FORMS | GET_FORMS) else "active"


def tense(tree: ConstituencyTree) -> str:
    """``"past"`` iff the finite verb of the main clause is ``VBD`` (or a lone ``VBN``), else ``"non-past"``.

    The finite verb is the first of :func:`main_verb_chain`, so a past auxiliary makes the
    clause past ("had eaten", "was eaten", "did eat"); modals and verbless sentences are
    non-past.
    """
    chain = main_verb_chain(tree)
    if not chain:
        return "non-past"
    if chain[0].label == "VBD" or (len(chain) == 1 and chain[0].label == "VBN"):
        return "past"
    return "non-past"


def top_level_sequence(tree: ConstituencyTree) -> str:
    """Labels of the top node's children joined by a space, e.g. ``"NP VP ."``."""
    return " ".join(_base(c.label) for c in _top(tree).children)


def tss_classes(sequences: Sequence[str], n: int = 19) -> list[str]:
    """Map each sequence to itself if among the ``n`` most frequent, else ``"other"``.

    Frequency ties are broken by the sequence string in ascending (code point) order, so
    the class set does not depend on corpus order.
    """
    counts = Counter(sequences)
    ranked = sorted(counts, key=lambda s: (-counts[s], s))
    keep = set(ranked[:n])
    return [s if s in keep else OTHER for s in sequences]


def smallest_phrase_constituent(tree: ConstituencyTree) -> list[str]:
    """Per word, the label of its lowest non-preterminal ancestor (function tags dropped).

    In a one-word tree whose root is the preterminal itself, the word's POS tag is used.
    """
    out: list[str | None] = [None] * len(tree)

    def visit(node: Node, parent: Node | None) -> None:
        if node.is_preterminal:
            out[node.start] = _base(parent.label) if parent is not None else node.label
            return
        for c in node.children:
            visit(c, node)

    visit(tree.root, None)
    return out  # type: ignore[return-value]


def pos_labels(tree: ConstituencyTree) -> list[str]:
    """Per word, its POS tag (preterminal label)."""
    return tree.tags


def probing_labels(trees: Iterable[ConstituencyTree], n_tss: int = 19) -> dict[str, list]:
    """All five MG-SA §4.2 probing tasks for a corpus.

    Returns ``{"voice": [str], "tense": [str], "tss": [str] (top-``n_tss`` + "other"),
    "spc": [[str] per word], "pos": [[str] per word]}``, one entry per sentence.
    """
    trees = list(trees)
    return {
        "voice": [voice(t) for t in trees],
        "tense": [tense(t) for t in trees],
        "tss": tss_classes([top_level_sequence(t) for t in trees], n_tss),
        "spc": [smallest_phrase_constituent(t) for t in trees],
        "pos": [pos_labels(t) for t in trees],
    }
