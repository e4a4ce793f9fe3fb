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

Modules
-------
* :mod:`.lexicon` -- source word lists and the seeded target lexicon (stems, suffixes);
* :mod:`.grammar` -- the syntax objects of the source grammar and the sampler;
* :mod:`.render` -- :class:`SynthExample` and the source / target renderers (tokens, PTB tree,
  :class:`~structnmt.syntax.trees.DependencyTree`, target, agreement probes);
* :mod:`.reading` -- :func:`realize`: a PTB tree (read by :func:`structnmt.syntax.io.parse_ptb`)
  back into an example;
* :mod:`.splits` -- :class:`SynthConfig`, :func:`stream_splits` (train / valid / test, drawn as
  they are read) and :func:`generate` (the same in lists);
* :mod:`.seen` -- :class:`SeenSentences`, the sentences drawn so far as 64-bit keys (12 bytes each);
* :mod:`.writing` -- the corpus files, written as the examples are drawn (:func:`write_example`,
  :func:`write_examples`, :func:`write_corpus`; CoNLL-U by :func:`structnmt.syntax.io.format_conllu`);
* :mod:`.agreement` -- the agreement metric (:func:`agreement_outcomes`, :func:`agreement_accuracy`).

Every public name is importable from ``structnmt.data.synthetic``.
"""

from __future__ import annotations

from .agreement import agreement_accuracy, agreement_outcomes
from .lexicon import (
    AGREEMENT_SUFFIX,
    PLURAL_SUFFIX,
    TENSE_SUFFIX,
    source_vocabulary,
    target_lexicon,
    target_verb,
)
from .reading import realize
from .render import SynthExample
from .seen import SeenSentences
from .splits import SynthConfig, generate, split_sizes, stream_splits
from .writing import (
    corpus_dir,
    progress_bar,
    split_files,
    write_corpus,
    write_example,
    write_examples,
)

__all__ = [
    "SynthConfig",
    "SynthExample",
    "generate",
    "stream_splits",
    "split_sizes",
    "SeenSentences",
    "write_corpus",
    "write_example",
    "write_examples",
    "progress_bar",
    "split_files",
    "corpus_dir",
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
