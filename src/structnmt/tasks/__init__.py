"""Tasks beyond translation, each built on the translation layers below: POS tagging for PhraseTransformer
(:mod:`.tagger`), tree induction from SA-NMT's structured attention (:mod:`.induce`), and exporting a
checkpoint to CTranslate2 (:mod:`.export`)."""
