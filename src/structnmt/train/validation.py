"""A training run's validation: the loss over the validation batches, and BLEU of its decoded sources.

Both read a :class:`~structnmt.data.dataset.PreparedSplit` with the run's structures; the loss is
summed over every process of a distributed run (``all_reduce``), BLEU is decoded by the calling
process (rank 0) and broadcast by the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ..data.dataset import collate
from ..data.vocab import EOS
from ..decode.translate import translate_ids
from ..evaluate.score import corpus_scores
from ..syntax.batching import pad_structures
from .loss import label_smoothed_nll


@torch.no_grad()
def validation_loss(model, split, batches: list[np.ndarray], structures: dict, label_ids: dict, device,
                    label_smoothing: float, autocast, all_reduce: Callable[[list[float]], list[float]]) -> dict:
    """``{"loss", "nll", "ppl"}`` (bits per target token, perplexity) over ``batches`` of ``split``."""
    model.eval()
    loss_sum = nll_sum = tokens = 0.0
    for ids in batches:
        b = collate(split, ids, structures, label_ids).to(device)
        with autocast:
            out = model(b.src, b.src_mask, b.tgt_in, b.structures)
        loss, nll = label_smoothed_nll(out.logits, b.tgt_out, label_smoothing)
        loss_sum += float(loss)
        nll_sum += float(nll)
        tokens += b.n_tgt_tokens
    loss_sum, nll_sum, tokens = all_reduce([loss_sum, nll_sum, tokens])
    nll = nll_sum / tokens / math.log(2)
    return {"loss": loss_sum / tokens / math.log(2), "nll": nll, "ppl": 2**nll}


@torch.no_grad()
def validation_bleu(model, split, structures: dict, label_ids: dict, cfg, device, tgt_vocab) -> dict:
    """``{"bleu"}``: sacreBLEU of the decoded sources of ``split`` (at most
    ``cfg.train.validate_bleu_max_sentences`` of them) against its references."""

    model.eval()
    n = len(split)
    limit = cfg.train.validate_bleu_max_sentences
    ids = range(min(n, limit) if limit else n)
    sources = [split.get("src", i).tolist() + [EOS] for i in ids]
    structures_for = None
    if structures:

        def structures_for(idx: list[int], S: int) -> dict:
            return pad_structures(structures, split.structure_values(idx, structures), S, label_ids)

    hyps = translate_ids(model, sources, cfg.decode, device=device, max_positions=cfg.model.max_positions,
                         structures_for=structures_for)
    text = [tgt_vocab.decode(h[0].tokens) if h else "" for h in hyps]
    refs = split.text("ref")[: len(text)]
    return {"bleu": corpus_scores(text, refs, metrics=("bleu",))[0].score}
