"""Dependency trees to constituency trees by head projection.

Every word ``h`` projects a phrase covering itself and the projections of its
dependents (so a phrase spans ``h``'s whole subtree). The phrase label comes from
``h``'s POS tag -- the PTB tag (``xpos``) when the tree has one, else the UPOS:

==========================================  =====================================
head POS                                    phrase
==========================================  =====================================
NN NNS NNP NNPS PRP EX CD DT POS $ # /      NP
NOUN PROPN PRON NUM DET
VB VBD VBG VBN VBP VBZ MD / VERB AUX        VP, or S (see below)
JJ JJR JJS / ADJ                            ADJP
RB RBR RBS / ADV                            ADVP
IN / ADP, and TO without a verb dependent   PP; SBAR if it has a verbal dependent
SCONJ                                       SBAR
TO with a verbal dependent                  VP
WDT WP WP$ / WRB                            WHNP / WHADVP; SBAR over a verbal dependent
RP                                          PRT
UH / INTJ                                   INTJ
anything else                               X
==========================================  =====================================

A head with a ``cop`` dependent (UD copula) is treated as a verb.

**S rule.** A verbal projection that contains a subject -- a dependent whose relation
is ``nsubj``/``csubj``/``expl`` (any subtype) or ``SBJ``; when the tree has no
informative relations (e.g. the Malt-TAB ``.dp`` files of the PTB sample), the nearest
nominal (NP-category) dependent *left* of the verb -- is labelled ``S``.

**Styles** (``style=``):

* ``"flat"`` -- one node per head, all dependents' projections as its children; a verb
  with a subject is a single flat ``S``.
* ``"xbar"`` -- binarised: the head is combined with one dependent per level (right
  dependents innermost first, then left ones); every level carries the head's label.
* ``"hybrid"`` (default; best bracket F1 on the PTB sample, see ``docs/syntax.md``) --
  flat, except that a clause is split the PTB way: ``S`` over
  [material before and including the subject, VP over the verb and its non-punctuation
  dependents after the subject, trailing punctuation]; leading UD ``aux`` dependents
  nest VPs (``will (VP join ...)``), a nominal with UD ``case`` dependents becomes
  ``PP [case (NP rest)]`` and a verb with ``mark`` dependents ``SBAR [mark (S rest)]``;
  a WH word heading a clause is wrapped as ``SBAR [(WHNP that) (S ...)]``.

A dependent *without* dependents projects a unary phrase (``(NP (PRP he))``) when it is
an NP/VP/ADJP/ADVP-category word whose head is not nominal (so pre-nominal ``the``,
``Pierre`` or adjectives stay bare preterminals inside the NP, as in the PTB), and
always when it is a WH word or a particle. Punctuation never projects.

**Non-projective trees** are first made projective by *lifting*: while some arc
``h -> d`` spans a word that ``h`` does not dominate, the shortest such arc is
re-attached to ``h``'s head. Every phrase is then a contiguous span. Several root words
(or lifting up to the root) give a ``FRAG`` node over the roots' projections.
Preterminals carry the POS tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from structnmt.syntax.trees import ConstituencyTree, DependencyTree, Node

__all__ = ["dependency_to_constituency", "projectivize", "phrase_category", "PTB_TO_UPOS"]

_NP_TAGS = {"NN", "NNS", "NNP", "NNPS", "PRP", "EX", "CD", "DT", "POS", "$", "#", "NOUN",
            "PROPN", "PRON", "NUM", "DET"}
_VERB_TAGS = {"VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD", "VERB", "AUX"}
_ADJ_TAGS = {"JJ", "JJR", "JJS", "ADJ"}
_ADV_TAGS = {"RB", "RBR", "RBS", "ADV"}
_PUNCT_TAGS = {",", ".", ":", "``", "''", "-LRB-", "-RRB-", "PUNCT", "HYPH", "NFP", "SYM_PUNCT"}
_WH = {"WDT": "WHNP", "WP": "WHNP", "WP$": "WHNP", "WRB": "WHADVP"}
_SUBJ_RELS = {"nsubj", "csubj", "expl", "nsubjpass", "csubjpass", "SBJ", "SUBJ"}
_UNINFORMATIVE_RELS = {"", "_", "dep", "DEP", "ROOT", "root", "NULL"}

PTB_TO_UPOS = {
    "NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN", "NNPS": "PROPN", "PRP": "PRON", "PRP$": "PRON",
    "WP": "PRON", "WP$": "PRON", "EX": "PRON", "CD": "NUM", "DT": "DET", "PDT": "DET", "WDT": "DET",
    "VB": "VERB", "VBD": "VERB", "VBG": "VERB", "VBN": "VERB", "VBP": "VERB", "VBZ": "VERB",
    "MD": "AUX", "JJ": "ADJ", "JJR": "ADJ", "JJS": "ADJ", "RB": "ADV", "RBR": "ADV", "RBS": "ADV",
    "WRB": "ADV", "IN": "ADP", "TO": "PART", "RP": "ADP", "POS": "PART", "CC": "CCONJ", "UH": "INTJ",
    "FW": "X", "LS": "X", "SYM": "SYM", "$": "SYM", "#": "SYM", ",": "PUNCT", ".": "PUNCT",
    ":": "PUNCT", "``": "PUNCT", "''": "PUNCT", "-LRB-": "PUNCT", "-RRB-": "PUNCT", "-NONE-": "X",
}


def _is_punct(tag: str, upos: str) -> bool:
    return tag in _PUNCT_TAGS or upos == "PUNCT"


def phrase_category(tag: str, has_verbal_dependent: bool = False) -> str:
    """The phrase label a word with POS ``tag`` projects (before the S rule)."""
    if tag in _NP_TAGS:
        return "NP"
    if tag in _VERB_TAGS:
        return "VP"
    if tag in _ADJ_TAGS:
        return "ADJP"
    if tag in _ADV_TAGS:
        return "ADVP"
    if tag in ("IN", "ADP"):
        return "SBAR" if has_verbal_dependent else "PP"
    if tag == "SCONJ":
        return "SBAR"
    if tag == "TO":
        return "VP" if has_verbal_dependent else "PP"
    if tag in _WH:
        return "SBAR" if has_verbal_dependent else _WH[tag]
    if tag == "RP":
        return "PRT"
    if tag in ("UH", "INTJ"):
        return "INTJ"
    return "X"


def projectivize(heads: list[int]) -> list[int]:
    """Lift non-projective arcs (shortest first) to the head's head until none is left.

    ``heads`` are 1-based with 0 = root; the result is a projective head list.
    """
    heads = list(heads)
    n = len(heads)
    while True:
        # anc[k] = set of ancestors of word k (1-based ids, 0 included)
        anc: list[set[int]] = []
        for k in range(n):
            s: set[int] = set()
            j = heads[k]
            while j > 0 and j not in s:
                s.add(j)
                j = heads[j - 1]
            s.add(0)
            anc.append(s)
        best = None
        for d in range(n):
            h = heads[d]
            if h == 0:
                continue
            lo, hi = sorted((h - 1, d))
            if any(h not in anc[k] for k in range(lo + 1, hi)):
                length = hi - lo
                if best is None or length < best[0]:
                    best = (length, d)
        if best is None:
            return heads
        d = best[1]
        heads[d] = heads[heads[d] - 1]


@dataclass
class _Kid:
    node: Node
    dep: int  # 0-based word index of the dependent; -1 for the head's own preterminal
    rel: str
    punct: bool


def _span(kids: list[_Kid], label: str) -> Node:
    return Node(label, kids[0].node.start, kids[-1].node.end, [k.node for k in kids])


class _Converter:
    def __init__(self, tree: DependencyTree, style: str) -> None:
        if style not in ("flat", "xbar", "hybrid"):
            raise ValueError(f"style must be 'flat', 'xbar' or 'hybrid', not {style!r}")
        self.style = style
        n = len(tree)
        self.n = n
        self.words = tree.words
        use_x = tree.xpos is not None and any(x not in ("_", "") for x in tree.xpos)
        self.tags = list(tree.xpos) if use_x else list(tree.upos)
        self.upos = list(tree.upos)
        self.rels = [r.split(":")[0] for r in tree.deprels]
        self.informative = any(r not in _UNINFORMATIVE_RELS for r in self.rels)
        self.heads = projectivize(tree.heads)
        self.children: list[list[int]] = [[] for _ in range(n)]
        for i, h in enumerate(self.heads):
            if h > 0:
                self.children[h - 1].append(i)
        self.punct = [_is_punct(t, u) for t, u in zip(self.tags, self.upos)]
        self.cat: list[str] = [""] * n
        # categories bottom-up need the dependents' categories (verbal dependents)
        order = self._postorder()
        for i in order:
            verbal = self.informative and any(self.rels[d] == "cop" for d in self.children[i])
            has_verbal_dep = any(self.cat[d] in ("VP", "S", "SBAR") for d in self.children[i])
            c = phrase_category(self.tags[i], has_verbal_dep)
            if c == "X" and self.upos[i] != self.tags[i]:
                c = phrase_category(self.upos[i], has_verbal_dep)
            if verbal:
                c = "VP"
            if c == "VP" and self._subject(i) is not None:
                c = "S"
            self.cat[i] = c

    def _postorder(self) -> list[int]:
        out: list[int] = []
        roots = [i for i, h in enumerate(self.heads) if h == 0]
        stack = [(r, False) for r in reversed(roots)]
        while stack:
            i, done = stack.pop()
            if done:
                out.append(i)
                continue
            stack.append((i, True))
            stack.extend((d, False) for d in reversed(self.children[i]))
        return out

    def _subject(self, h: int) -> int | None:
        deps = self.children[h]
        if self.informative:
            for d in deps:
                if self.rels[d] in _SUBJ_RELS:
                    return d
            return None
        left = [d for d in deps if d < h and not self.punct[d]]
        for d in reversed(left):
            if phrase_category(self.tags[d]) == "NP":
                return d
        return None

    def _preterminal(self, i: int) -> Node:
        return Node(self.tags[i], i, i + 1)

    def project(self, i: int, head: int | None) -> Node:
        deps = self.children[i]
        pre = self._preterminal(i)
        cat = self.cat[i]
        if not deps:
            if self.punct[i]:
                return pre
            if head is None:
                return Node("X" if cat == "X" else _base(cat), i, i + 1, [pre])
            hcat = self.cat[head]
            if cat in ("WHNP", "WHADVP", "PRT"):
                return Node(cat, i, i + 1, [pre])
            if _base(cat) in ("NP", "VP", "ADJP", "ADVP") and hcat not in ("NP",):
                return Node(_base(cat), i, i + 1, [pre])
            return pre
        kids = [_Kid(self.project(d, i), d, self.rels[d], self.punct[d]) for d in deps]
        kids.append(_Kid(pre, -1, "", self.punct[i]))
        kids.sort(key=lambda k: k.node.start)
        if self.style == "flat":
            return _span(kids, cat)
        if self.style == "xbar":
            return self._xbar(i, kids, cat)
        return self._hybrid(i, kids, cat)

    def _xbar(self, i: int, kids: list[_Kid], cat: str) -> Node:
        hk = next(k for k, kid in enumerate(kids) if kid.dep == -1)
        subj = self._subject(i)
        base = _base(cat)
        cur = kids[hk].node
        has_subj = False
        for kid in kids[hk + 1:]:
            cur = Node(base, cur.start, kid.node.end, [cur, kid.node])
        for kid in reversed(kids[:hk]):
            has_subj = has_subj or kid.dep == subj
            cur = Node("S" if has_subj and base == "VP" else base, kid.node.start, cur.end, [kid.node, cur])
        return cur

    def _hybrid(self, i: int, kids: list[_Kid], cat: str) -> Node:
        hk = next(k for k, kid in enumerate(kids) if kid.dep == -1)
        if self.tags[i] in _WH and cat == "SBAR":
            # (SBAR (WHNP that) (S ...)): the WH word is its own phrase
            wh = Node(_WH[self.tags[i]], i, i + 1, [kids[hk].node])
            kids = kids[:hk] + [_Kid(wh, -1, "", False)] + kids[hk + 1:]
            return _span(kids, cat)
        base = _base(cat)
        if self.informative:
            if base == "NP":
                c = _last_left(kids, hk, lambda k: k.rel == "case")
                if c is not None and c + 1 <= hk:
                    return _span(kids[:c + 1] + [_Kid(_span(kids[c + 1:], "NP"), -1, "", False)], "PP")
            if base == "VP":
                m = _last_left(kids, hk, lambda k: k.rel == "mark" and not self._is_to(k))
                if m is not None:
                    inner = self._clause(i, kids[m + 1:], cat)
                    return _span(kids[:m + 1] + [_Kid(inner, -1, "", False)], "SBAR")
        if base == "VP":
            return self._clause(i, kids, cat)
        if base == "NP":
            # (NP (NP the board) (PP of directors)): phrasal post-modifiers adjoin to an inner NP
            j = hk
            while j + 1 < len(kids) and kids[j + 1].node.is_preterminal and not kids[j + 1].punct:
                j += 1
            if j + 1 < len(kids) and any(not k.node.is_preterminal for k in kids[j + 1:]):
                inner = _span(kids[:j + 1], "NP")
                return _span([_Kid(inner, -1, "", False)] + kids[j + 1:], "NP")
        return _span(kids, cat)

    def _clause(self, i: int, kids: list[_Kid], cat: str) -> Node:
        """S over [pre-subject material, subject, VP core, trailing punctuation]."""
        if len(kids) == 1:
            return Node("VP", kids[0].node.start, kids[0].node.end, [kids[0].node])
        hk = next(k for k, kid in enumerate(kids) if kid.dep == -1)
        subj = self._subject(i)
        sk = next((k for k, kid in enumerate(kids) if kid.dep == subj), None) if subj is not None else None
        lo = (sk + 1) if sk is not None and sk < hk else 0
        while lo < hk and kids[lo].punct:
            lo += 1
        hi = len(kids) - 1
        while hi > hk and kids[hi].punct:
            hi -= 1
        vp = self._vp(kids[lo:hi + 1])
        if sk is None and self._is_to(kids[lo]):
            # infinitival clause: PTB has (S (NP-SBJ *) (VP to ...)), i.e. S over VP once traces go
            return _span(kids[:lo] + [_Kid(vp, -1, "", False)] + kids[hi + 1:], "S")
        if lo == 0 and hi == len(kids) - 1:
            return vp
        # with a subject, or (no subject) edge punctuation outside the core: S, as in the PTB
        return _span(kids[:lo] + [_Kid(vp, -1, "", False)] + kids[hi + 1:], "S")

    def _is_to(self, kid: _Kid) -> bool:
        """Infinitival 'to' (PTB TO, or UD PART 'to' as mark/aux) as a bare dependent."""
        if kid.dep < 0 or not kid.node.is_preterminal:
            return False
        return self.tags[kid.dep] == "TO" or (self.upos[kid.dep] == "PART"
                                               and self.words[kid.dep].lower() == "to")

    def _vp(self, kids: list[_Kid]) -> Node:
        """VP over ``kids``; leading UD auxiliaries each open a nested VP."""
        if self.informative:
            for a, kid in enumerate(kids):
                if kid.dep == -1:
                    break
                is_aux = self._is_to(kid) or (kid.rel == "aux" if self.informative else (
                    kid.node.is_preterminal and self.tags[kid.dep] == "MD"))
                if is_aux and a + 1 < len(kids):
                    inner = self._vp(kids[a + 1:])
                    return _span(kids[:a + 1] + [_Kid(inner, -1, "", False)], "VP")
        return _span(kids, "VP")

    def convert(self) -> ConstituencyTree:
        roots = [i for i, h in enumerate(self.heads) if h == 0]
        projs = [self.project(r, None) for r in roots]
        if len(projs) == 1:
            root = projs[0]
            if root.is_preterminal:
                root = Node("X", root.start, root.end, [root])
        else:
            projs.sort(key=lambda nd: nd.start)
            root = Node("FRAG", 0, self.n, projs)
        return ConstituencyTree(words=list(self.words), root=root)


def _base(cat: str) -> str:
    return "VP" if cat == "S" else cat


def _last_left(kids: list[_Kid], hk: int, pred) -> int | None:
    found = None
    for k in range(hk):
        if pred(kids[k]):
            found = k
    return found


def dependency_to_constituency(tree: DependencyTree, style: str = "hybrid") -> ConstituencyTree:
    """Constituency tree of ``tree`` by head projection (see the module docstring)."""
    if len(tree) == 0:
        raise ValueError("dependency_to_constituency: empty tree")
    return _Converter(tree, style).convert()
