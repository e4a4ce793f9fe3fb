"""Reading a gold tree back: :func:`realize` builds the full example of a PTB tree of the source grammar.

The tree is parsed by :func:`structnmt.syntax.io.parse_ptb`; :class:`_TreeReader` walks its
:class:`~structnmt.syntax.trees.Node` objects into the syntax objects of :mod:`.grammar`,
checking that every expansion, word and agreement is one the grammar produces, and
:func:`.render._build_example` renders them as a generated sentence would be.
"""

from __future__ import annotations

from ...syntax.io import format_ptb, parse_ptb
from ...syntax.trees import ConstituencyTree, Node
from .grammar import _NP, _PP, _RC, _VP, _Clause, _ClauseCoord, _NPCoord, _VPCoord
from .lexicon import (
    _ADJECTIVES,
    _DET_LEMMA,
    _DET_PL,
    _DET_SG,
    _NOUN_OF_FORM,
    _PREPOSITIONS,
    _VERB_OF_FORM,
    _lexicon,
)
from .render import SynthExample, _build_example

__all__ = ["realize"]


def _labels(node: Node) -> list[str]:
    """The labels of the children of ``node`` (``[]`` for a preterminal)."""
    return [k.label for k in node.children]


class _TreeReader:
    """Builds syntax objects from the nodes of one parsed tree; ``words`` are the tree's words
    (a preterminal ``node`` holds ``words[node.start]``). Every method raises ValueError for
    a constituent outside the grammar."""

    def __init__(self, words: list[str]) -> None:
        self.words = words

    def show(self, node: Node) -> str:
        """The bracket string of ``node`` (for error messages)."""
        return format_ptb(ConstituencyTree(self.words, node))

    def word(self, node: Node, *tags: str) -> str:
        """The word of a preterminal labelled with one of ``tags``."""
        if node.label not in tags or not node.is_preterminal:
            raise ValueError(f"expected a {'/'.join(tags)} preterminal, got {self.show(node)}")
        return self.words[node.start]

    def np(self, node: Node) -> _NP | _NPCoord:
        if node.label != "NP":
            raise ValueError(f"expected NP, got {node.label}")
        kids, labs = node.children, _labels(node)
        if labs == ["NP", "CC", "NP"]:
            left, right = self.np(kids[0]), self.np(kids[2])
            if not (isinstance(left, _NP) and isinstance(right, _NP)):
                raise ValueError("nested NP coordination is outside the grammar")
            return _NPCoord(left, right)
        if labs and labs[0] == "NP":
            core = self.np(kids[0])
            if not isinstance(core, _NP) or core.pps or core.rel is not None:
                raise ValueError("NP modifiers must attach to a core NP")
            if labs[1:] == ["SBAR"]:
                core.rel = self.rc(kids[1], core.plural)
            elif labs[1:] and all(lab == "PP" for lab in labs[1:]):
                core.pps = [self.pp(k) for k in kids[1:]]
            else:
                raise ValueError(f"unexpected NP expansion {labs}")
            return core
        return self.core_np(node)

    def core_np(self, node: Node) -> _NP:
        """``(NP (DT d) (JJ a)* (NN|NNS n))``."""
        kids, labs = node.children, _labels(node)
        if len(kids) < 2 or labs[0] != "DT" or labs[-1] not in ("NN", "NNS"):
            raise ValueError(f"unexpected core NP {labs}")
        det_form = self.word(kids[0], "DT")
        adjs = [self.word(k, "JJ") for k in kids[1:-1]]
        noun_form = self.word(kids[-1], "NN", "NNS")
        if noun_form not in _NOUN_OF_FORM or det_form not in _DET_LEMMA:
            raise ValueError(f"unknown word in {self.show(node)}")
        noun, plural = _NOUN_OF_FORM[noun_form]
        if plural != (labs[-1] == "NNS"):
            raise ValueError(f"tag/number mismatch for {noun_form}")
        det = "a" if det_form == "an" else det_form
        if det not in (_DET_PL if plural else _DET_SG):
            raise ValueError(f"determiner {det_form!r} does not fit noun {noun_form!r}")
        for a in adjs:
            if a not in _ADJECTIVES:
                raise ValueError(f"unknown adjective {a!r}")
        return _NP(det, adjs, noun, plural)

    def pp(self, node: Node) -> _PP:
        if node.label != "PP" or _labels(node) != ["IN", "NP"]:
            raise ValueError(f"unexpected PP {self.show(node)}")
        prep = self.word(node.children[0], "IN")
        if prep not in _PREPOSITIONS:
            raise ValueError(f"unknown preposition {prep!r}")
        np = self.np(node.children[1])
        if not isinstance(np, _NP):
            raise ValueError("coordinated PP objects are outside the grammar")
        return _PP(prep, np)

    def rc(self, node: Node, ante_plural: bool) -> _RC:
        """A relative clause on a noun of number ``ante_plural``."""
        if node.label != "SBAR" or _labels(node) != ["WHNP", "S"]:
            raise ValueError(f"unexpected SBAR {self.show(node)}")
        whnp, s = node.children
        if not whnp.children or self.word(whnp.children[0], "WDT") != "that":
            raise ValueError("relative pronoun must be 'that'")
        labs = _labels(s)
        if labs == ["VP"]:
            return _RC("subj", self.vp(s.children[0], ante_plural))
        if labs == ["NP", "VP"]:
            subj = self.np(s.children[0])
            vp = self.vp(s.children[1], subj.plural)
            if not isinstance(vp, _VP) or vp.obj is not None or vp.pps:
                raise ValueError("object-gap relative clause needs a bare transitive verb")
            if not isinstance(subj, _NP):
                raise ValueError("coordinated relative-clause subjects are outside the grammar")
            return _RC("obj", vp, subj)
        raise ValueError(f"unexpected relative clause {labs}")

    def vp(self, node: Node, plural: bool) -> _VP | _VPCoord:
        """A VP whose subject has number ``plural``."""
        if node.label != "VP":
            raise ValueError(f"expected VP, got {node.label}")
        kids, labs = node.children, _labels(node)
        if labs == ["VP", "CC", "VP"]:
            return _VPCoord(self.vp(kids[0], plural), self.vp(kids[2], plural))
        if not kids:
            raise ValueError(f"unexpected VP {self.show(node)}")
        tag = labs[0]
        form = self.word(kids[0], "VBZ", "VBP", "VBD")
        if (tag, form) not in _VERB_OF_FORM:
            raise ValueError(f"unknown verb form {form!r}/{tag}")
        if tag != "VBD" and (tag == "VBP") != plural:
            raise ValueError(f"verb {form!r} does not agree with its subject")
        vp = _VP(_VERB_OF_FORM[(tag, form)], "past" if tag == "VBD" else "pres", plural)
        rest = kids[1:]
        if [k.label for k in rest] == ["NP"]:
            vp.obj = self.np(rest[0])
        else:
            vp.pps = [self.pp(k) for k in rest]
        return vp

    def clause(self, node: Node) -> _Clause | _ClauseCoord:
        if node.label != "S":
            raise ValueError(f"expected S, got {node.label}")
        kids, labs = node.children, _labels(node)
        if labs == ["S", "CC", "S"]:
            return _ClauseCoord(self.clause(kids[0]), self.clause(kids[2]))
        if labs != ["NP", "VP"]:
            raise ValueError(f"unexpected clause {labs}")
        subj = self.np(kids[0])
        return _Clause(subj, self.vp(kids[1], subj.plural))


def realize(tree: str, seed: int = 1) -> SynthExample:
    """Build the full example (target, dependencies, agreement probes) for a gold PTB tree.

    ``tree`` must be a tree of the source grammar (as in ``SynthExample.tree``); the target
    uses the lexicon of ``seed``.  Raises ValueError for trees outside the grammar or with
    source agreement errors (:class:`~structnmt.syntax.io.TreeFormatError`, a ValueError,
    for malformed brackets).  ``realize(ex.tree, cfg.seed)`` reproduces a generated example.
    """
    parsed = parse_ptb(tree)
    return _build_example(_TreeReader(parsed.words).clause(parsed.root), _lexicon(seed))
