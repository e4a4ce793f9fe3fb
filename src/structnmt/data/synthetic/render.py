"""Rendering a syntax object of :mod:`.grammar` into a :class:`SynthExample`.

:class:`_SourceRenderer` linearises it into source tokens, the PTB bracket string and the
UD-like dependency tree (a :class:`~structnmt.syntax.trees.DependencyTree`);
:class:`_TargetRenderer` applies the transduction rules of the package docstring
(:mod:`structnmt.data.synthetic`, "Target language"); :func:`_build_example` puts both
together with the agreement probes ("Agreement probes").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...syntax.trees import DependencyTree
from .grammar import _NP, _PP, _RC, _VP, _Clause, _ClauseCoord, _NPCoord, _VPCoord
from .lexicon import _DET_LEMMA, _NOUN_PL, _VERB_FORMS, PLURAL_SUFFIX, target_verb

__all__ = ["SynthExample"]


@dataclass
class SynthExample:
    """One parallel sentence pair with gold syntax for the source side.

    ``src`` / ``tgt``: the tokens; ``tree``: the gold constituency tree of ``src`` as a PTB
    bracket string; ``dep``: its gold dependency tree (``dep.words == src``; ``xpos`` and
    ``lemmas`` set for generated examples); ``agreement``: the probes, one dict per probed verb
    (package docstring); ``feats``: the CoNLL-U FEATS column, one string per word, which a
    ``DependencyTree`` has no room for (``[]`` where unknown). ``heads``, ``deprels``,
    ``upos``, ``xpos`` and ``lemmas`` read the columns of ``dep``.
    """

    src: list[str]
    tgt: list[str]
    tree: str
    dep: DependencyTree
    agreement: list[dict] = field(default_factory=list)
    feats: list[str] = field(default_factory=list)

    @property
    def heads(self) -> list[int]:
        """1-based head of every source word, 0 for the root."""
        return self.dep.heads

    @property
    def deprels(self) -> list[str]:
        return self.dep.deprels

    @property
    def upos(self) -> list[str]:
        return self.dep.upos

    @property
    def xpos(self) -> list[str]:
        """The PTB tags (the tree's preterminals); ``[]`` where the tree has none."""
        return self.dep.xpos or []

    @property
    def lemmas(self) -> list[str]:
        """``[]`` where the tree has none."""
        return self.dep.lemmas or []


# --------------------------------------------------------------------------- source rendering

_VERB_TAG = {("pres", False): "VBZ", ("pres", True): "VBP", ("past", False): "VBD",
             ("past", True): "VBD"}


class _SourceRenderer:
    """Linearises a syntax object into tokens, a PTB tree and UD-like dependencies.

    Each method renders one constituent, appending its words, and returns ``(bracket
    string, 0-based index of its head word)``. The columns grow word by word (``heads`` are
    1-based as in CoNLL-U; a word is the root until :meth:`attach` gives it a head);
    :meth:`dependency_tree` wraps them once the sentence is complete.
    """

    def __init__(self) -> None:
        self.forms: list[str] = []
        self.lemmas: list[str] = []
        self.upos: list[str] = []
        self.xpos: list[str] = []
        self.feats: list[str] = []
        self.heads: list[int] = []
        self.rels: list[str] = []
        # (the VP, its verb's index, its subject head's index, kind), in word order
        self.verbs: list[tuple[_VP, int, int, str]] = []

    def add(self, form: str, lemma: str, upos: str, xpos: str, feats: str = "_") -> int:
        self.forms.append(form)
        self.lemmas.append(lemma)
        self.upos.append(upos)
        self.xpos.append(xpos)
        self.feats.append(feats)
        self.heads.append(0)
        self.rels.append("root")
        return len(self.forms) - 1

    def attach(self, child: int, head: int, rel: str) -> None:
        self.heads[child] = head + 1
        self.rels[child] = rel

    def dependency_tree(self) -> DependencyTree:
        return DependencyTree(words=self.forms, heads=self.heads, deprels=self.rels, upos=self.upos,
                              xpos=self.xpos, lemmas=self.lemmas)

    def np(self, np: _NP | _NPCoord) -> tuple[str, int]:
        if isinstance(np, _NPCoord):
            t1, h1 = self.np(np.left)
            cc = self.add("and", "and", "CCONJ", "CC")
            t2, h2 = self.np(np.right)
            self.attach(h2, h1, "conj")
            self.attach(cc, h2, "cc")
            return f"(NP {t1} (CC and) {t2})", h1
        nxt = np.adjs[0] if np.adjs else np.noun
        det_form = "an" if np.det == "a" and nxt[0] in "aeiou" else np.det
        d = self.add(det_form, _DET_LEMMA[det_form], "DET", "DT")
        parts = [f"(DT {det_form})"]
        adj_idx = []
        for a in np.adjs:
            adj_idx.append(self.add(a, a, "ADJ", "JJ", "Degree=Pos"))
            parts.append(f"(JJ {a})")
        if np.plural:
            form, tag, feats = _NOUN_PL[np.noun], "NNS", "Number=Plur"
        else:
            form, tag, feats = np.noun, "NN", "Number=Sing"
        n = self.add(form, np.noun, "NOUN", tag, feats)
        parts.append(f"({tag} {form})")
        self.attach(d, n, "det")
        for a in adj_idx:
            self.attach(a, n, "amod")
        tree = "(NP " + " ".join(parts) + ")"
        if np.pps:
            sub = [tree]
            for pp in np.pps:
                t, h = self.pp(pp)
                self.attach(h, n, "nmod")
                sub.append(t)
            tree = "(NP " + " ".join(sub) + ")"
        elif np.rel is not None:
            t, v = self.rc(np.rel, n)
            self.attach(v, n, "acl:relcl")
            tree = f"(NP {tree} {t})"
        return tree, n

    def pp(self, pp: _PP) -> tuple[str, int]:
        p = self.add(pp.prep, pp.prep, "ADP", "IN")
        t, h = self.np(pp.np)
        self.attach(p, h, "case")
        return f"(PP (IN {pp.prep}) {t})", h

    def rc(self, rc: _RC, ante: int) -> tuple[str, int]:
        w = self.add("that", "that", "PRON", "WDT", "PronType=Rel")
        if rc.gap == "subj":
            vt, v = self.vp(rc.vp, ante, "relcl")
            self.attach(w, v, "nsubj")
            return f"(SBAR (WHNP (WDT that)) (S {vt}))", v
        assert rc.subj is not None
        st, sh = self.np(rc.subj)
        vt, v = self.vp(rc.vp, sh, "relcl")
        self.attach(sh, v, "nsubj")
        self.attach(w, v, "obj")
        return f"(SBAR (WHNP (WDT that)) (S {st} {vt}))", v

    def vp(self, vp: _VP | _VPCoord, subj: int, kind: str) -> tuple[str, int]:
        if isinstance(vp, _VPCoord):
            t1, v1 = self.vp(vp.left, subj, kind)
            cc = self.add("and", "and", "CCONJ", "CC")
            t2, v2 = self.vp(vp.right, subj, "conj")
            self.attach(v2, v1, "conj")
            self.attach(cc, v2, "cc")
            return f"(VP {t1} (CC and) {t2})", v1
        base, sg, past = _VERB_FORMS[vp.verb]
        tag = _VERB_TAG[(vp.tense, vp.plural)]
        if tag == "VBZ":
            form, feats = sg, "Mood=Ind|Number=Sing|Person=3|Tense=Pres|VerbForm=Fin"
        elif tag == "VBP":
            form, feats = base, "Mood=Ind|Tense=Pres|VerbForm=Fin"
        else:
            form, feats = past, "Mood=Ind|Tense=Past|VerbForm=Fin"
        v = self.add(form, vp.verb, "VERB", tag, feats)
        self.verbs.append((vp, v, subj, kind))
        parts = [f"({tag} {form})"]
        if vp.obj is not None:
            t, h = self.np(vp.obj)
            self.attach(h, v, "obj")
            parts.append(t)
        for pp in vp.pps:
            t, h = self.pp(pp)
            self.attach(h, v, "obl")
            parts.append(t)
        return "(VP " + " ".join(parts) + ")", v

    def clause(self, c: _Clause | _ClauseCoord) -> tuple[str, int]:
        if isinstance(c, _ClauseCoord):
            t1, v1 = self.clause(c.left)
            cc = self.add("and", "and", "CCONJ", "CC")
            t2, v2 = self.clause(c.right)
            self.attach(v2, v1, "conj")
            self.attach(cc, v2, "cc")
            return f"(S {t1} (CC and) {t2})", v1
        st, sh = self.np(c.subj)
        vt, v = self.vp(c.vp, sh, "main")
        self.attach(sh, v, "nsubj")
        return f"(S {st} {vt})", v


# --------------------------------------------------------------------------- target rendering


class _TargetRenderer:
    """Applies the transduction rules (SOV, postpositions, N-Adj, prenominal relatives).

    Each method appends the target tokens of one constituent to ``toks``; ``verb_index``
    maps ``id(vp)`` of every rendered :class:`_VP` to the index of its verb in ``toks``.
    """

    def __init__(self, lex: dict[tuple[str, str], str]) -> None:
        self.lex = lex
        self.toks: list[str] = []
        self.verb_index: dict[int, int] = {}

    def np(self, np: _NP | _NPCoord) -> None:
        if isinstance(np, _NPCoord):
            self.np(np.left)
            self.toks.append(self.lex[("C", "and")])
            self.np(np.right)
            return
        if np.rel is not None:
            self.rc(np.rel)
        for pp in reversed(np.pps):
            self.pp(pp)
        self.toks.append(self.lex[("D", np.det)])
        noun = self.lex[("N", np.noun)]
        self.toks.append(noun + PLURAL_SUFFIX if np.plural else noun)
        for a in reversed(np.adjs):
            self.toks.append(self.lex[("A", a)])

    def pp(self, pp: _PP) -> None:
        self.np(pp.np)
        self.toks.append(self.lex[("P", pp.prep)])

    def rc(self, rc: _RC) -> None:
        if rc.subj is not None:
            self.np(rc.subj)
        self.vp(rc.vp)
        self.toks.append(self.lex[("R", rc.gap)])

    def vp(self, vp: _VP | _VPCoord) -> None:
        if isinstance(vp, _VPCoord):
            self.vp(vp.left)
            self.toks.append(self.lex[("C", "and")])
            self.vp(vp.right)
            return
        for pp in reversed(vp.pps):
            self.pp(pp)
        if vp.obj is not None:
            self.np(vp.obj)
        self.verb_index[id(vp)] = len(self.toks)
        self.toks.append(target_verb(self.lex[("V", vp.verb)], vp.tense, vp.plural))

    def clause(self, c: _Clause | _ClauseCoord) -> None:
        if isinstance(c, _ClauseCoord):
            self.clause(c.left)
            self.toks.append(self.lex[("C", "and")])
            self.clause(c.right)
            return
        self.np(c.subj)
        self.vp(c.vp)


def _agreement_items(verbs: list[tuple[_VP, int, int, str]], dep: DependencyTree,
                     verb_index: dict[int, int], lex: dict[tuple[str, str], str]) -> list[dict]:
    """The agreement probes (package docstring) of the ``verbs`` of :class:`_SourceRenderer`
    that are separated from their subject head, sorted by target index; ``verb_index`` maps
    ``id(vp)`` to the verb's index in the target (:class:`_TargetRenderer`)."""
    items: list[dict] = []
    for vp, v, s, kind in verbs:
        distance = v - s - 1
        if distance < 1:
            continue
        stem = lex[("V", vp.verb)]
        attractors = sum(
            1 for i in range(s + 1, v) if dep.upos[i] == "NOUN" and (dep.xpos[i] == "NNS") != vp.plural
        )
        items.append({
            "tgt_index": verb_index[id(vp)],
            "lemma_tgt": stem,
            "expected": target_verb(stem, vp.tense, vp.plural),
            "wrong": target_verb(stem, vp.tense, not vp.plural),
            "distance": distance,
            "number": "pl" if vp.plural else "sg",
            "attractors": attractors,
            "kind": kind,
        })
    items.sort(key=lambda d: d["tgt_index"])
    return items


def _build_example(c: _Clause | _ClauseCoord, lex: dict[tuple[str, str], str]) -> SynthExample:
    """The example of the sentence ``c`` with the target stems ``lex`` (:func:`.lexicon._lexicon`)."""
    src = _SourceRenderer()
    tree, root = src.clause(c)
    src.heads[root] = 0
    src.rels[root] = "root"
    dep = src.dependency_tree()
    tgt = _TargetRenderer(lex)
    tgt.clause(c)
    items = _agreement_items(src.verbs, dep, tgt.verb_index, lex)
    return SynthExample(src=list(dep.words), tgt=tgt.toks, tree=tree, dep=dep, agreement=items, feats=src.feats)
