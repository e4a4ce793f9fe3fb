"""Synthetic syntactic-transduction corpus: the embedded default dataset of structnmt.

The corpus is generated deterministically from a seed (no download).  Every example has a
source sentence in a small English-like language, its gold constituency tree, its gold
dependency tree, a target sentence in an invented verb-final language, and a list of
long-distance agreement probes.

Source grammar
--------------
::

    S      -> NP VP | S CC S                     (clause coordination, top level only)
    VP     -> V_tr NP | V_intr PP? | VP CC VP    (VP coordination, top level only, same tense)
    NP     -> DT JJ{0,2} N                       (core NP)
            | NP PP PP?                          (PP attachment to the noun, nestable)
            | NP SBAR                            (relative clause; an NP has PPs *or* a relative)
            | NP CC NP                           (NP coordination of two core NPs)
    PP     -> IN NP
    SBAR   -> WHNP S                             (WHNP -> WDT "that")
              subject gap:  that  VP             ("that sees the bird")
              object gap:   that  NP V_tr        ("that the bird sees")

Nesting of PPs and relative clauses is limited by ``SynthConfig.max_depth``; coordinated NPs
are made of core NPs only, PP objects are never coordinated, and only intransitive verbs take
PP adjuncts.  These restrictions keep every source string unambiguous given the rules.
Present-tense verbs agree in English (VBZ with singular subjects, VBP with plural and
coordinated subjects); past-tense verbs are VBD.  The vocabulary has 140 nouns (singular +
plural), 66 verbs (42 transitive, 24 intransitive; 3sg, plural-present and past forms),
51 adjectives, 15 prepositions, 8 determiner forms, "and", "that" (554 word forms).

Trees: constituency trees are PTB brackets with labels S, NP, VP, PP, SBAR, WHNP and
preterminals DT JJ NN NNS VBZ VBP VBD IN CC WDT.  Dependencies are UD-like: det, amod,
nsubj, obj, obl (PP on a verb), nmod (PP on a noun), case, acl:relcl (relative verb -> noun),
nsubj/obj for the relative pronoun "that", cc, conj (attached to the first conjunct), root.

Target language (deterministic function of the source tree)
-----------------------------------------------------------
* clauses are verb-final (SOV): ``subject [PP-adjuncts | object] verb``; coordination keeps
  the conjunct order and translates "and";
* PPs become postpositional phrases: ``NP' postposition``; several PPs on one head appear in
  mirror order;
* an NP is ``[relative-clause'] [PP'...] det noun adj'...``: relative clauses and PP modifiers
  precede the noun, adjectives follow it in reversed order;
* relative clauses precede their noun and end in a marker that encodes the gap:
  subject gap ``[obj' | PP'] verb REL_S``, object gap ``subj' verb REL_O``;
* each source lemma maps to an invented target stem drawn from the seed (CV syllables);
  plural nouns are ``stem + "ri"``; verbs are one fused token
  ``stem + tense ("ta" present / "mu" past) + agreement ("ko" singular / "ni" plural)``;
* the agreement suffix agrees in number with the verb's subject: the head noun of the
  subject NP (plural for a coordinated subject; for a subject-gap relative clause the noun
  the clause modifies), regardless of intervening PPs, relative clauses or nouns of the other
  number.  Tense is carried over (past verbs agree too, unlike English).

Agreement probes
----------------
For every finite verb whose subject head noun is separated from it by at least one source
word, ``SynthExample.agreement`` holds ``{"tgt_index", "lemma_tgt", "expected", "wrong",
"distance", "number", "attractors", "kind"}``: the index of the verb in ``tgt``, its target
stem, the correct token, the same verb with the other agreement suffix, the number of source
words strictly between the subject head and the verb, the subject number ("sg"/"pl"), how
many nouns of the other number lie between them, and "main" / "relcl" / "conj".

Worked example (seed 1)::

    src : the dog near the cats that chase a bird sleeps
    tree: (S (NP (NP (DT the) (NN dog)) (PP (IN near) (NP (NP (DT the) (NNS cats))
          (SBAR (WHNP (WDT that)) (S (VP (VBP chase) (NP (DT a) (NN bird)))))))) (VP (VBZ sleeps)))
    tgt : zo turabe zasilentani no zu sudevori vo zu zebo nogirtako
          (a  bird   chase+PRES+PL REL_S the cat+PL near the dog sleep+PRES+SG)

"sleeps" -> "nogirtako" agrees with the singular head "dog" although the plural "cats"
intervenes: agreement item ``{"tgt_index": 9, "lemma_tgt": "nogir", "expected": "nogirtako",
"wrong": "nogirtani", "distance": 7, "number": "sg", "attractors": 1, "kind": "main"}``;
"chase" -> "zasilentani" agrees with "cats" (distance 1, kind "relcl").  :func:`realize`
translates any tree of this grammar; :func:`target_lexicon` gives the stems.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = [
    "SynthConfig",
    "SynthExample",
    "generate",
    "write_corpus",
    "write_examples",
    "agreement_accuracy",
    "agreement_outcomes",
    "realize",
    "target_lexicon",
    "source_vocabulary",
    "target_verb",
    "PLURAL_SUFFIX",
    "TENSE_SUFFIX",
    "AGREEMENT_SUFFIX",
]

# --------------------------------------------------------------------------- configuration


@dataclass
class SynthConfig:
    """Configuration of the synthetic corpus (everything is a deterministic function of it)."""

    seed: int = 1
    n_train: int = 20000
    n_valid: int = 500
    n_test: int = 500
    max_depth: int = 3  # nesting limit for relative clauses / PPs
    max_len: int = 40  # source words; longer samples are re-drawn (deterministically)


@dataclass
class SynthExample:
    """One parallel sentence pair with gold syntax for the source side."""

    src: list[str]
    tgt: list[str]
    tree: str
    heads: list[int]
    deprels: list[str]
    upos: list[str]
    xpos: list[str]
    agreement: list[dict] = field(default_factory=list)
    lemmas: list[str] = field(default_factory=list)
    feats: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- source lexicon

_NOUNS = """
dog cat bird horse mouse fox rabbit wolf bear lion tiger monkey donkey goat cow pig duck
goose frog snake owl eagle parrot turtle whale shark spider bee ant beetle butterfly farmer
teacher doctor child woman boy girl king queen baker painter sailor soldier student pilot
singer dancer writer hunter thief knight wizard witch giant dragon robot clown guard nurse
judge lawyer monk artist poet merchant tailor miner captain friend neighbor stranger visitor
prince princess uncle aunt sister brother cousin house garden forest river mountain lake
village city tower castle bridge road tree flower stone table chair box basket bottle
window door wall roof boat ship wagon bell lamp candle mirror key book letter map coin ring
hat coat shoe cup plate knife bench fence barn field hill island cave valley meadow harbor
market school kitchen cottage palace statue fountain
""".split()

_IRREGULAR_PLURALS = {
    "mouse": "mice",
    "goose": "geese",
    "wolf": "wolves",
    "child": "children",
    "woman": "women",
    "thief": "thieves",
    "knife": "knives",
}

_TRANSITIVE = """
see:sees:saw chase:chases:chased follow:follows:followed help:helps:helped
watch:watches:watched like:likes:liked know:knows:knew find:finds:found
visit:visits:visited call:calls:called push:pushes:pushed pull:pulls:pulled
carry:carries:carried greet:greets:greeted admire:admires:admired fear:fears:feared
hear:hears:heard meet:meets:met love:loves:loved hate:hates:hated bite:bites:bit
kick:kicks:kicked catch:catches:caught teach:teaches:taught paint:paints:painted
build:builds:built trust:trusts:trusted remember:remembers:remembered
protect:protects:protected feed:feeds:fed wash:washes:washed praise:praises:praised
guide:guides:guided attack:attacks:attacked ignore:ignores:ignored notice:notices:noticed
touch:touches:touched hold:holds:held draw:draws:drew seek:seeks:sought
blame:blames:blamed tickle:tickles:tickled
""".split()

_INTRANSITIVE = """
sleep:sleeps:slept run:runs:ran sing:sings:sang dance:dances:danced laugh:laughs:laughed
cry:cries:cried smile:smiles:smiled swim:swims:swam jump:jumps:jumped wait:waits:waited
walk:walks:walked arrive:arrives:arrived fall:falls:fell rest:rests:rested
shout:shouts:shouted sit:sits:sat stand:stands:stood play:plays:played
wander:wanders:wandered fly:flies:flew vanish:vanishes:vanished sneeze:sneezes:sneezed
yawn:yawns:yawned glow:glows:glowed
""".split()

_ADJECTIVES = """
big small old young red blue green happy sad angry tall short brave quiet loud clever lazy
busy hungry sleepy tiny huge strange famous gentle proud shy wild kind rich poor dark bright
cold warm wet dry heavy soft hard fast slow noisy calm curious silly ancient golden wooden
friendly nervous
""".split()

_PREPOSITIONS = """
near behind with under above beside without inside beyond across around below among toward
beneath
""".split()

# determiner lemmas by number; "a" surfaces as "an" before a vowel
_DET_SG = ("the", "a", "this", "every")
_DET_SG_W = (0.5, 0.3, 0.12, 0.08)
_DET_PL = ("the", "some", "these", "those")
_DET_PL_W = (0.55, 0.2, 0.13, 0.12)
_DET_LEMMA = {"the": "the", "a": "a", "an": "a", "this": "this", "every": "every",
              "some": "some", "these": "this", "those": "that"}


def _plural(noun: str) -> str:
    if noun in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


_NOUN_PL = {n: _plural(n) for n in _NOUNS}
_VERB_FORMS: dict[str, tuple[str, str, str]] = {}  # lemma -> (plural/base, 3sg, past)
for _entry in _TRANSITIVE + _INTRANSITIVE:
    _b, _s, _p = _entry.split(":")
    _VERB_FORMS[_b] = (_b, _s, _p)
_TRANS_LEMMAS = tuple(e.split(":")[0] for e in _TRANSITIVE)
_INTRANS_LEMMAS = tuple(e.split(":")[0] for e in _INTRANSITIVE)

# reverse lookups (used by :func:`realize`)
_NOUN_OF_FORM: dict[str, tuple[str, bool]] = {}
for _n in _NOUNS:
    _NOUN_OF_FORM[_n] = (_n, False)
    _NOUN_OF_FORM[_NOUN_PL[_n]] = (_n, True)
_VERB_OF_FORM: dict[tuple[str, str], str] = {}
for _b, (_base, _sg, _past) in _VERB_FORMS.items():
    _VERB_OF_FORM[("VBP", _base)] = _b
    _VERB_OF_FORM[("VBZ", _sg)] = _b
    _VERB_OF_FORM[("VBD", _past)] = _b


def source_vocabulary() -> set[str]:
    """Return every word form the source grammar can produce."""
    vocab: set[str] = set(_NOUNS) | set(_NOUN_PL.values()) | set(_ADJECTIVES)
    vocab |= set(_PREPOSITIONS) | set(_DET_LEMMA) | {"and", "that"}
    for forms in _VERB_FORMS.values():
        vocab |= set(forms)
    return vocab


# --------------------------------------------------------------------------- target lexicon

PLURAL_SUFFIX = "ri"
TENSE_SUFFIX = {"pres": "ta", "past": "mu"}
AGREEMENT_SUFFIX = {"sg": "ko", "pl": "ni"}
_RESERVED = {PLURAL_SUFFIX, *TENSE_SUFFIX.values(), *AGREEMENT_SUFFIX.values()}
_CONSONANTS = "bdgklmnprstvz"
_VOWELS = "aeiou"


def target_verb(stem: str, tense: str, plural: bool) -> str:
    """Fused target verb token: stem + tense marker + agreement suffix."""
    return stem + TENSE_SUFFIX[tense] + AGREEMENT_SUFFIX["pl" if plural else "sg"]


def _target_forms(cat: str, stem: str) -> list[str]:
    if cat == "N":
        return [stem, stem + PLURAL_SUFFIX]
    if cat == "V":
        return [target_verb(stem, t, p) for t in TENSE_SUFFIX for p in (False, True)]
    return [stem]


@lru_cache(maxsize=16)
def _lexicon(seed: int) -> dict[tuple[str, str], str]:
    rng = random.Random(seed * 7919 + 104729)
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS if c + v not in _RESERVED]
    entries: list[tuple[str, str, tuple[int, ...]]] = []
    entries += [("C", "and", (1,)), ("R", "subj", (1,)), ("R", "obj", (1,))]
    entries += [("D", d, (1,)) for d in sorted(set(_DET_SG) | set(_DET_PL))]
    entries += [("P", p, (1, 2)) for p in _PREPOSITIONS]
    entries += [("N", n, (2, 3)) for n in _NOUNS]
    entries += [("V", v, (2, 3)) for v in _VERB_FORMS]
    entries += [("A", a, (2, 3)) for a in _ADJECTIVES]
    used: set[str] = set()
    lex: dict[tuple[str, str], str] = {}
    for cat, lemma, lengths in entries:
        while True:
            stem = "".join(rng.choice(syllables) for _ in range(rng.choice(lengths)))
            if rng.random() < 0.25 and cat in "NAV":
                stem += rng.choice("nlr")
            forms = _target_forms(cat, stem)
            if not any(f in used for f in forms):
                used.update(forms)
                lex[(cat, lemma)] = stem
                break
    return lex


def target_lexicon(seed: int = 1) -> dict[tuple[str, str], str]:
    """Target stems keyed by (category, source lemma).

    Categories: "N" noun, "V" verb, "A" adjective, "P" postposition (from the preposition),
    "D" determiner (keyed by the lemma: a, the, this, every, some, these, those),
    "C" ("and"), "R" relative markers ("subj" / "obj" gap).
    """
    return dict(_lexicon(seed))


# --------------------------------------------------------------------------- syntax objects


@dataclass
class _NP:
    det: str
    adjs: list[str]
    noun: str
    plural: bool
    pps: list[_PP] = field(default_factory=list)
    rel: _RC | None = None


@dataclass
class _NPCoord:
    left: _NP
    right: _NP
    plural: bool = True


@dataclass
class _PP:
    prep: str
    np: _NP


@dataclass
class _VP:
    verb: str
    tense: str
    plural: bool  # agreement number (= subject number)
    obj: _NP | _NPCoord | None = None
    pps: list[_PP] = field(default_factory=list)


@dataclass
class _VPCoord:
    left: _VP
    right: _VP


@dataclass
class _RC:
    gap: str  # "subj" | "obj"
    vp: _VP
    subj: _NP | None = None


@dataclass
class _Clause:
    subj: _NP | _NPCoord
    vp: _VP | _VPCoord


@dataclass
class _ClauseCoord:
    left: _Clause
    right: _Clause


# --------------------------------------------------------------------------- sampling

_P_ADJ = (0.5, 0.33, 0.17)
_P_PLURAL = 0.45
_P_NP_PP = (0.3, 0.18, 0.1)
_P_NP_PP2 = 0.15
_P_NP_RC = (0.26, 0.15, 0.08)
_P_RC_SUBJ_GAP = 0.6
_P_NP_COORD = 0.1
_P_TRANSITIVE = 0.65
_P_VP_PP = 0.55
_P_VP_COORD = 0.12
_P_S_COORD = 0.15
_P_PAST = 0.4


def _at(probs: tuple[float, ...], depth: int) -> float:
    return probs[min(depth, len(probs) - 1)]


class _Sampler:
    """Draws clause structures. ``np_pp`` / ``np_rc`` (probabilities of a PP / relative
    clause on an NP, by nesting depth) default to the corpus's; the generalization test
    splits draw with more nesting (:mod:`structnmt.data.generalization`)."""

    def __init__(self, rng: random.Random, max_depth: int, *, np_pp: tuple[float, ...] = _P_NP_PP,
                 np_rc: tuple[float, ...] = _P_NP_RC) -> None:
        self.rng = rng
        self.max_depth = max_depth
        self.np_pp = np_pp
        self.np_rc = np_rc

    def core_np(self) -> _NP:
        r = self.rng
        plural = r.random() < _P_PLURAL
        det = r.choices(_DET_PL, _DET_PL_W)[0] if plural else r.choices(_DET_SG, _DET_SG_W)[0]
        n_adj = r.choices((0, 1, 2), _P_ADJ)[0]
        adjs = r.sample(_ADJECTIVES, n_adj)
        return _NP(det, adjs, r.choice(_NOUNS), plural)

    def np(self, depth: int, coord_ok: bool) -> _NP | _NPCoord:
        r = self.rng
        if coord_ok and r.random() < _P_NP_COORD:
            return _NPCoord(self.core_np(), self.core_np())
        np = self.core_np()
        if depth < self.max_depth:
            if r.random() < _at(self.np_pp, depth):
                n_pp = 2 if r.random() < _P_NP_PP2 else 1
                for _ in range(n_pp):
                    np.pps.append(_PP(r.choice(_PREPOSITIONS), self.np(depth + 1, False)))
            elif r.random() < _at(self.np_rc, depth):
                np.rel = self.rc(depth + 1, np.plural)
        return np

    def rc(self, depth: int, ante_plural: bool) -> _RC:
        r = self.rng
        if r.random() < _P_RC_SUBJ_GAP:
            return _RC("subj", self.vp(depth, ante_plural, False))
        subj = self.np(depth, False)
        tense = "past" if r.random() < _P_PAST else "pres"
        return _RC("obj", _VP(r.choice(_TRANS_LEMMAS), tense, subj.plural), subj)

    def vp(self, depth: int, plural: bool, coord_ok: bool, tense: str | None = None):
        r = self.rng
        if tense is None:
            tense = "past" if r.random() < _P_PAST else "pres"
        if coord_ok and r.random() < _P_VP_COORD:
            return _VPCoord(self.vp(depth, plural, False, tense), self.vp(depth, plural, False, tense))
        if r.random() < _P_TRANSITIVE:
            return _VP(r.choice(_TRANS_LEMMAS), tense, plural, obj=self.np(depth, True))
        vp = _VP(r.choice(_INTRANS_LEMMAS), tense, plural)
        if depth < self.max_depth and r.random() < _P_VP_PP:
            vp.pps.append(_PP(r.choice(_PREPOSITIONS), self.np(depth + 1, False)))
        return vp

    def clause(self, coord_ok: bool) -> _Clause | _ClauseCoord:
        if coord_ok and self.rng.random() < _P_S_COORD:
            return _ClauseCoord(self.clause(False), self.clause(False))
        subj = self.np(0, True)
        return _Clause(subj, self.vp(0, subj.plural, coord_ok))


# --------------------------------------------------------------------------- source rendering

_VERB_TAG = {("pres", False): "VBZ", ("pres", True): "VBP", ("past", False): "VBD",
             ("past", True): "VBD"}


class _SourceRenderer:
    """Linearises a syntax object into tokens, a PTB tree and UD-like dependencies."""

    def __init__(self) -> None:
        self.forms: list[str] = []
        self.lemmas: list[str] = []
        self.upos: list[str] = []
        self.xpos: list[str] = []
        self.feats: list[str] = []
        self.heads: list[int] = []
        self.rels: list[str] = []
        self.is_noun: list[bool] = []
        self.noun_plural: list[bool] = []
        # (id(vp), verb index, subject head index, plural, kind)
        self.verbs: list[tuple[int, int, int, bool, str]] = []

    def add(self, form: str, lemma: str, upos: str, xpos: str, feats: str = "_") -> int:
        self.forms.append(form)
        self.lemmas.append(lemma)
        self.upos.append(upos)
        self.xpos.append(xpos)
        self.feats.append(feats)
        self.heads.append(0)
        self.rels.append("root")
        self.is_noun.append(upos == "NOUN")
        self.noun_plural.append(xpos == "NNS")
        return len(self.forms) - 1

    def attach(self, child: int, head: int, rel: str) -> None:
        self.heads[child] = head + 1
        self.rels[child] = rel

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
        self.verbs.append((id(vp), v, subj, vp.plural, kind))
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
    """Applies the transduction rules (SOV, postpositions, N-Adj, prenominal relatives)."""

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


def _find_vp(c, key: int) -> _VP:
    """Locate a _VP object by id inside a syntax object (for agreement item construction)."""
    stack = [c]
    while stack:
        x = stack.pop()
        if isinstance(x, _VP) and id(x) == key:
            return x
        if isinstance(x, (_Clause,)):
            stack += [x.subj, x.vp]
        elif isinstance(x, (_ClauseCoord, _VPCoord, _NPCoord)):
            stack += [x.left, x.right]
        elif isinstance(x, _VP):
            stack += ([x.obj] if x.obj is not None else []) + list(x.pps)
        elif isinstance(x, _NP):
            stack += list(x.pps) + ([x.rel] if x.rel is not None else [])
        elif isinstance(x, _PP):
            stack.append(x.np)
        elif isinstance(x, _RC):
            stack += [x.vp] + ([x.subj] if x.subj is not None else [])
    raise KeyError(key)


def _build_example(c: _Clause | _ClauseCoord, lex: dict[tuple[str, str], str]) -> SynthExample:
    src = _SourceRenderer()
    tree, root = src.clause(c)
    src.heads[root] = 0
    src.rels[root] = "root"
    tgt = _TargetRenderer(lex)
    tgt.clause(c)
    items: list[dict] = []
    for key, v, s, plural, kind in src.verbs:
        distance = v - s - 1
        if distance < 1:
            continue
        vp = _find_vp(c, key)
        stem = lex[("V", vp.verb)]
        attractors = sum(
            1 for i in range(s + 1, v) if src.is_noun[i] and src.noun_plural[i] != plural
        )
        items.append({
            "tgt_index": tgt.verb_index[key],
            "lemma_tgt": stem,
            "expected": target_verb(stem, vp.tense, plural),
            "wrong": target_verb(stem, vp.tense, not plural),
            "distance": distance,
            "number": "pl" if plural else "sg",
            "attractors": attractors,
            "kind": kind,
        })
    items.sort(key=lambda d: d["tgt_index"])
    return SynthExample(
        src=src.forms, tgt=tgt.toks, tree=tree, heads=src.heads, deprels=src.rels,
        upos=src.upos, xpos=src.xpos, agreement=items, lemmas=src.lemmas, feats=src.feats,
    )


# --------------------------------------------------------------------------- generation

_SPLIT_SALT = {"test": 101, "valid": 202, "train": 303}


def _split_rng(seed: int, split: str) -> random.Random:
    return random.Random(seed * 1_000_003 + _SPLIT_SALT[split])


def generate(cfg: SynthConfig) -> dict[str, list[SynthExample]]:
    """Generate the train/valid/test splits deterministically from ``cfg``.

    Each split has its own random stream (test first, then valid, then train), so the test
    set does not change when ``n_train`` changes.  Source sentences are unique across and
    within splits; samples longer than ``cfg.max_len`` words are re-drawn.
    """
    if cfg.max_depth < 0 or cfg.max_len < 3:
        raise ValueError(f"invalid config: max_depth={cfg.max_depth}, max_len={cfg.max_len}")
    lex = _lexicon(cfg.seed)
    seen: set[str] = set()
    out: dict[str, list[SynthExample]] = {}
    for split, n in (("test", cfg.n_test), ("valid", cfg.n_valid), ("train", cfg.n_train)):
        rng = _split_rng(cfg.seed, split)
        sampler = _Sampler(rng, cfg.max_depth)
        examples: list[SynthExample] = []
        misses = 0
        while len(examples) < n:
            ex = _build_example(sampler.clause(True), lex)
            key = " ".join(ex.src)
            if len(ex.src) > cfg.max_len or key in seen:
                misses += 1
                if misses > 50 * max(n, 100):
                    raise RuntimeError(f"could not draw {n} unique {split} sentences")
                continue
            seen.add(key)
            examples.append(ex)
        out[split] = examples
    return {"train": out["train"], "valid": out["valid"], "test": out["test"]}


# --------------------------------------------------------------------------- tree reading


def _parse_brackets(tree: str):
    """Parse a PTB bracket string into nested (label, children) tuples; leaves are strings."""
    toks = tree.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def node():
        nonlocal pos
        if toks[pos] != "(":
            raise ValueError(f"expected '(' at token {pos} in {tree!r}")
        label = toks[pos + 1]
        pos += 2
        kids = []
        while toks[pos] != ")":
            if toks[pos] == "(":
                kids.append(node())
            else:
                kids.append(toks[pos])
                pos += 1
        pos += 1
        return (label, kids)

    root = node()
    if pos != len(toks):
        raise ValueError(f"trailing material in tree {tree!r}")
    return root


def _labels(kids) -> list[str]:
    return [k[0] if isinstance(k, tuple) else "<w>" for k in kids]


def _word(node, *tags: str) -> str:
    label, kids = node
    if label not in tags or len(kids) != 1 or not isinstance(kids[0], str):
        raise ValueError(f"expected a {'/'.join(tags)} preterminal, got {node!r}")
    return kids[0]


def _read_np(node) -> _NP | _NPCoord:
    label, kids = node
    if label != "NP":
        raise ValueError(f"expected NP, got {label}")
    labs = _labels(kids)
    if labs == ["NP", "CC", "NP"]:
        left, right = _read_np(kids[0]), _read_np(kids[2])
        if not (isinstance(left, _NP) and isinstance(right, _NP)):
            raise ValueError("nested NP coordination is outside the grammar")
        return _NPCoord(left, right)
    if labs and labs[0] == "NP":
        core = _read_np(kids[0])
        if not isinstance(core, _NP) or core.pps or core.rel is not None:
            raise ValueError("NP modifiers must attach to a core NP")
        if labs[1:] == ["SBAR"]:
            core.rel = _read_rc(kids[1], core.plural)
        elif labs[1:] and all(lab == "PP" for lab in labs[1:]):
            core.pps = [_read_pp(k) for k in kids[1:]]
        else:
            raise ValueError(f"unexpected NP expansion {labs}")
        return core
    if len(kids) < 2 or labs[0] != "DT" or labs[-1] not in ("NN", "NNS"):
        raise ValueError(f"unexpected core NP {labs}")
    det_form = _word(kids[0], "DT")
    adjs = [_word(k, "JJ") for k in kids[1:-1]]
    noun_form = _word(kids[-1], "NN", "NNS")
    if noun_form not in _NOUN_OF_FORM or det_form not in _DET_LEMMA:
        raise ValueError(f"unknown word in {node!r}")
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


def _read_pp(node) -> _PP:
    label, kids = node
    if label != "PP" or _labels(kids) != ["IN", "NP"]:
        raise ValueError(f"unexpected PP {node!r}")
    prep = _word(kids[0], "IN")
    if prep not in _PREPOSITIONS:
        raise ValueError(f"unknown preposition {prep!r}")
    np = _read_np(kids[1])
    if not isinstance(np, _NP):
        raise ValueError("coordinated PP objects are outside the grammar")
    return _PP(prep, np)


def _read_rc(node, ante_plural: bool) -> _RC:
    label, kids = node
    if label != "SBAR" or _labels(kids) != ["WHNP", "S"]:
        raise ValueError(f"unexpected SBAR {node!r}")
    if _word(kids[0][1][0], "WDT") != "that":
        raise ValueError("relative pronoun must be 'that'")
    s_kids = kids[1][1]
    labs = _labels(s_kids)
    if labs == ["VP"]:
        return _RC("subj", _read_vp(s_kids[0], ante_plural))
    if labs == ["NP", "VP"]:
        subj = _read_np(s_kids[0])
        vp = _read_vp(s_kids[1], subj.plural)
        if not isinstance(vp, _VP) or vp.obj is not None or vp.pps:
            raise ValueError("object-gap relative clause needs a bare transitive verb")
        if not isinstance(subj, _NP):
            raise ValueError("coordinated relative-clause subjects are outside the grammar")
        return _RC("obj", vp, subj)
    raise ValueError(f"unexpected relative clause {labs}")


def _read_vp(node, plural: bool) -> _VP | _VPCoord:
    label, kids = node
    if label != "VP":
        raise ValueError(f"expected VP, got {label}")
    labs = _labels(kids)
    if labs == ["VP", "CC", "VP"]:
        return _VPCoord(_read_vp(kids[0], plural), _read_vp(kids[2], plural))
    tag = labs[0]
    form = _word(kids[0], "VBZ", "VBP", "VBD")
    if (tag, form) not in _VERB_OF_FORM:
        raise ValueError(f"unknown verb form {form!r}/{tag}")
    if tag != "VBD" and (tag == "VBP") != plural:
        raise ValueError(f"verb {form!r} does not agree with its subject")
    vp = _VP(_VERB_OF_FORM[(tag, form)], "past" if tag == "VBD" else "pres", plural)
    rest = kids[1:]
    if _labels(rest) == ["NP"]:
        vp.obj = _read_np(rest[0])
    else:
        vp.pps = [_read_pp(k) for k in rest]
    return vp


def _read_clause(node) -> _Clause | _ClauseCoord:
    label, kids = node
    if label != "S":
        raise ValueError(f"expected S, got {label}")
    labs = _labels(kids)
    if labs == ["S", "CC", "S"]:
        return _ClauseCoord(_read_clause(kids[0]), _read_clause(kids[2]))
    if labs != ["NP", "VP"]:
        raise ValueError(f"unexpected clause {labs}")
    subj = _read_np(kids[0])
    return _Clause(subj, _read_vp(kids[1], subj.plural))


def realize(tree: str, seed: int = 1) -> SynthExample:
    """Build the full example (target, dependencies, agreement probes) for a gold PTB tree.

    ``tree`` must be a tree of the source grammar (as in ``SynthExample.tree``); the target
    uses the lexicon of ``seed``.  Raises ValueError for trees outside the grammar or with
    source agreement errors.  ``realize(ex.tree, cfg.seed)`` reproduces a generated example.
    """
    return _build_example(_read_clause(_parse_brackets(tree)), _lexicon(seed))


# --------------------------------------------------------------------------- output


def _conllu(ex: SynthExample) -> str:
    lines = [f"# text = {' '.join(ex.src)}"]
    for i, form in enumerate(ex.src):
        lemma = ex.lemmas[i] if ex.lemmas else form
        feats = ex.feats[i] if ex.feats else "_"
        lines.append("\t".join([
            str(i + 1), form, lemma, ex.upos[i], ex.xpos[i], feats,
            str(ex.heads[i]), ex.deprels[i], "_", "_",
        ]))
    return "\n".join(lines) + "\n\n"


def split_files(split: str) -> tuple[str, ...]:
    """The files :func:`write_examples` writes for ``split``."""
    return (f"{split}.src", f"{split}.tgt", f"{split}.src.tree", f"{split}.src.conllu", f"{split}.agreement.jsonl")


def corpus_dir(out, names: tuple[str, ...] = ()):
    """``out`` as the :class:`structnmt.files.OutputDir` of a synthetic corpus: a file of the user's under one
    of ``names`` is refused before anything is written; a corpus directory from before manifests (it holds
    ``synth.json`` or ``benchmark.json``) is the generator's own."""
    from ..files import OutputDir

    if isinstance(out, OutputDir):
        for name in names:
            out.claim(name)
        return out
    return OutputDir(out, "synth", expect=names, marker=(("synth.json", r'\{\s*"config": \{\s*"seed"'),
                                                         ("benchmark.json", r'\{\s*"config": \{\s*"seed"')))


def write_examples(examples: list[SynthExample], out, split: str) -> None:
    """Write one split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` and ``{split}.agreement.jsonl``, each atomically.
    ``out``: a directory or a :func:`corpus_dir`."""
    out = corpus_dir(out, split_files(split))
    texts = ("".join(" ".join(ex.src) + "\n" for ex in examples), "".join(" ".join(ex.tgt) + "\n" for ex in examples),
             "".join(ex.tree + "\n" for ex in examples), "".join(_conllu(ex) for ex in examples),
             "".join(json.dumps(ex.agreement) + "\n" for ex in examples))
    for name, text in zip(split_files(split), texts):
        out.write_text(name, text)


def write_corpus(cfg: SynthConfig, out_dir: str | Path) -> dict[str, int]:
    """Generate the corpus and write it to ``out_dir``; return the number of sentences per split.

    Files per split: ``{split}.src``, ``{split}.tgt`` (space-joined tokens),
    ``{split}.src.tree`` (PTB), ``{split}.src.conllu`` (CoNLL-U) and
    ``{split}.agreement.jsonl`` (one JSON list per line); plus ``synth.json``. A file of the user's
    under one of these names is refused before anything is written (:func:`corpus_dir`).
    """
    out = corpus_dir(out_dir, tuple(n for split in ("train", "valid", "test") for n in split_files(split))
                     + ("synth.json",))
    data = generate(cfg)
    counts: dict[str, int] = {}
    for split, examples in data.items():
        counts[split] = len(examples)
        write_examples(examples, out, split)
    meta = {
        "config": asdict(cfg),
        "counts": counts,
        "target_suffixes": {"plural": PLURAL_SUFFIX, "tense": TENSE_SUFFIX,
                            "agreement": AGREEMENT_SUFFIX},
    }
    out.write_text("synth.json", json.dumps(meta, indent=2) + "\n")
    return counts


# --------------------------------------------------------------------------- evaluation


def agreement_outcomes(hypotheses: list[str], examples: list[SynthExample]) -> list[tuple[dict, bool]]:
    """(agreement item, correct?) for every agreement item of ``examples``, in order.

    For each item, the hypothesis occurrences of the verb (tokens equal to ``expected`` or
    ``wrong``) are listed; the item is matched to the k-th occurrence, where k is the
    number of such tokens before it in the reference target (or to the last one if the
    hypothesis has fewer). It is correct when that token is ``expected``; an absent verb
    counts as wrong.
    """
    if len(hypotheses) != len(examples):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses for {len(examples)} examples"
        )
    out = []
    for hyp, ex in zip(hypotheses, examples):
        toks = hyp.split()
        for item in ex.agreement:
            forms = {item["expected"], item["wrong"]}
            rank = sum(1 for t in ex.tgt[: item["tgt_index"]] if t in forms)
            occ = [t for t in toks if t in forms]
            chosen = (occ[rank] if rank < len(occ) else occ[-1]) if occ else None
            out.append((item, chosen == item["expected"]))
    return out


def agreement_accuracy(hypotheses: list[str], examples: list[SynthExample]) -> tuple[float, int]:
    """Accuracy of target verb agreement in ``hypotheses`` (detokenised strings), matched
    as in :func:`agreement_outcomes`. Returns ``(accuracy, number_of_items)``; accuracy is
    0.0 without items.
    """
    outcomes = agreement_outcomes(hypotheses, examples)
    return (sum(ok for _, ok in outcomes) / len(outcomes) if outcomes else 0.0), len(outcomes)
