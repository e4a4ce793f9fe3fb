"""The source grammar of the synthetic corpus: its syntax objects and the sampler that draws them.

A sentence is a :class:`_Clause` or a :class:`_ClauseCoord` of two clauses; the objects
mirror the rules of the package docstring (:mod:`structnmt.data.synthetic`, "Source
grammar"): :class:`_NP` (a core NP with its PPs *or* relative clause), :class:`_NPCoord`,
:class:`_PP`, :class:`_VP`, :class:`_VPCoord`, :class:`_RC`. They hold lemmas and numbers,
not word forms: :mod:`.render` linearises them, :mod:`.reading` builds them from a tree.
:class:`_Sampler` draws them from a ``random.Random`` with the corpus's probabilities.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .lexicon import (
    _ADJECTIVES,
    _DET_PL,
    _DET_PL_W,
    _DET_SG,
    _DET_SG_W,
    _INTRANS_LEMMAS,
    _NOUNS,
    _PREPOSITIONS,
    _TRANS_LEMMAS,
)

# --------------------------------------------------------------------------- syntax objects


@dataclass
class _NP:
    """A core NP ``det adj* noun`` (lemmas; ``det`` is "a", never "an") with either PP
    modifiers (``pps``; the sampler draws one or two) or a relative clause (``rel``); ``plural``: the noun's number."""

    det: str
    adjs: list[str]
    noun: str
    plural: bool
    pps: list[_PP] = field(default_factory=list)
    rel: _RC | None = None


@dataclass
class _NPCoord:
    """``left and right``, two core NPs; plural for agreement."""

    left: _NP
    right: _NP
    plural: bool = True


@dataclass
class _PP:
    """``prep np``; the object is never coordinated."""

    prep: str
    np: _NP


@dataclass
class _VP:
    """A verb (lemma) with its object *or* PP adjuncts (the sampler gives intransitive verbs at
    most one); ``tense`` is "pres" or "past", ``plural`` the number it agrees with."""

    verb: str
    tense: str
    plural: bool  # agreement number (= subject number)
    obj: _NP | _NPCoord | None = None
    pps: list[_PP] = field(default_factory=list)


@dataclass
class _VPCoord:
    """``left and right``, two VPs of the same tense and subject (top level only)."""

    left: _VP
    right: _VP


@dataclass
class _RC:
    """A relative clause ``that ...``: subject gap (``vp`` only) or object gap (``subj`` and a
    bare transitive ``vp``)."""

    gap: str  # "subj" | "obj"
    vp: _VP
    subj: _NP | None = None


@dataclass
class _Clause:
    """``subj vp``."""

    subj: _NP | _NPCoord
    vp: _VP | _VPCoord


@dataclass
class _ClauseCoord:
    """``left and right``, two clauses (top level only)."""

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

    def vp(self, depth: int, plural: bool, coord_ok: bool, tense: str | None = None) -> _VP | _VPCoord:
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

