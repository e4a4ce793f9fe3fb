"""Attention heatmaps (PNG) and attention statistics of a trained checkpoint.

``structnmt analyze --checkpoint CKPT --input SRC.txt --out DIR`` calls
:func:`run_analyze`. For each of the first ``max(sentences, stats_sentences)`` non-empty
input lines (``--stats-sentences``: statistics over many sentences, pictures of the first
``sentences`` only):

1. the source is encoded and parsed exactly as ``structnmt translate`` does
   (:class:`~structnmt.decode.translate.Translator`: the parser backend of the training
   data when the model needs structure tensors; with the ``none`` backend, words come
   from the subword pieces, as in training);
2. the model translates it greedily, and its own translation is fed back as the decoder
   input of one teacher-forced pass ``model(src, mask, tgt_in, structures,
   need_weights=True)`` (there is no reference), which gives every attention map;
3. the :class:`~structnmt.nn.attention.AttentionOutput` of each encoder self-attention
   is captured with a forward hook on ``encoder_layers[i].self_attn`` — the model's
   ``encode`` keeps only ``weights`` and drops ``extras``, and a hook reads the full
   output without re-implementing ``encode`` (so memory extensions, norms and any later
   change of the encoder loop stay the model's business).

Files written in ``out_dir`` (``n`` = 1-based sentence number):

* ``sent{n}_encoder_self.png`` — one row per encoder layer, one column per head plus the
  head average; source pieces as tick labels (continuation pieces shown as ``##piece``).
  MG-SA layers are labelled with each head's granularity; their token-level map spreads
  each phrase's weight evenly over its tokens. The **layer after an MG-SA layer** is
  framed in red: MG-SA's weights are over phrases, so the paper visualises "the
  subsequent layer after MH-SA and MG-SA" (footnote 2, Fig. 3).
* ``sent{n}_mgsa_layer{l}_phrases.png`` — for every MG-SA layer ``l``: each head over its
  own memory (``extras["group_weights"]``, (B, H_g, T, M_g)): word heads over pieces,
  phrase heads over phrases labelled by their tokens (and, for syntactic phrases, their
  constituent label).
* ``sent{n}_syntax_gate.png`` — SA-NMT models (RNN family with a syntactic annotation): the
  norm of the syntactic gate z_t (eq. 23) over the predicted target tokens (the paper's
  Fig. 6; like every map here, over the **greedy** translation, teacher-forced, not a beam
  output), the highest in bold; ``attention_stats.json`` adds ``syntax_gate``: the tokens
  that most often carry a sentence's highest gate, the highest and lowest mean gates, the
  mean at ``</s>`` (section 5.3's analysis).
* ``sent{n}_rhe_layer{l}.png`` — for every RHE layer ``l`` (redundant-head enlivening):
  each head's plain attention (top; redundant heads in red, with ``Syn_attn`` and
  ``h_conf`` of eqs. 9 and 3) and the distribution the layer used (bottom: the DEA/LPEA
  distribution for a redundant head, the plain one kept for an important head) — the
  panels (a), (b) and (e) of RHE Fig. 5; Rel_Pos and Localness heads (panels (c), (d)) are
  in ``sent{n}_encoder_self.png`` of those models.
* ``sent{n}_phrase_transformer_layer{l}.png`` — for every PhraseTransformer layer ``l``:
  phase 1 (attention over all nodes, eqs. 2-3) in the top row and phase 2 (within
  phrases, eq. 5) in the bottom row, every head and their mean, over the words and the
  hypernodes (labelled ``[w1 w2]`` by their member pieces) — the paper's Fig. 3 (a), (b).
  In ``sent{n}_encoder_self.png`` such layers also show every node.
* ``sent{n}_cross_last.png`` — cross-attention of the last decoder layer, rows = the
  produced target pieces, columns = source pieces.
* ``attention_stats.json`` — per layer of each role (``encoder_self``, ``decoder_self``,
  ``cross``): the mean attention entropy (nats) overall and per head, and for the self
  attentions the share of attention on the diagonal (the token itself), on the adjacent
  tokens (|i - j| = 1) and their sum; for MG-SA layers also the entropy of every head
  group over its own memory. Averages are over heads, token query positions and sentences:
  the rows of a PhraseTransformer layer's hypernodes and of an interleaved phrase-based
  layer's phrase queries are left out, and locality is measured among the tokens (phrases
  and hypernodes have no position); those layers' phrase rows are in the quadrants.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from ..data.dataset import encode_sources
from ..data.vocab import BOS
from ..decode.beam import greedy_search
from ..decode.translate import Translator
from ..errors import UserError
from ..fileio.corpus import read_lines
from ..fileio.files import OutputDir
from ..syntax.batching import build_structures
from .phrasal_stats import quadrant_mass, quadrant_matrix, quadrant_percentages, quadrant_table

if TYPE_CHECKING:
    from ..decode.translate import Translator
    from ..fileio.files import OutputDir

SPIECE = "\u2581"


# --------------------------------------------------------------------------- inputs


def _read_texts(path: str | Path) -> list[str]:

    return [line.strip() for line in read_lines(path) if line.strip()]


def _display(piece: str) -> str:
    """A SentencePiece piece as a tick label: word starts plain, continuations ``##x``."""
    if piece == "</s>":
        return piece
    if piece.startswith(SPIECE):
        return piece[len(SPIECE):] or SPIECE
    return "##" + piece


def _structures_for(tr, texts: list[str], chosen: list[int], lengths: list[int]) -> list[dict | None]:
    """Structure tensors (batch of one) of each chosen sentence, built like ``translate``."""
    if not tr.structures:
        return [None for _ in chosen]

    # pre-parsed files hold one tree per input line: parse them all (count check);
    # without a parser Translator._parse takes the words from the pieces
    pre_parsed = tr.parser_cfg is not None and tr.parser_cfg.name in ("file", "synthetic")
    todo = list(range(len(texts))) if pre_parsed else chosen
    parsed = dict(zip(todo, tr._parse([texts[i] for i in todo])))
    out = []
    for i, S in zip(chosen, lengths):
        if parsed[i] is None:
            raise UserError(f"input sentence {i + 1}: its parse cannot be aligned with the text; check that the "
                            "pre-parsed input matches the input lines (one tree per non-empty line).")
        trees, wop = parsed[i]
        out.append({k: v.to(tr.device) for k, v in
                    build_structures(tr.structures, [trees], [wop], S, tr.label_ids).items()})
    return out


# --------------------------------------------------------------------------- statistics


def _entropy(w: torch.Tensor) -> torch.Tensor:
    """(..., K) distributions -> (...) entropy in nats."""
    w = w.float()
    return -(w * torch.log(w.clamp_min(1e-12))).sum(-1)


def _locality(w: torch.Tensor) -> tuple[float, float]:
    """w (H, T, S) self-attention -> (share on the diagonal, share on |i - j| = 1)."""
    H, T, S = w.shape
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    diag = (i == j).float()
    adj = ((i - j).abs() == 1).float()
    return float((w * diag).sum(-1).mean()), float((w * adj).sum(-1).mean())


class _Acc:
    """Running means of per-layer statistics over sentences."""

    def __init__(self):
        self.values: dict[tuple, list] = {}

    def add(self, key: tuple, value) -> None:
        self.values.setdefault(key, []).append(value)

    def mean(self, key: tuple):
        vals = self.values.get(key)
        if not vals:
            return None
        return np.mean(np.asarray(vals, dtype=np.float64), axis=0).tolist()


# --------------------------------------------------------------------------- drawing


def _heat(fig, ax, w: np.ndarray, xlabels: list[str], ylabels: list[str], title: str, *, color: str = "black",
          frame: str | None = None, fontsize: float = 7.0, show_x: bool = True, show_y: bool = True,
          vmax: float | None = None, colorbar: bool = True) -> None:
    """One heatmap; tick labels only where asked (drawing thousands of labels is slow)."""
    vmax = max(float(w.max()) if vmax is None else vmax, 1e-6)
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(xlabels)))
    ax.set_yticks(range(len(ylabels)))
    if show_x:
        ax.set_xticklabels(xlabels, rotation=90, fontsize=fontsize)
    else:
        ax.tick_params(labelbottom=False)
    if show_y:
        ax.set_yticklabels(ylabels, fontsize=fontsize)
    else:
        ax.tick_params(labelleft=False)
    ax.set_title(title, fontsize=fontsize + 1.5, color=color, fontweight="bold" if frame else "normal")
    if frame:
        for spine in ax.spines.values():
            spine.set_edgecolor(frame)
            spine.set_linewidth(3.0)
    if colorbar:
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=fontsize - 1)



def _heads_and_mean(fig, axes, w: np.ndarray, xlabels: list[str], ylabels: list[str], titles: list[str],
                    mean_title: str, **style) -> None:
    """One row of panels: each head of ``w`` (H, rows, cols) in ``axes[h]`` titled ``titles[h]``, then the
    heads' mean in ``axes[H]``, all on one colour scale (its bar on the mean's panel only)."""
    H, vmax = w.shape[0], float(w.max())
    for h in range(H):
        _heat(fig, axes[h], w[h], xlabels, ylabels, titles[h], show_y=h == 0, vmax=vmax, colorbar=False, **style)
    _heat(fig, axes[H], w.mean(0), xlabels, ylabels, mean_title, show_y=False, vmax=vmax, **style)

def _save(fig, out, name: str) -> Path:
    """``fig`` as ``name`` in ``out`` (a :class:`structnmt.fileio.files.OutputDir`: checked, written atomically)."""
    return out.write_with(name, lambda tmp: fig.savefig(tmp, dpi=90, format="png"))


def _hypernode_labels(encoder, structures: dict | None, src_labels: list[str]) -> list[str]:
    """``[w1 w2]`` for every real hypernode of the sentence (its member pieces), or []."""
    plan = getattr(encoder, "plan", None)
    if plan is None or not structures:
        return []
    member = structures[plan[1].key][0]  # (N, S)
    real = structures[plan[1].key + ".mask"][0]
    return ["[" + " ".join(src_labels[t] for t in member[h].nonzero().flatten().tolist()) + "]"
            for h in range(member.shape[0]) if bool(real[h])]


def _phrase_labels(g, structures: dict, pieces: list[str], M: int, tag_names: dict[int, str]) -> list[str]:
    """Tick labels of the M phrases of group ``g`` in a batch of one: its tokens (+ label)."""
    ids, lab = g.phrase_ids(structures)  # the group says where its phrases are (the memory_groups hook)
    labels = None if lab is None else lab.tolist()
    ids = ids.tolist()
    out = []
    for m in range(M):
        toks = [p for p, x in zip(pieces, ids) if x == m]
        text = "".join(toks).replace(SPIECE, " ").strip() if toks else "<pad>"  # the phrase's words
        if len(text) > 28:
            text = text[:26] + ".."
        if labels is not None and m < len(labels) and labels[m] >= 0:
            text = f"{tag_names.get(labels[m], labels[m])}: {text}"
        out.append(text)
    return out


@torch.no_grad()
def _quadrant_figure(*, fig_cls, layers: list, qlab: list[str], klab: list[str], role: str, title: str,
                     out, name: str) -> Path:
    """One panel per phrasal layer: the quadrant matrix (token / phrase queries x token /
    phrase keys, head mean) with the quadrant lines."""

    panels = [(li, *quadrant_matrix(w[0].cpu(), lay, qlab, klab)) for li, lay, w in layers]
    R = max(p[1].shape[0] for p in panels)
    C = max(p[1].shape[1] for p in panels)
    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = fig_cls(figsize=(cols * (1.5 + 0.16 * C), rows * (1.6 + 0.16 * R) + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False).reshape(-1)
    for ax, (li, mat, rl, cl, t_rows, starts) in zip(axes, panels):
        _heat(fig, ax, mat.numpy(), cl, rl, f"{role} layer {li + 1}", fontsize=6)
        if len(rl) > t_rows:
            ax.axhline(t_rows - 0.5, color="white", linewidth=1.5)
        for c in starts[1:]:
            ax.axvline(c - 0.5, color="white", linewidth=1.5)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    fig.suptitle(f"Token/phrase quadrants ({role}; rows: token queries, then phrase queries; columns: token keys, "
                 f"then phrase keys), {title}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return _save(fig, out, name)


# --------------------------------------------------------------------------- per-run state


@dataclass
class _Run:
    """Per-run state of :func:`run_analyze`: the model, the chosen sentences, the layers and the running sums."""

    tr: Translator
    out: OutputDir
    fig_cls: type  # matplotlib's Figure
    texts: list[str]
    chosen: list[int]  # 0-based indices into ``texts`` of the analysed sentences
    drawn: int  # pictures of the first ``drawn`` of them
    tag_names: dict[int, str]
    enc_layers: list
    mgsa_at: list[bool]  # MG-SA's memories
    after_mgsa: list[bool]
    mechanisms: list[str]
    modules: dict[str, list]  # role -> the attention module of every layer
    quad: dict[tuple[str, int], dict] = field(default_factory=dict)
    # SA-NMT eq. 23: target token with the sentence's highest gate norm
    gate_argmax: dict[str, int] = field(default_factory=dict)
    gate_by_token: dict[str, list[float]] = field(default_factory=dict)
    acc: _Acc = field(default_factory=_Acc)
    written: list[Path] = field(default_factory=list)


@dataclass
class _Sentence:
    """One analysed sentence: its greedy translation, the attention maps of the teacher-forced pass, tick labels."""

    n: int  # 1-based sentence number
    structures: dict | None
    hyp: Any  # the greedy hypothesis (``.tokens``)
    res: Any  # the model's output with ``need_weights=True`` (``.attentions``)
    enc_outs: list  # the AttentionOutput of every encoder self-attention (forward hooks)
    src_pieces: list[str]
    src_labels: list[str]
    node_labels: list[str]  # words, then hypernodes (PhraseTransformer layers)
    tgt_labels: list[str]
    S: int  # source length in pieces, </s> included


def _choose_sentences(tr: Translator, texts: list[str], input_path: str | Path, wanted: int,
                      log) -> tuple[list[list[int]], list[int], list[int]]:
    """(encoded texts, the first ``wanted`` that fit the model's positions, 1-based numbers of longer lines skipped)."""

    # the first lines that fit the model's positions: a longer line is skipped (and said), not the whole job
    limit = tr.cfg.model.max_positions
    encoded = encode_sources(tr.src_vocab, texts)
    fits = [i for i, ids in enumerate(encoded) if len(ids) <= limit]
    too_long = [i + 1 for i, ids in enumerate(encoded[: (fits[wanted - 1] if len(fits) >= wanted else len(texts))])
                if len(ids) > limit]
    if not fits:
        raise UserError(f"{input_path}: every line is longer than the model's {limit} positions "
                        "(model.max_positions); give shorter sentences.")
    chosen = fits[:wanted]
    if too_long and log is not None:
        shown = ", ".join(map(str, too_long[:20])) + (", ..." if len(too_long) > 20 else "")
        log(f"analyze: {len(too_long)} line(s) longer than model.max_positions={limit} pieces skipped (the next "
            f"lines are analysed instead): line {shown}.")
    return encoded, chosen, too_long


def _new_run(tr: Translator, out: OutputDir, fig_cls: type, texts: list[str], chosen: list[int],
             drawn: int) -> _Run:
    """The run's state, with the roles of the model's layers (MG-SA, after MG-SA, mechanism)."""
    model = tr.model
    tag_names = {i: x for x, i in tr.label_ids.items()}
    enc_layers = list(getattr(model, "encoder_layers", []))
    mgsa_at = [layer.self_attn.memory_groups() is not None for layer in enc_layers]  # MG-SA's memories
    after_mgsa = [i > 0 and mgsa_at[i - 1] and not mgsa_at[i] for i in range(len(enc_layers))]
    mechanisms = [type(layer.self_attn).__name__ for layer in enc_layers]

    modules = {"encoder_self": [layer.self_attn for layer in enc_layers],
               "decoder_self": [layer.self_attn for layer in getattr(model, "decoder_layers", [])],
               "cross": [layer.cross_attn for layer in getattr(model, "decoder_layers", [])]}
    return _Run(tr=tr, out=out, fig_cls=fig_cls, texts=texts, chosen=chosen, drawn=drawn, tag_names=tag_names,
                enc_layers=enc_layers, mgsa_at=mgsa_at, after_mgsa=after_mgsa, mechanisms=mechanisms,
                modules=modules)


def _analyse_sentences(run: _Run, sources: list[list[int]], structs: list[dict | None], progress: bool) -> None:
    """Statistics of every chosen sentence, pictures of the first ``run.drawn`` (hooks removed even on an error)."""
    captured: list = []
    hooks = [layer.self_attn.register_forward_hook(lambda _m, _i, o: captured.append(o))
             for layer in run.enc_layers]
    bar = None
    if progress:
        bar = tqdm(total=len(run.chosen), desc="analyze", unit=" sent", mininterval=1.0)
    try:
        for n, (src_ids, structures) in enumerate(zip(sources, structs), start=1):
            if bar is not None:
                bar.update(1)
            s = _forward(run.tr, n, src_ids, structures, captured)
            _add_statistics(run, s)
            z = _add_syntax_gate(run, s)
            if n > run.drawn:  # statistics only past the pictures' sentences
                continue
            _draw_sentence(run, s, z)
    finally:
        for h in hooks:
            h.remove()
        if bar is not None:
            bar.close()


# --------------------------------------------------------------------------- per-sentence statistics


def _forward(tr: Translator, n: int, src_ids: list[int], structures: dict | None, captured: list) -> _Sentence:
    """Greedy translation of one sentence, then one teacher-forced pass over it that gives every attention map."""

    model, dev, dcfg = tr.model, tr.device, tr.cfg.decode
    src = torch.tensor([src_ids], dtype=torch.long, device=dev)
    mask = torch.ones_like(src, dtype=torch.bool)
    hyp = greedy_search(model, src, mask, max_len_a=dcfg.max_len_a, max_len_b=dcfg.max_len_b,
                        max_positions=tr.cfg.model.max_positions, structures=structures)[0][0]
    tgt_in = torch.tensor([[BOS] + hyp.tokens], dtype=torch.long, device=dev)
    captured.clear()
    with torch.no_grad():
        res = model(src, mask, tgt_in, structures, need_weights=True)
    enc_outs = list(captured)
    src_pieces = tr.src_vocab.pieces(src_ids[:-1]) + ["</s>"]
    src_labels = [_display(p) for p in src_pieces]
    node_labels = src_labels + _hypernode_labels(getattr(model, "encoder", None), structures, src_labels)
    tgt_labels = [_display(p) for p in tr.tgt_vocab.pieces(hyp.tokens)] + ["</s>"]
    return _Sentence(n=n, structures=structures, hyp=hyp, res=res, enc_outs=enc_outs, src_pieces=src_pieces,
                     src_labels=src_labels, node_labels=node_labels, tgt_labels=tgt_labels, S=len(src_labels))


def _add_statistics(run: _Run, s: _Sentence) -> None:
    """Add one sentence's entropies, locality shares, quadrant masses and MG-SA group entropies to the sums."""

    acc = run.acc
    for role, maps in (("encoder_self", s.res.attentions.get("encoder_self", [])),
                       ("decoder_self", s.res.attentions.get("decoder_self", [])),
                       ("cross", s.res.attentions.get("cross", []))):
        for li, w in enumerate(maps):
            w = w[0].float().cpu()  # (H, T, K): T token queries, then any phrase or hypernode queries
            lay = run.modules[role][li].quadrant_layout() if li < len(run.modules[role]) else None
            if lay is not None:  # token/phrase quadrants (phrase-based attentions, Tables 3-4)
                m = quadrant_mass(w, lay, w.shape[1])
                tot = run.quad.setdefault((role, li), dict.fromkeys(m, 0.0))
                for k, v in m.items():
                    tot[k] += v
            T = s.S if role == "encoder_self" else len(s.tgt_labels)  # the token queries
            ent = _entropy(w[:, :T]).mean(-1)  # (H,)
            acc.add((role, li, "entropy_per_head"), ent.tolist())
            if role != "cross":
                d, a = _locality(w[:, :T, :T])
                acc.add((role, li, "diagonal"), d)
                acc.add((role, li, "adjacent"), a)
    for li, o in enumerate(s.enc_outs):
        if run.mgsa_at[li] and "group_weights" in o.extras:
            for gi, gw in enumerate(o.extras["group_weights"]):
                acc.add(("encoder_self", li, f"group{gi}"), float(_entropy(gw[0].float().cpu()).mean()))


def _add_syntax_gate(run: _Run, s: _Sentence) -> list[float] | None:
    """SA-NMT: add one sentence's gate norms to the sums; its z_t per target position, or None without a gate."""
    gate = s.res.attentions.get("syntax_gate")  # SA-NMT eq. 23: z_t per target position (1, T)
    if gate is None:
        return None
    tgt_labels = s.tgt_labels
    z = gate[0].float().cpu().tolist()  # z[t]: the gate of the prediction of tgt_labels[t]
    run.gate_argmax[tgt_labels[int(np.argmax(z))]] = run.gate_argmax.get(tgt_labels[int(np.argmax(z))], 0) + 1
    for lab, v in zip(tgt_labels, z):
        run.gate_by_token.setdefault(lab, []).append(v)
    return z


# --------------------------------------------------------------------------- per-sentence pictures


def _draw_sentence(run: _Run, s: _Sentence, z: list[float] | None) -> None:
    """Every picture of one sentence, in the order they are written."""
    if z is not None:
        _draw_syntax_gate(run, s, z)
    _draw_encoder_self(run, s)
    _draw_mgsa_memories(run, s)
    _draw_phrase_transformer(run, s)
    _draw_rhe(run, s)
    _draw_quadrants(run, s)
    _draw_cross_last(run, s)


def _draw_syntax_gate(run: _Run, s: _Sentence, z: list[float]) -> None:
    """SA-NMT Fig. 6: the gate norm of every predicted target token."""
    n, tgt_labels = s.n, s.tgt_labels
    fig = run.fig_cls(figsize=(max(6.0, 0.45 * len(tgt_labels) + 1.5), 3.4))
    ax = fig.subplots()
    top = int(np.argmax(z))
    bars = ax.bar(range(len(z)), z, color=["C3" if i == top else "C0" for i in range(len(z))])
    ax.set_xticks(range(len(z)))
    ax.set_xticklabels(tgt_labels, rotation=60, ha="right", fontsize=8)
    for i, lab in enumerate(ax.get_xticklabels()):
        lab.set_fontweight("bold" if i == top else "normal")
    ax.set_ylim(min(z) * 0.98, max(z) * 1.01)
    ax.set_ylabel("z_t = ||sigmoid(W_gate h_t)||")
    ax.set_title(f"SA-NMT syntactic gate (eq. 23), sentence {n}; red/bold: the highest", fontsize=9)
    del bars
    fig.tight_layout()
    run.written.append(_save(fig, run.out, f"sent{n}_syntax_gate.png"))


def _finish(run: _Run, fig, title: str, top: float, name: str) -> None:
    """Title ``fig``, lay it out below the title (``top``: the fraction of the height left to the panels)
    and save it as ``name`` among the run's written files."""
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, top))
    run.written.append(_save(fig, run.out, name))


def _draw_encoder_self(run: _Run, s: _Sentence) -> None:
    """Encoder self-attention, every layer: one row per layer, a column per head and their mean."""
    n, node_labels, S = s.n, s.node_labels, s.S
    maps = [o.weights[0].float().cpu().numpy() for o in s.enc_outs if o.weights is not None]
    if not maps:
        return
    H = maps[0].shape[0]
    cell = 0.55 + 0.17 * max(m.shape[2] for m in maps)
    fig = run.fig_cls(figsize=((H + 1) * (cell + 0.9), len(maps) * (cell + 0.6) + 0.8))
    axes = fig.subplots(len(maps), H + 1, squeeze=False)
    for li, w in enumerate(maps):
        heads = run.enc_layers[li].self_attn.head_labels() or [""] * H
        kl = node_labels[: w.shape[2]]  # words, then hypernodes (PhraseTransformer layers)
        ql = node_labels[: w.shape[1]]
        color, frame, tag = "black", None, ""
        if run.mgsa_at[li]:
            color, tag = "tab:blue", " MG-SA"
        if run.after_mgsa[li]:
            color, frame, tag = "red", "red", " (after MG-SA, fn. 2)"
        show_x = li == len(maps) - 1 or len(kl) != S
        titles = [f"L{li + 1}{tag} h{h + 1}" + (f" [{heads[h]}]" if heads[h] else "") for h in range(H)]
        _heads_and_mean(fig, axes[li], w, kl, ql, titles, f"L{li + 1}{tag} mean of heads",
                        color=color, frame=frame, show_x=show_x)
    _finish(run, fig, f"Encoder self-attention, sentence {n}: {run.texts[run.chosen[n - 1]][:90]}", 0.98,
            f"sent{n}_encoder_self.png")


def _draw_mgsa_memories(run: _Run, s: _Sentence) -> None:
    """MG-SA heads over their own memories (words or phrases), one picture per MG-SA layer."""
    n, src_labels = s.n, s.src_labels
    for li, o in enumerate(s.enc_outs):
        if not (run.mgsa_at[li] and "group_weights" in o.extras):
            continue
        attn = run.enc_layers[li].self_attn
        panels = []
        for g, gw in zip(attn.memory_groups(), o.extras["group_weights"]):
            gw = gw[0].float().cpu().numpy()  # (H_g, T, M_g)
            if g.kind == "word":
                xl, name = src_labels, "word"
            else:
                xl = _phrase_labels(g, s.structures, s.src_pieces, gw.shape[2], run.tag_names)
                name = f"{g.n}-gram phrases" if g.kind == "ngram" else f"syntactic phrases, level {g.level}"
            panels += [(gw[h], xl, f"{name} (head {len(panels) + 1})") for h in range(gw.shape[0])]
        cols = min(2, len(panels))
        rows = math.ceil(len(panels) / cols)
        cell = 0.8 + 0.2 * s.S
        fig = run.fig_cls(figsize=(cols * (cell + 2.5), rows * (cell + 1.8) + 0.6))
        axes = fig.subplots(rows, cols, squeeze=False).reshape(-1)
        for k, (ax, (w, xl, title)) in enumerate(zip(axes, panels)):
            _heat(fig, ax, w, xl, src_labels, title, fontsize=8, show_y=k % cols == 0)
        for ax in axes[len(panels):]:
            ax.set_axis_off()
        _finish(run, fig, f"MG-SA layer {li + 1}: each head over its memory (words or phrases), sentence {n}",
                0.97, f"sent{n}_mgsa_layer{li + 1}_phrases.png")


def _draw_phrase_transformer(run: _Run, s: _Sentence) -> None:
    """PhraseTransformer layers: phase 1 over all nodes, phase 2 within phrases (Fig. 3 (a), (b))."""
    n, model = s.n, run.tr.model
    within = iter(s.res.attentions.get("encoder_within") or [])
    for li, o in enumerate(s.enc_outs):
        if run.mechanisms[li] != "PhraseTransformerAttention" or o.weights is None:
            continue
        p1 = o.weights[0].float().cpu().numpy()  # (H, L, L)
        phases = [(p1, "phase 1: all nodes")]
        if model.encoder.layers[li].self_attn.options.phase2:  # the encoder collects phase 2 of such layers
            phases.append((next(within)[0].float().cpu().numpy(), "phase 2: within phrases"))
        H, L = p1.shape[0], p1.shape[1]
        labels = s.node_labels[:L]
        cell = 0.55 + 0.17 * L
        fig = run.fig_cls(figsize=((H + 1) * (cell + 0.9), len(phases) * (cell + 0.7) + 0.8))
        axes = fig.subplots(len(phases), H + 1, squeeze=False)
        last = len(phases) - 1
        for row, (w, name) in enumerate(phases):
            _heads_and_mean(fig, axes[row], w, labels, labels, [f"L{li + 1} h{h + 1} {name}" for h in range(H)],
                            f"L{li + 1} {name}, mean of heads", show_x=row == last, fontsize=7)
        _finish(run, fig, f"PhraseTransformer layer {li + 1}, sentence {n}: words then hypernodes", 0.96,
                f"sent{n}_phrase_transformer_layer{li + 1}.png")


def _draw_rhe(run: _Run, s: _Sentence) -> None:
    """RHE layers: every head before (plain) and after enlivening (RHE Fig. 5 (a)/(b), (e))."""
    n, src_labels = s.n, s.src_labels
    for li, o in enumerate(s.enc_outs):
        if "plain_weights" not in o.extras or o.weights is None:
            continue
        plain = o.extras["plain_weights"][0].float().cpu().numpy()  # (H, S, S)
        after = o.weights[0].float().cpu().numpy()
        imp = o.extras["head_important"][0].tolist()
        syn = o.extras["syn_attn"][0].tolist()
        conf = o.extras["h_conf"][0].tolist()
        H = plain.shape[0]
        cell = 0.55 + 0.17 * s.S
        fig = run.fig_cls(figsize=(H * (cell + 0.9), 2 * (cell + 0.7) + 0.8))
        axes = fig.subplots(2, H, squeeze=False)
        for h in range(H):
            role = "important" if imp[h] else "REDUNDANT"
            info = f"Syn_attn {syn[h]:.2f}, h_conf {conf[h]:.2f}"
            _heat(fig, axes[0][h], plain[h], src_labels, src_labels, f"L{li + 1} h{h + 1} plain ({role})\n{info}",
                  color="black" if imp[h] else "red", show_x=False, show_y=h == 0, fontsize=8)
            title = "kept (important)" if imp[h] else "after enlivening"
            _heat(fig, axes[1][h], after[h], src_labels, src_labels, f"L{li + 1} h{h + 1} {title}",
                  color="black" if imp[h] else "tab:green", show_y=h == 0, fontsize=8)
        _finish(run, fig, f"RHE layer {li + 1}, sentence {n}: each head's plain attention (top) and what the "
                f"layer used (bottom)", 0.96, f"sent{n}_rhe_layer{li + 1}.png")


def _draw_quadrants(run: _Run, s: _Sentence) -> None:
    """Token/phrase quadrants of every phrase-based attention layer (Figs. 4-6), one picture per role."""
    n, src_labels = s.n, s.src_labels
    tgt_in_labels = ["<s>"] + [_display(p) for p in run.tr.tgt_vocab.pieces(s.hyp.tokens)]
    for role, qlab, klab in (("encoder_self", src_labels, src_labels), ("decoder_self", tgt_in_labels, tgt_in_labels),
                             ("cross", tgt_in_labels, src_labels)):
        maps = s.res.attentions.get(role) or []
        layers = [(li, run.modules[role][li].quadrant_layout() if li < len(run.modules[role]) else None, w)
                  for li, w in enumerate(maps)]
        layers = [(li, lay, w) for li, lay, w in layers if lay is not None]
        if layers:
            run.written.append(_quadrant_figure(fig_cls=run.fig_cls, layers=layers, qlab=qlab, klab=klab, role=role,
                                                title=f"sentence {n}: {run.texts[run.chosen[n - 1]][:80]}",
                                                out=run.out, name=f"sent{n}_{role}_quadrants.png"))


def _draw_cross_last(run: _Run, s: _Sentence) -> None:
    """Cross-attention of the last decoder layer: rows the produced target pieces, columns the source pieces."""
    n, src_labels, tgt_labels = s.n, s.src_labels, s.tgt_labels
    cross = s.res.attentions.get("cross") or []
    if not cross:
        return
    w = cross[-1][0].float().cpu().numpy()  # (H, T, S')
    H, T = w.shape[0], w.shape[1]
    kl = src_labels + [f"+{k}" for k in range(w.shape[2] - s.S)]
    fig = run.fig_cls(figsize=((H + 1) * (0.55 + 0.17 * len(kl) + 0.9), 0.55 + 0.17 * T + 1.6))
    axes = fig.subplots(1, H + 1, squeeze=False)[0]
    _heads_and_mean(fig, axes, w, kl, tgt_labels, [f"cross L{len(cross)} h{h + 1}" for h in range(H)],
                    f"cross L{len(cross)} mean of heads")
    hyp_text = run.tr.tgt_vocab.decode(s.hyp.tokens)
    _finish(run, fig, f"Last decoder layer cross-attention, sentence {n} -> {hyp_text[:90]}", 0.94,
            f"sent{n}_cross_last.png")


# --------------------------------------------------------------------------- reports


def _layer_entry(run: _Run, role: str, li: int) -> dict | None:
    """The ``attention_stats.json`` entry of layer ``li`` of ``role`` (None: no statistics)."""

    acc = run.acc
    per_head = acc.mean((role, li, "entropy_per_head"))
    if per_head is None:
        return None
    entry: dict = {"layer": li + 1, "entropy": float(np.mean(per_head)), "entropy_per_head": per_head}
    if role != "cross":
        d, a = acc.mean((role, li, "diagonal")), acc.mean((role, li, "adjacent"))
        entry.update(diagonal=d, adjacent=a, local=d + a)
    if (role, li) in run.quad:
        entry["phrasal"] = run.modules[role][li].quadrant_layout()["kind"]
        entry["quadrants"] = quadrant_percentages(run.quad[(role, li)])
        entry["quadrant_rows"] = {k: run.quad[(role, li)][k] for k in ("rows_token", "rows_phrase")}
    if role == "encoder_self":
        entry["mechanism"] = run.mechanisms[li]
        entry["mgsa"] = run.mgsa_at[li]
        entry["after_mgsa"] = run.after_mgsa[li]
        if run.mgsa_at[li]:
            attn = run.enc_layers[li].self_attn
            entry["groups"] = [
                {"kind": g.kind, "heads": g.heads, "n": g.n, "level": g.level,
                 "entropy_over_own_memory": acc.mean(("encoder_self", li, f"group{gi}"))}
                for gi, g in enumerate(attn.memory_groups())]
    return entry


def _syntax_gate_stats(run: _Run) -> dict:
    """SA-NMT section 5.3: where the decoder lets source syntax in (the ``syntax_gate`` statistics)."""
    gate_by_token = run.gate_by_token
    means = {k: float(np.mean(v)) for k, v in gate_by_token.items()}
    frequent = {k: m for k, m in means.items() if len(gate_by_token[k]) >= 5}
    ranked = sorted(frequent.items(), key=lambda kv: -kv[1])
    return {
        "definition": "z_t = ||sigmoid(W_gate h_t)||_2 (eq. 23) when predicting each target token",
        "mean": float(np.mean([x for v in gate_by_token.values() for x in v])),
        "eos_mean": means.get("</s>"),
        "highest_in_sentence": dict(sorted(run.gate_argmax.items(), key=lambda kv: -kv[1])[:10]),
        "highest_mean_tokens": dict(ranked[:10]),
        "lowest_mean_tokens": dict(ranked[-10:][::-1]),
        "min_count_for_means": 5,
    }


def _write_reports(run: _Run, checkpoint: str | Path, input_path: str | Path, too_long: list[int]) -> None:
    """Write ``attention_stats.json`` and, for phrase-based attentions, ``phrase_quadrants.md``."""

    model = run.tr.model
    stats: dict = {"checkpoint": str(checkpoint), "input": str(input_path), "sentences": len(run.chosen),
                   "skipped_too_long": too_long,  # non-empty lines (1-based) over model.max_positions, skipped
                   "drawn_sentences": run.drawn, "entropy_unit": "nats"}
    for role, n_layers in (("encoder_self", len(run.enc_layers)),
                           ("decoder_self", len(getattr(model, "decoder_layers", []))),
                           ("cross", len(getattr(model, "decoder_layers", [])))):
        entries = (_layer_entry(run, role, li) for li in range(n_layers))
        stats[role] = [entry for entry in entries if entry is not None]
    if run.gate_by_token:  # SA-NMT section 5.3: where the decoder lets source syntax in
        stats["syntax_gate"] = _syntax_gate_stats(run)
    run.written.append(run.out.write_text("attention_stats.json", json.dumps(stats, indent=2)))
    tables = [t for t in (quadrant_table(stats, r) for r in ("encoder_self", "decoder_self", "cross")) if t]
    if tables:
        run.written.append(run.out.write_text(
            "phrase_quadrants.md",
            f"# Attention mass per token/phrase quadrant (%), {len(run.chosen)} sentences of `{input_path}`\n\n"
            f"Checkpoint `{checkpoint}`. Each real query row sums to 1 (see `structnmt.analysis.phrasal_stats`): "
            "the four quadrants are shares of the total mass; the last two columns are the share of each query "
            "type's mass that goes to phrase keys.\n\n" + "\n\n".join(tables) + "\n"))


# --------------------------------------------------------------------------- maps as numbers (compare --html)


@dataclass
class SentenceMaps:
    """One sentence's attention maps under one checkpoint, as numbers (``structnmt compare --html`` draws them):
    steps 1-2 of the module docstring, the greedy translation teacher-forced.

    ``encoder_self[l]``: (H, S, K) the S source pieces' weights (``</s>`` included) over layer l's K keys (the
    pieces, then any hypernodes or phrases: ``key_labels[l]``); ``cross[l]``: (H, T, K) the T produced target
    pieces' (``</s>`` included) weights over decoder layer l's keys, the source pieces first."""

    line: int  # 0-based index into the texts
    translation: str  # the greedy translation the maps are over
    src_labels: list[str]
    tgt_labels: list[str]
    encoder_self: list[np.ndarray]
    key_labels: list[list[str]]  # per encoder layer
    cross: list[np.ndarray]
    cross_key_labels: list[list[str]]  # per decoder layer
    head_labels: list[list[str]]  # per encoder layer: each head's role ("" without one)


def _labels_for(labels: list[str], K: int) -> list[str]:
    """``labels`` cut or continued (``+1``, ``+2``, ...) to K keys."""
    return labels[:K] + [f"+{k}" for k in range(1, K - len(labels) + 1)]


def sentence_maps(tr: Translator, texts: list[str], lines: list[int]) -> list[SentenceMaps | None]:
    """The attention maps of ``texts[i]`` for every i of ``lines``; None for a line longer than the model's
    positions (``model.max_positions``), which is left out, not cut."""

    encoded = encode_sources(tr.src_vocab, [texts[i] for i in lines])
    fits = [k for k, ids in enumerate(encoded) if len(ids) <= tr.cfg.model.max_positions]
    structs = _structures_for(tr, texts, [lines[k] for k in fits], [len(encoded[k]) for k in fits])
    enc_layers = list(getattr(tr.model, "encoder_layers", []))
    out: list[SentenceMaps | None] = [None] * len(lines)
    for k, structures in zip(fits, structs):
        s = _forward(tr, k + 1, encoded[k], structures, [])
        enc = [w[0, :, : s.S].float().cpu().numpy() for w in s.res.attentions.get("encoder_self", [])]
        cross = [w[0].float().cpu().numpy() for w in s.res.attentions.get("cross", [])]
        heads = [(lay.self_attn.head_labels() or [""] * w.shape[0]) for lay, w in zip(enc_layers, enc)]
        out[k] = SentenceMaps(
            line=lines[k], translation=tr.tgt_vocab.decode(s.hyp.tokens), src_labels=s.src_labels,
            tgt_labels=s.tgt_labels, encoder_self=enc, key_labels=[_labels_for(s.node_labels, w.shape[2]) for w in enc],
            cross=cross, cross_key_labels=[_labels_for(s.src_labels, w.shape[2]) for w in cross],
            head_labels=heads + [[""] * w.shape[0] for w in enc[len(heads):]])
    return out


# --------------------------------------------------------------------------- main entry


def run_analyze(*, checkpoint: str | Path, input_path: str | Path, out_dir: str | Path, sentences: int = 3,
                stats_sentences: int = 0, parse_dependency: str | None = None,
                parse_constituency: str | None = None, progress: bool = False, log=None) -> list[Path]:
    """Write attention heatmaps for the first ``sentences`` non-empty lines of ``input_path``
    and ``attention_stats.json`` (and ``phrase_quadrants.md``) over the first
    ``max(sentences, stats_sentences)``; returns the written paths (see the module docstring)."""
    from matplotlib.figure import Figure


    overrides = {k: v for k, v in (("dependency_file", parse_dependency),
                                   ("constituency_file", parse_constituency)) if v}
    texts = _read_texts(input_path)  # the input is checked before the model is loaded
    if not texts:
        raise UserError(f"{input_path}: no non-empty lines to analyse; give a file with at least one sentence.")
    # the report directory is checked before the model is loaded; it is made with the first file
    out = OutputDir(out_dir, "analyze", expect=("attention_stats.json", "phrase_quadrants.md"))
    tr = Translator(checkpoint, parser_overrides=overrides)
    encoded, chosen, too_long = _choose_sentences(tr, texts, input_path, max(sentences, stats_sentences, 1), log)
    drawn = min(max(sentences, 0), len(chosen))
    sources = [encoded[i] for i in chosen]
    structs = _structures_for(tr, texts, chosen, [len(s) for s in sources])
    run = _new_run(tr, out, Figure, texts, chosen, drawn)
    _analyse_sentences(run, sources, structs, progress)
    _write_reports(run, checkpoint, input_path, too_long)
    # an earlier analyze here drew other sentences (or a model with other layers): its pictures go, so the
    # directory never mixes two runs'; a file of the user's is never touched (OutputDir)
    out.remove_earlier(("sent*.png", "phrase_quadrants.md"), run.written)
    return run.written
