"""Token/phrase quadrants of phrase-based attention weights (Phrase-Based Attentions §4.2,
Tables 3-4, Figs. 4-6).

Every phrasal attention (``phrasal_homogeneous``, ``phrasal_heterogeneous``,
``phrasal_interleaved``) returns weights whose rows are queries and whose columns are
keys; each row and each column is either a **token** (a unigram) or a **phrase** (an
n-gram, n >= 2):

=========================  ====================================  =========================
mechanism                  query rows (B, H', T)                  key columns
=========================  ====================================  =========================
homogeneous (H, T, S)      tokens                                 head h: tokens if its n is
                                                                  1, else phrases (by end)
heterogeneous (H, T, N*S)  tokens                                 block b (``ngrams[b]``):
                                                                  tokens if n = 1, else phrases
interleaved (2H, T, 2S)    heads 0..H-1 unigram (token) queries,  0..S-1 tokens,
                           H..2H-1 bigram (phrase) queries        S..2S-1 bigrams (by end)
=========================  ====================================  =========================

:func:`quadrant_mass` sums the attention weight in each of the four quadrants
(token-to-token, token-to-phrase, phrase-to-token, phrase-to-phrase). Only real query
rows count: positions before the sentence's length, and for interleaved bigram queries
positions t >= 1 (the bigram ending at t covers t-1..t; there is none at t = 0). Every
real row sums to 1, so the share of a quadrant in the total is also "the percentage of
attention mass"; :func:`quadrant_percentages` normalises the sums.

How this relates to the paper's Tables 3-4: the paper reports "percentage (%) of
activations for different attention types in each layer" without defining it. With one
softmax per query, as in eqs. 9-12, the token-query rows of an interleaved layer hold
T/(2T-1) (about half) of the total mass whatever the model learns, yet the paper's rows
put e.g. 96 % on phrase-to-phrase; so its numbers are normalised some other way. We
report the mass share (sums to 100 over the four quadrants) and, for each query type,
the share of its mass that goes to phrases (``*_to_phrase_given_query``), which is the
part the model learns.
"""

from __future__ import annotations

import torch
from torch import Tensor

QUADRANTS = ("token_to_token", "token_to_phrase", "phrase_to_token", "phrase_to_phrase")


def quadrant_mass(weights: Tensor, layout: dict, query_len: int) -> dict[str, float]:
    """Attention mass per quadrant of one sentence's weights ``(H', T, K)`` (see the module
    docstring); rows at or past ``query_len`` (padding) are ignored. Also returns
    ``rows_token``/``rows_phrase``: the number of real query rows of each type summed over heads."""
    w = weights.float()
    Hq, T, K = w.shape
    q_phrase = torch.tensor(layout["query_phrase"], dtype=torch.bool)
    if q_phrase.numel() != Hq:
        raise ValueError(f"phrasal quadrants: weights have {Hq} heads, the layout {q_phrase.numel()}.")
    if layout["key_phrase_per_head"] is not None:
        k_phrase = torch.tensor(layout["key_phrase_per_head"], dtype=torch.bool)[:, None].expand(Hq, K)
    else:
        blocks = layout["key_blocks"]
        S = K // len(blocks)
        if S * len(blocks) != K:
            raise ValueError(f"phrasal quadrants: {K} key columns are not {len(blocks)} blocks of equal length.")
        k_phrase = torch.tensor([n > 1 for n in blocks for _ in range(S)], dtype=torch.bool)[None, :].expand(Hq, K)
    rows = torch.arange(T)[None, :] < query_len  # (1, T)
    valid = rows & ~(q_phrase[:, None] & (torch.arange(T)[None, :] == 0))  # no bigram query at t = 0
    valid = valid.expand(Hq, T)
    to_phrase = (w * k_phrase[:, None, :]).sum(-1)  # (H', T)
    to_token = w.sum(-1) - to_phrase
    out = {}
    for qp, qname in ((False, "token"), (True, "phrase")):
        sel = valid & (q_phrase[:, None] == qp)
        out[f"{qname}_to_token"] = float(to_token[sel].sum())
        out[f"{qname}_to_phrase"] = float(to_phrase[sel].sum())
        out[f"rows_{qname}"] = int(sel.sum())
    return out


def quadrant_percentages(mass: dict[str, float]) -> dict[str, float]:
    """Percentages of the four quadrants (sum 100) and, per query type, the share of its
    mass on phrases (``token_to_phrase_given_query``, ``phrase_to_phrase_given_query``;
    None when there are no such queries)."""
    total = sum(mass[q] for q in QUADRANTS)
    out = {q: (100.0 * mass[q] / total if total else 0.0) for q in QUADRANTS}
    for qname in ("token", "phrase"):
        m = mass[f"{qname}_to_token"] + mass[f"{qname}_to_phrase"]
        out[f"{qname}_to_phrase_given_query"] = 100.0 * mass[f"{qname}_to_phrase"] / m if m else None
    return out


def quadrant_table(stats: dict, role: str) -> str:
    """A Markdown table like the paper's Tables 3-4 for one role of ``attention_stats.json``."""
    lines = [f"| Layer ({role}) | mechanism | token-to-token | token-to-phrase | phrase-to-token | phrase-to-phrase "
             "| token queries on phrases | phrase queries on phrases |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for entry in stats.get(role, []):
        q = entry.get("quadrants")
        if not q:
            continue

        def pct(v):
            return "–" if v is None else f"{v:05.2f}"

        lines.append(f"| {entry['layer']} | {entry.get('phrasal', '')} | " + " | ".join(pct(q[k]) for k in QUADRANTS)
                     + f" | {pct(q['token_to_phrase_given_query'])} | {pct(q['phrase_to_phrase_given_query'])} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _phrase_label(labels: list[str], end: int, n: int) -> str:
    """The n-gram ending at ``end`` (positions before 0 shown as ``·``)."""
    parts = ["·" if i < 0 else labels[i] for i in range(end - n + 1, end + 1)]
    return " ".join(parts)


def quadrant_matrix(weights: Tensor, layout: dict, query_labels: list[str],
                    key_labels: list[str]) -> tuple[Tensor, list[str], list[str], int, list[int]]:
    """One sentence's layer as the paper's quadrant picture (Figs. 4-6).

    weights (H', T, K) -> ``(matrix (R, C), row labels, column labels, token_rows,
    column_block_starts)``: rows are the token queries (mean over their heads), then, for
    the interleaved mechanism, the bigram queries t = 1..T-1; columns are the token keys,
    then the phrase keys block by block (n = 2, 3, ...). For homogeneous attention block
    n is the sum of the maps of the heads of that n divided by the number of heads, so
    every row sums to 1 as in the others. ``token_rows`` and ``column_block_starts`` are where
    the quadrant lines go.
    """
    w = weights.float()
    Hq, T, K = w.shape
    q_phrase = torch.tensor(layout["query_phrase"], dtype=torch.bool)
    if layout["key_phrase_per_head"] is None:  # heterogeneous / interleaved: K = blocks x S
        blocks = layout["key_blocks"]
        S = K // len(blocks)
        order = sorted(range(len(blocks)), key=lambda b: blocks[b])
        cols = torch.cat([torch.arange(b * S, (b + 1) * S) for b in order])
        w = w[:, :, cols]
        ns = [blocks[b] for b in order]
    else:  # homogeneous: one key sequence per head; block n = the heads of that n, summed
        S = K
        heads_n = torch.tensor(layout["heads_n"])
        ns = sorted(set(layout["heads_n"]))
        w = torch.cat([(w * (heads_n == n)[:, None, None].to(w.dtype)).sum(0, keepdim=True) for n in ns], -1) / Hq
        q_phrase = torch.zeros(1, dtype=torch.bool)  # one row block of token queries, already the head mean
    rows = [w[~q_phrase].mean(0)]
    row_labels = list(query_labels[:T])
    if q_phrase.any():
        rows.append(w[q_phrase].mean(0)[1:])
        row_labels += [_phrase_label(query_labels, t, 2) for t in range(1, T)]
    mat = torch.cat(rows, 0)
    col_labels = [key_labels[j] if n == 1 else _phrase_label(key_labels, j, n) for n in ns for j in range(S)]
    return mat, row_labels, col_labels, T, [i * S for i in range(len(ns))]
