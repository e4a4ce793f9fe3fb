"""``structnmt compare --html --checkpoint NAME=CKPT``: the attention maps and induced trees the report draws.

For every system given with a checkpoint and every chosen sentence (``--attention-sentences``: the ones
where the systems differ most, or ``--attention-lines``), what ``structnmt analyze`` computes
(:func:`structnmt.analysis.heatmaps.sentence_maps`: the checkpoint's greedy translation, teacher-forced
once with ``need_weights``): every encoder layer's self-attention and every decoder layer's cross-attention,
per head. For a tree-inducing model (:func:`structnmt.tasks.induce.induces_trees`) also the tree
``structnmt induce`` gives the sentence (:func:`structnmt.tasks.induce.induced_heads`), over the words of the
source's parse where one is given, else over its whitespace-separated words.

Weights travel as one byte per cell (``round(255 w)``, base64): a 16-piece sentence under a 4-layer model
is about 11 KB per system, so a report with attention for a handful of sentences stays small. This module
joins the analysis layer (maps) and the induction command (trees) for the report: the analysis layer
imports neither the commands nor the runner.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..analysis.heatmaps import sentence_maps
from ..decode.translate import Translator
from ..errors import UserError
from ..syntax.parsers import ParserError
from ..tasks.induce import induced_heads, induces_trees


def encode_map(w: np.ndarray) -> dict:
    """A (H, R, K) array of weights in [0, 1] as ``{"heads", "rows", "cols", "data"}``: one byte per cell,
    ``round(255 w)``, row-major, base64 (the page divides by 255)."""
    if w.ndim != 3:
        raise ValueError(f"an attention map is (heads, rows, keys); got shape {w.shape}")
    cells = np.clip(np.rint(np.nan_to_num(w, nan=0.0) * 255.0), 0, 255).astype(np.uint8)
    return {"heads": int(w.shape[0]), "rows": int(w.shape[1]), "cols": int(w.shape[2]),
            "data": base64.b64encode(cells.tobytes()).decode("ascii")}


def decode_map(entry: dict) -> np.ndarray:
    """The inverse of :func:`encode_map` (weights to within 1/510)."""
    raw = np.frombuffer(base64.b64decode(entry["data"]), dtype=np.uint8)
    return raw.reshape(entry["heads"], entry["rows"], entry["cols"]).astype(np.float64) / 255.0


def _sentence_entry(m, tr, tree: bool, words: list[str]) -> dict:

    entry = {
        "translation": m.translation, "src": m.src_labels, "tgt": m.tgt_labels,
        "encoder_self": [dict(encode_map(w), keys=k, head_labels=h)
                         for w, k, h in zip(m.encoder_self, m.key_labels, m.head_labels)],
        "cross": [dict(encode_map(w), keys=k) for w, k in zip(m.cross, m.cross_key_labels)],
    }
    if tree:
        entry["induced"] = {"words": words, "heads": induced_heads(tr, words)}  # heads None: not encodable
    return entry


def attention_payload(checkpoints: dict[str, str], sources: list[str], lines: list[int],
                      words: list[list[str]] | None = None, log: Callable[[str], None] | None = None) -> dict:
    """``{"lines", "systems": {name: {"checkpoint", "induces_trees", "sentences": {line: entry}}}}`` for the
    page (``lines`` 0-based; a line longer than a model's positions has no entry under it, and is said)."""

    payload: dict = {"lines": lines, "systems": {}}
    for name, checkpoint in checkpoints.items():
        if not Path(checkpoint).is_file():
            raise UserError(f"compare: --checkpoint {name}={checkpoint}: no such file; give the checkpoint "
                            "(e.g. RUN_DIR/average.pt) of that system.")
        try:
            tr = Translator(checkpoint)
            tree = induces_trees(tr.cfg)
            maps = sentence_maps(tr, sources, lines)
        except ParserError as err:  # e.g. a model of pre-parsed trees (parser file or synthetic): none given here
            raise UserError(f"compare: --checkpoint {name}={checkpoint}: its model cannot read these sentences ({err}); "
                            "leave it out of --checkpoint (its numbers and sentences are in the report all the "
                            "same).") from None
        sentences = {}
        for i, m in zip(lines, maps):
            if m is None:
                if log is not None:
                    log(f"compare: line {i + 1} is longer than {name}'s model.max_positions; it has no attention "
                        "maps in the report.")
                continue
            sentences[str(i)] = _sentence_entry(m, tr, tree, words[i] if words else sources[i].split())
        payload["systems"][name] = {"checkpoint": str(checkpoint), "induces_trees": tree, "sentences": sentences}
    return payload
