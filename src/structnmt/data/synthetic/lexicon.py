"""The lexicons of the synthetic corpus (:mod:`structnmt.data.synthetic`).

Source side: the English-like word lists (140 nouns with their plurals, 42 transitive and
24 intransitive verbs with their 3sg / plural-present / past forms, 51 adjectives,
15 prepositions, the determiners), the reverse lookups that read a word form back
(:data:`_NOUN_OF_FORM`, :data:`_VERB_OF_FORM`) and :func:`source_vocabulary`.

Target side: the invented stems of a seed (:func:`target_lexicon`, CV syllables drawn
from the seed, no two word forms alike) and the suffixes of the target morphology
(:data:`PLURAL_SUFFIX`, :data:`TENSE_SUFFIX`, :data:`AGREEMENT_SUFFIX`, :func:`target_verb`).
"""

from __future__ import annotations

import random
from functools import lru_cache

__all__ = ["PLURAL_SUFFIX", "TENSE_SUFFIX", "AGREEMENT_SUFFIX", "target_verb", "target_lexicon", "source_vocabulary"]

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

# reverse lookups (used by :func:`.reading.realize`): noun form -> (lemma, plural); (tag, verb form) -> lemma
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
    """The target stems of ``seed`` (:func:`target_lexicon`, cached and shared: do not modify)."""
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

