"""Batched beam search and greedy decoding over the model decoding protocol.

A model used here implements (see :mod:`structnmt.models.transformer`)::

    enc = model.encode(src, src_mask, structures)      # anything with .reorder(index)
    lp  = model.decode_step(tokens, enc, cache)        # tokens (N, t) -> log-probs (N, V)
    lg  = model.decode_step(tokens, enc, cache, log_probs=False)   # -> logits (N, V)

and the :class:`~structnmt.nn.IncrementalCache` it fills is reordered with the beam. The
tensor ``decode_step`` returns is the caller's: beam and greedy search write into it, so
it must be a fresh tensor (or a view of one), never a parameter, buffer or expanded view.

Beam search keeps ``beam`` hypotheses per sentence; at each step it takes the best
``2 * beam`` extensions, finalises those ending in EOS that rank within the top
``beam`` (score normalised by ``length ** lenpen``, length counting EOS, as in fairseq),
and continues with the ``beam`` best that do not end in EOS. A sentence is finished
when it holds ``beam`` finalised hypotheses, or when it reaches its maximum length
``a * src_len + b`` (EOS is forced there); finished sentences leave the batch.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.vocab import BOS, EOS, PAD
from ..nn.attention import IncrementalCache
from .cuda_graphs import GraphPool, StaticSteps, cuda_graphs_refusal, static_decoding_refusal


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # length-normalised log-probability
    logprob: float  # total log-probability (EOS included)


def _max_lens(src_mask: Tensor, a: float, b: int, cap: int) -> Tensor:
    src_len = src_mask.sum(dim=1).float()
    return torch.clamp((a * src_len + b).floor().long(), min=1, max=cap)


@functools.lru_cache(maxsize=64)
def _chunk_size(V: int, k: int) -> int:
    """The divisor of V between 32 and 1024 closest to sqrt(V) with at least 4k chunks; 0 if none."""
    best = 0
    for C in range(32, 1025):
        if V % C == 0 and V // C >= 4 * k and (not best or abs(C * C - V) < abs(best * best - V)):
            best = C
    return best


def topk_rows(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=1)`` for a contiguous (N, V) ``x``, in two stages when V is large.

    The row is cut into chunks of C entries; the k chunks with the largest maxima hold
    the row's k largest entries (a chunk holding one of them has a maximum at least as
    large, and if k other chunks had larger maxima there would be k larger entries), so
    the top k of those k*C entries is the row's top k. About twice as fast as one top-k
    over 10,000 types on the CPU (benchmarks/README.md); among exactly equal scores the
    choice may differ from ``topk``'s. Values in descending order, like ``topk``.
    """
    N, V = x.shape
    C = _chunk_size(V, k) if V >= 2048 and x.is_contiguous() else 0
    if not C:
        return x.topk(k, dim=1)
    n_chunks = V // C
    _, top_chunks = x.view(N, n_chunks, C).amax(dim=2).topk(k, dim=1)  # (N, k)
    # the k chunks of every row copied whole: rows of (N * n_chunks, C) picked by one index_select (an
    # element-wise gather needs an (N, k*C) index built and read): the whole top-k over (640, 10,000) 1.22x
    # faster than with the gather on the 2-core Xeon (benchmarks/bench_normaliser.py, benchmarks/README.md)
    rows = (top_chunks + torch.arange(0, N * n_chunks, n_chunks, device=x.device)[:, None]).view(-1)
    cand = x.view(N * n_chunks, C).index_select(0, rows).view(N, k * C)
    values, j = cand.topk(k, dim=1)
    index = top_chunks.gather(1, torch.div(j, C, rounding_mode="floor")) * C + j % C
    return values, index


def _top_extensions(logits: Tensor, c: int) -> tuple[Tensor, Tensor, Tensor]:
    """logits (N, V) float32 -> the c best extensions of every row (PAD and BOS never among
    them) as log-probabilities (N, c), their tokens (N, c), and EOS's log-probability (N, 1).

    The normaliser is the log-sum-exp over the whole vocabulary, PAD and BOS included (the
    model's distribution): one ``log_softmax``, whose CPU kernel sums the exponentials
    without writing them (1.6x in-place subtract-exp-sum passes: benchmarks/bench_normaliser.py
    and benchmarks/README.md), then the two-stage top-k over the log-probabilities.
    A row without any finite score gives -inf everywhere, not NaN.

    A contiguous ``logits`` is overwritten with its log-probabilities: the kernel's last pass
    writes each entry after reading it, and writing into the rows it has just read instead of
    a fresh (N, V) block makes the normaliser over (640, 10,000) 1.26x faster on the 2-core
    Xeon (``benchmarks/bench_normaliser.py``, benchmarks/README.md). A strided one (the last position of
    a model's (N, t, V) output) gets a fresh contiguous block, which the two-stage top-k needs.
    """
    lp = torch.log_softmax(logits, dim=1, out=logits) if logits.is_contiguous() else torch.log_softmax(logits, dim=1)
    eos = lp[:, EOS : EOS + 1].clone()
    lp[:, PAD] = float("-inf")
    lp[:, BOS] = float("-inf")
    cand_lp, cand_tok = topk_rows(lp, c)
    # all -inf logits: log_softmax gives NaN (and topk ranks NaN first); -inf instead, without a host sync
    return cand_lp.nan_to_num_(nan=float("-inf")), cand_tok, eos.nan_to_num_(nan=float("-inf"))


def _force_eos(cand_lp: Tensor, cand_tok: Tensor, eos_lp: Tensor, at_max: Tensor) -> None:
    """Make EOS the only candidate of the rows ``at_max`` (N,) bool at their maximum length, in place."""
    if at_max.any():
        # EOS is forced here; a model that gives it zero probability still yields a
        # hypothesis, scored as if EOS had log-probability -1e4.
        cand_lp[at_max] = float("-inf")
        cand_lp[at_max, 0] = eos_lp[at_max, 0].clamp(min=-1e4)
        cand_tok[at_max, 0] = EOS


def _best_extensions(
    scores: Tensor, cand_lp: Tensor, cand_tok: Tensor, n: int, width: int, K: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The ``min(2K, width*c)`` best extensions of each of the n sentences over its ``width`` hypotheses.

    scores (n, width) and cand_lp, cand_tok (n*width, c) -> their total scores (n, n_cand) in
    descending order, the hypothesis each extends (n, n_cand) in ``0..width-1``, and its token (n, n_cand).
    """
    c = cand_lp.shape[1]
    total = (scores.view(n, width, 1) + cand_lp.view(n, width, c)).view(n, width * c)
    n_cand = min(2 * K, width * c)
    top_scores, top_idx = total.topk(n_cand, dim=1)
    beam_idx = torch.div(top_idx, c, rounding_mode="floor")
    tok = cand_tok.view(n, width * c).gather(1, top_idx)
    return top_scores, beam_idx, tok


def _finalise(
    finished: list[list[Hypothesis]],
    fin: Tensor,
    active: Tensor,
    top_scores: Tensor,
    beam_idx: Tensor,
    tokens: Tensor,
    width: int,
    length: int,
    lenpen: float,
    K: int,
) -> Tensor:
    """Append the EOS extensions ``fin`` (n, K) bool to ``finished``; -> (n,) bool: the sentences now done.

    A sentence takes at most K finalised hypotheses; each is scored ``logprob / length ** lenpen``
    (``length`` counting EOS). ``tokens`` (n*width, t) are the prefixes the extensions end.
    """
    n = active.numel()
    done = torch.zeros(n, dtype=torch.bool, device=active.device)
    if fin.any():
        # Everything the loop reads comes to the host in one transfer per tensor (on a GPU, reading
        # element by element would wait on the device once per element).
        r, col = fin.nonzero().unbind(1)
        rows = r * width + beam_idx[r, col]
        active_ids = active.tolist()
        for sid, lp, hyp in zip(active[r].tolist(), top_scores[r, col].tolist(), tokens[rows, 1:].tolist()):
            if len(finished[sid]) < K:
                finished[sid].append(Hypothesis(hyp, lp / (length**lenpen), lp))
        done = torch.tensor([len(finished[s]) >= K for s in active_ids], device=active.device)
    return done


def _continuations(
    top_scores: Tensor, is_eos: Tensor, beam_idx: Tensor, tok: Tensor, done: Tensor, K: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The K best non-EOS extensions of each sentence, and ``done`` with the sentences that have none.

    -> their scores (n, K) (-inf in the slots without one), the hypotheses they extend (n, K)
    in ``0..width-1``, their tokens (n, K), and ``done`` (n,) bool.
    """
    n_cand = top_scores.shape[1]
    cont = top_scores.masked_fill(is_eos, float("-inf"))
    sel_scores, sel = cont.topk(min(K, n_cand), dim=1)
    if n_cand < K:  # a vocabulary smaller than the beam: the slots without a candidate are dead (-inf)
        sel_scores = F.pad(sel_scores, (0, K - n_cand), value=float("-inf"))
        sel = F.pad(sel, (0, K - n_cand), value=0)
    done = done | ~torch.isfinite(sel_scores[:, 0])
    sel_beam = beam_idx.gather(1, sel)
    sel_tok = tok.gather(1, sel)
    return sel_scores, sel_beam, sel_tok, done


def _drop_done(
    keep: Tensor, K: int, rows: Tensor, tokens: Tensor, scores: Tensor, active: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Keep only the sentences ``keep`` (n,) bool: their rows, tokens (n*K, t), scores (n, K) and ids."""
    keep_rows = keep.repeat_interleave(K)
    return rows[keep_rows], tokens[keep_rows], scores[keep], active[keep]


class _GrowingSteps:
    """The ordinary decoding steps: the model's ``decode_step`` on the compact rows, with a cache that grows by a
    position every step and drops the sentences that finish (see the module docstring)."""

    def __init__(self, model, enc, *, beam: int, shared: bool) -> None:
        self.model = model
        self.enc = enc
        self.shared = shared
        # not shared: enc keeps one row per hypothesis, made by the first step's reorder (one row per sentence
        # before it)
        self.cache = IncrementalCache(beam=beam if shared else 1)
        # logits when the model can give them; log-probabilities are logits too (their log-sum-exp is 0)
        self.takes_flag = "log_probs" in inspect.signature(model.decode_step).parameters

    def logits(self, tokens: Tensor, step: int) -> Tensor:
        if self.takes_flag:
            return self.model.decode_step(tokens, self.enc, self.cache, log_probs=False)
        return self.model.decode_step(tokens, self.enc, self.cache)

    def reorder(self, rows: Tensor, keep: Tensor, kept_all: bool, active: Tensor) -> None:
        """Reorder the cache and the encoder output to the new hypotheses ``rows``."""
        # the sentences that stay, given: after the first step rows and sentences are not K to one
        stay = None if kept_all else keep.nonzero().squeeze(1)  # one host sync, shared by both reorders
        self.cache.reorder(rows, sentences=stay)
        if not self.shared:
            self.enc = self.enc.reorder(rows)
        elif stay is not None:
            self.enc = self.enc.reorder(stay)


class _SlotSteps(StaticSteps):
    """:class:`~structnmt.decode.cuda_graphs.StaticSteps` with the search's reorder call."""

    def reorder(self, rows: Tensor, keep: Tensor, kept_all: bool, active: Tensor) -> None:
        super().reorder(rows, active)


def _make_steps(model, enc, *, beam: int, shared: bool, max_lens: Tensor, fixed_shapes: bool, cuda_graphs: bool,
                graph_pool: GraphPool | None = None, max_positions: int | None = None):
    """The search's source of logits: fixed-shape slots (``fixed_shapes`` or ``cuda_graphs``; with a
    ``graph_pool``, the pool's, reused from batch to batch) or growing rows."""
    if not (fixed_shapes or cuda_graphs):
        return _GrowingSteps(model, enc, beam=beam, shared=shared)
    refusal = (cuda_graphs_refusal(model, enc.memory.device) if cuda_graphs else static_decoding_refusal(model))
    if refusal:
        raise ValueError(f"decoding in fixed shapes: {refusal}")
    if cuda_graphs and graph_pool is not None:
        return graph_pool.steps(model, enc, sentences=max_lens.numel(), beam=beam, capacity=int(max_lens.max()),
                                shared=shared, max_positions=max_positions, make=_SlotSteps)
    return _SlotSteps(model, enc, sentences=max_lens.numel(), beam=beam, capacity=int(max_lens.max()),
                      shared=shared, graphs=cuda_graphs)


@dataclass
class _Beams:
    """The live hypotheses of beam search's ``n`` unfinished sentences."""

    tokens: Tensor  # (n*width, t) their prefixes, BOS first
    scores: Tensor  # (n, width) their total log-probabilities
    active: Tensor  # (n,) the batch index of each sentence
    width: int = 1  # rows per sentence: 1 at the first step (every hypothesis is the empty prefix), then K


def _advance(beams: _Beams, steps, step: int, max_lens: Tensor, finished: list[list[Hypothesis]], K: int,
             lenpen: float) -> tuple[Tensor, Tensor, bool]:
    """One step of beam search: extend every live hypothesis by a token, finalise the EOS extensions that rank
    within each sentence's top K into ``finished``, continue ``beams`` with the K best others, and drop the
    sentences now done. Returns what ``steps.reorder`` takes: the rows (of the step's input) the continued
    hypotheses extend, (n_kept*K,); ``keep`` (n,) bool, the sentences that stay; and whether all of them do."""
    n = beams.active.numel()
    width = beams.width
    # (n*width, V) in float32: bfloat16 logits (decode.dtype) are converted once here, since reductions over
    # bfloat16 rows (the top-k's chunk maxima, the normaliser's sum) are several times slower on the CPU
    logits = steps.logits(beams.tokens, step).float()
    V = logits.shape[-1]
    c = min(2 * K, V)
    cand_lp, cand_tok, eos_lp = _top_extensions(logits, c)  # logits overwritten: not read again
    at_max = (max_lens[beams.active] <= step + 1).repeat_interleave(width)
    _force_eos(cand_lp, cand_tok, eos_lp, at_max)
    top_scores, beam_idx, tok = _best_extensions(beams.scores, cand_lp, cand_tok, n, width, K)
    is_eos = tok == EOS
    # finalise EOS candidates ranked within the top K
    fin = is_eos[:, :K] & torch.isfinite(top_scores[:, :K])
    done = _finalise(finished, fin, beams.active, top_scores, beam_idx, beams.tokens, width, step + 1, lenpen, K)
    # continue with the K best non-EOS extensions
    scores, sel_beam, sel_tok, done = _continuations(top_scores, is_eos, beam_idx, tok, done, K)
    rows = (torch.arange(n, device=beams.tokens.device)[:, None] * width + sel_beam).view(-1)  # (n*K,)
    tokens = torch.cat([beams.tokens[rows], sel_tok.view(-1, 1)], dim=1)
    active = beams.active
    keep = ~done
    kept_all = bool(keep.all())
    if not kept_all:
        rows, tokens, scores, active = _drop_done(keep, K, rows, tokens, scores, active)
    beams.tokens, beams.scores, beams.active = tokens, scores, active
    return rows, keep, kept_all


def _nbest(finished: list[list[Hypothesis]], nbest: int) -> list[list[Hypothesis]]:
    """Each sentence's ``nbest`` best finalised hypotheses, best first (sorted in place)."""
    out = []
    for hyps in finished:
        hyps.sort(key=lambda h: -h.score)
        out.append(hyps[:nbest])
    return out


@torch.inference_mode()
def beam_search(
    model,
    src: Tensor,
    src_mask: Tensor,
    *,
    beam: int = 5,
    lenpen: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    nbest: int = 1,
    max_positions: int = 1024,
    structures: dict[str, Tensor] | None = None,
    share_source: bool = True,
    fixed_shapes: bool = False,
    cuda_graphs: bool = False,
    graph_pool: GraphPool | None = None,
) -> list[list[Hypothesis]]:
    """src (B, S), src_mask (B, S) bool -> per sentence, the ``nbest`` best hypotheses.

    ``share_source`` (default): when the model allows it (``shares_source_across_beam``),
    the encoder output and the cross-attention keys and values keep one row per sentence
    for all its hypotheses instead of a copy per hypothesis that is reordered every step.
    Each step normalises every hypothesis's logits (one ``log_softmax``) and keeps the
    ``2 * beam`` best extensions of each (the sentence's best ``2 * beam`` are among them).
    The first step decodes one row per sentence (its ``beam`` hypotheses are all the empty
    prefix, and only one of them is live): ``(beam - 1) / beam`` of the first step's work
    less, out of the 30-40 steps of a batch of Multi30k sentences; the rows become ``beam``
    per sentence after it. float32 translations are the same as with ``beam`` rows at the
    first step; in bfloat16, where logits tie more often, ``topk`` may order tied candidates
    differently over the shorter row and so keep another of two equal-scoring tokens.

    ``cuda_graphs`` (``decode.cuda_graphs``, CUDA only): every step after the first replays one CUDA graph of
    the decoder over fixed-shape slots (:mod:`structnmt.decode.cuda_graphs`); with a ``graph_pool``, the
    batch is padded to the pool's bucket and replays the graph the bucket's first batch recorded;
    ``fixed_shapes``: the same slots without the graph (any device; the same translations as without it, sums
    in another order).
    """
    B = src.shape[0]
    K = beam
    device = src.device
    enc = model.encode(src, src_mask, structures or {})
    max_lens = _max_lens(src_mask, max_len_a, max_len_b, max_positions - 1)
    shared = share_source and K > 1 and bool(getattr(model, "shares_source_across_beam", lambda: False)())
    steps = _make_steps(model, enc, beam=K, shared=shared, max_lens=max_lens, fixed_shapes=fixed_shapes,
                        cuda_graphs=cuda_graphs, graph_pool=graph_pool, max_positions=max_positions)
    beams = _Beams(tokens=torch.full((B, 1), BOS, dtype=torch.long, device=device),
                   scores=torch.zeros(B, 1, device=device), active=torch.arange(B, device=device))
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    step = 0
    while beams.active.numel() > 0:
        rows, keep, kept_all = _advance(beams, steps, step, max_lens, finished, K, lenpen)
        if beams.active.numel() == 0:
            break
        steps.reorder(rows, keep, kept_all, beams.active)
        beams.width = K
        step += 1
    return _nbest(finished, nbest)


@torch.no_grad()
def greedy_search(
    model,
    src: Tensor,
    src_mask: Tensor,
    *,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    max_positions: int = 1024,
    structures: dict[str, Tensor] | None = None,
    lenpen: float = 1.0,
    fixed_shapes: bool = False,
    cuda_graphs: bool = False,
    graph_pool: GraphPool | None = None,
) -> list[list[Hypothesis]]:
    """Arg-max decoding; same output format as :func:`beam_search` (one hypothesis); ``fixed_shapes`` and
    ``cuda_graphs`` as there."""
    B = src.shape[0]
    device = src.device
    enc = model.encode(src, src_mask, structures or {})
    max_lens = _max_lens(src_mask, max_len_a, max_len_b, max_positions - 1)
    steps = _make_steps(model, enc, beam=1, shared=False, max_lens=max_lens, fixed_shapes=fixed_shapes,
                        cuda_graphs=cuda_graphs, graph_pool=graph_pool, max_positions=max_positions)
    tokens = torch.full((B, 1), BOS, dtype=torch.long, device=device)
    logprob = torch.zeros(B, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    for step in range(int(max_lens.max())):
        lp = torch.log_softmax(steps.logits(tokens, step).float(), dim=-1)
        lp[:, PAD] = float("-inf")
        lp[:, BOS] = float("-inf")
        force = max_lens <= step + 1
        best = lp.argmax(dim=-1)
        best = torch.where(force, torch.full_like(best, EOS), best)
        gained = lp.gather(1, best[:, None]).squeeze(1)
        logprob = torch.where(done, logprob, logprob + gained)
        lengths = torch.where(done, lengths, lengths + 1)
        best = torch.where(done, torch.full_like(best, PAD), best)
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        done = done | (best == EOS)
        if bool(done.all()):
            break
    out = []
    for b in range(B):
        seq = [t for t in tokens[b, 1:].tolist() if t not in (PAD,)]
        if seq and seq[-1] == EOS:
            seq = seq[:-1]
        L = int(lengths[b])
        lp_b = float(logprob[b])
        out.append([Hypothesis(seq, lp_b / (L**lenpen) if L else -math.inf, lp_b)])
    return out
