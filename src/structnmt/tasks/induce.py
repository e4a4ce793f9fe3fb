"""Tree induction from a trained encoder and its evaluation (SA-NMT §6):
``structnmt induce --checkpoint CKPT --conllu FILE --out DIR``.

1. **Input**: the sentences of a CoNLL-U file, as its syntactic words joined by single
   spaces (multi-word tokens such as "don't" = "do" + "n't" are read as their words, the
   units UD's heads refer to; empty nodes are skipped). Gold heads and UPOS are used for
   evaluation when the file has them (a file of IDs and forms only is parsed, not scored).
2. **Arc scores**: the checkpoint's encoder is run on the pieces of that text. The RNN
   family with ``model.rnn.syntax: sa | fa`` gives its head-selection scores phi (eq. 7);
   a Transformer with a ``structured`` layer gives that layer's phi (``--head``: which
   structured head, default 0); a plain Transformer (flat attention) gives a layer's
   attention weights (``--layer``, ``--head``): word j's weight on i as the score of i
   heading j, j's weight on itself as its root score. ``--scores phi`` (default), ``beta``
   (the marginals / weights) or ``log_beta``.
3. **Collapse** (eq. 24): the pieces u..v of word k become one row and one column, by
   summing rows and columns over the word's pieces (the block of the word with itself,
   summed, is its root score); the EOS piece is dropped first.
4. **Extraction**: the maximum spanning arborescence with exactly one root
   (Chu-Liu-Edmonds with root reweighting: every root arc is lowered by a constant larger
   than the spread of all tree scores, so the best tree uses one root arc, and among the
   single-root trees the order is unchanged).
5. **Output**: ``DIR/<file stem>.induced.conllu`` (one tree per input sentence, in
   order; FORM and UPOS as given, HEAD induced, DEPREL ``dep``) and, with gold heads,
   ``DIR/induce.json`` / ``induce.md``: directed and undirected attachment accuracy with
   punctuation removed — the gold-PUNCT words are taken out of the sentence, the model's
   tree is extracted over the remaining words (their rows and columns of the collapsed
   scores) and the baselines are built on them; the root arc counts — the left- and
   right-branching baselines (L: each word's head is its right neighbour, the last word
   the root; R: its left neighbour, the first the root),
   and Table 4's production percentages P(dependent UPOS | head UPOS) for gold, L and
   the model. Sentences that cannot be encoded (longer than the model's positions, or
   whose words the pieces do not align with) get the right-branching tree, are named in
   the report and counted, never dropped; the model's scores over the encoded sentences
   only are reported beside.

   ``--punct reduce`` (default) is the protocol above, the one whose L/R baselines come
   within a point of the paper's (docs/sa_nmt.md); its consequences: a word whose gold head
   is punctuation cannot be attached correctly (counted as ``headed_by_punctuation``), and
   the scored trees (over the words without punctuation) are not the ones written to
   ``.induced.conllu`` (over the whole sentence). ``--punct skip`` is the supervised-parsing
   convention: one tree over the whole sentence (the written one), the baselines over the
   whole sentence, and only gold-PUNCT *dependents* left out of the scores (a punctuation
   head stays a valid answer).
   Sentences without UPOS (a ``_`` column) keep their punctuation; they are counted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from ..analysis.trees import draw_head_weights, draw_tree
from ..data.dataset import encode_sources
from ..decode.translate import Translator
from ..errors import UserError
from ..evaluate.correlation import spearman
from ..fileio.corpus import file_digest
from ..fileio.files import (
    OutputDir,
    atomic_write_text,
    check_output_file,
    record_output_file,
    same_file,
)
from ..syntax.align import AlignmentError, align, find_word_spans, piece_char_spans
from ..syntax.io import TreeFormatError, read_conllu_sentences

if TYPE_CHECKING:
    from ..config import Config
    from ..decode.translate import Translator
    from ..fileio.files import OutputDir

SCORES = ("phi", "beta", "log_beta")
PUNCT_PROTOCOLS = ("reduce", "skip")


@dataclass
class Sentence:
    words: list[str]
    heads: list[int] | None = None  # gold, 1-based, 0 = root
    upos: list[str] | None = None
    line: int = 0
    comments: list[str] = field(default_factory=list)


def read_words(path: str | Path) -> list[Sentence]:
    """Words (and gold heads/UPOS when present) of every sentence of a CoNLL-U file, through the one
    CoNLL-U validator (:func:`structnmt.syntax.io.read_conllu_sentences`): a gold tree with a cycle,
    two roots, a head out of range or a HEAD that is not an integer is refused, naming the file and
    line; a sentence whose HEAD column is all ``_`` is read as words to parse."""

    out = []
    for cs in read_conllu_sentences(path, heads_optional=True):
        upos = None if all(u == "_" for u in cs.upos) else list(cs.upos)
        heads = None if cs.tree is None else list(cs.tree.heads)
        out.append(Sentence(list(cs.words), heads, upos, line=cs.start_line, comments=list(cs.comments)))
    return out


def check_all_or_none_gold(sents: list[Sentence], path: str | Path) -> None:
    """``induce`` scores a file whose every sentence has gold heads, and only parses one whose sentences have
    none; a file that mixes them would be scored on no sentence: refused, naming its first sentence without
    heads."""

    gold = sum(s.heads is not None for s in sents)
    if 0 < gold < len(sents):
        odd = next(s for s in sents if s.heads is None)
        raise TreeFormatError(str(path), odd.line, f"a sentence without heads (HEAD all '_') in a file whose other "
                              f"{gold} sentence(s) have gold heads",
                              "give every sentence its gold heads (to score the induced trees) or none (to parse "
                              "only)")


# --------------------------------------------------------------------------- extraction
def collapse(scores: np.ndarray, word_of_piece: np.ndarray) -> np.ndarray:
    """Eq. 24: (P, P) piece scores [head, dependent] -> (W, W) word scores, summing the rows
    and the columns of each word's pieces (its block with itself, summed, on the diagonal)."""
    w = np.asarray(word_of_piece)
    W = int(w.max()) + 1
    rows = np.zeros((W, scores.shape[1]))
    np.add.at(rows, w, scores)
    out = np.zeros((W, W))
    np.add.at(out.T, w, rows.T)
    return out


def _cle(s: np.ndarray) -> np.ndarray:
    """Chu-Liu-Edmonds on s (N, N) [head, dependent], node 0 the root, s[:, 0] unused:
    heads (N,) of the maximum spanning arborescence (heads[0] = -1)."""
    N = s.shape[0]
    s = s.copy()
    np.fill_diagonal(s, -np.inf)
    s[:, 0] = -np.inf
    heads = s.argmax(axis=0)
    heads[0] = -1
    # find a cycle
    for start in range(1, N):
        seen, x = {}, start
        while x > 0 and x not in seen:
            seen[x] = True
            x = heads[x]
        if x > 0 and x == start or (x > 0 and x in seen):
            cycle = [x]
            y = heads[x]
            while y != x:
                cycle.append(y)
                y = heads[y]
            break
    else:
        return heads
    cyc = set(cycle)
    rest = [v for v in range(N) if v not in cyc]  # rest[0] == 0
    c = len(rest)  # the contracted node's index
    idx = {v: i for i, v in enumerate(rest)}
    cyc_score = sum(s[heads[v], v] for v in cycle)
    t = np.full((c + 1, c + 1), -np.inf)
    enter_from: dict[int, int] = {}  # contracted head u -> the cycle node it enters
    leave_to: dict[int, int] = {}  # outside dependent v -> the cycle node it leaves from
    for u in rest:
        for v in rest:
            if u != v:
                t[idx[u], idx[v]] = s[u, v]
        # arcs into the cycle: best entry point
        gains = [(s[u, v] - s[heads[v], v], v) for v in cycle]
        g, v_best = max(gains)
        t[idx[u], c] = cyc_score + g
        enter_from[u] = v_best
    for v in rest:
        if v == 0:
            continue
        outs = [(s[u, v], u) for u in cycle]
        sc, u_best = max(outs)
        t[c, idx[v]] = sc
        leave_to[v] = u_best
    sub = _cle(t)
    out = heads.copy()
    for v in rest[1:]:
        h = sub[idx[v]]
        out[v] = leave_to[v] if h == c else rest[h]
    h = sub[c]
    u = rest[h]
    entry = enter_from[u]
    for v in cycle:
        out[v] = heads[v]
    out[entry] = u
    return out


def single_root_tree(scores: np.ndarray) -> list[int]:
    """(W, W) word scores [head, dependent] with root scores on the diagonal -> heads
    (1-based, 0 = root) of the best tree with exactly one root (root reweighting)."""
    W = scores.shape[0]
    finite = scores[np.isfinite(scores)]
    spread = float(finite.max() - finite.min()) if finite.size else 0.0
    big = (W + 1) * (spread + 1.0)
    s = np.full((W + 1, W + 1), -np.inf)
    s[1:, 1:] = scores
    np.fill_diagonal(s, -np.inf)
    s[0, 1:] = np.diag(scores) - big  # every tree pays `big` once per root arc
    heads = _cle(s)
    return [int(h) for h in heads[1:]]


def branching(n: int, kind: str) -> list[int]:
    """L: each word headed by its right neighbour (last word the root); R: by its left (first the root)."""
    if kind == "L":
        return [i + 2 for i in range(n - 1)] + [0]
    return [0] + [i + 1 for i in range(n - 1)]


# --------------------------------------------------------------------------- evaluation
@dataclass
class EvalView:
    """A sentence with its gold-PUNCT words removed: what is scored."""

    keep: list[int]  # original 0-based indices of the kept words
    heads: list[int]  # gold heads over the kept words (1-based, 0 = root, -1 = headed by a removed word)
    upos: list[str]


def eval_view(s: Sentence) -> EvalView:
    keep = [i for i, u in enumerate(s.upos or ["X"] * len(s.words)) if u != "PUNCT"]
    new = {old: k + 1 for k, old in enumerate(keep)}
    heads = [0 if s.heads[i] == 0 else new.get(s.heads[i] - 1, -1) for i in keep]
    return EvalView(keep, heads, [(s.upos or ["X"] * len(s.words))[i] for i in keep])


def full_view(s: Sentence) -> EvalView:
    """The whole sentence (``--punct skip``): every word kept, gold heads as they are."""
    n = len(s.words)
    return EvalView(list(range(n)), list(s.heads), list(s.upos or ["X"] * n))


def attachment(pred: list[list[int]], gold: list[EvalView], skip_punct: bool = False) -> dict:
    """Directed / undirected attachment accuracy over the kept words, the root arc counted
    (undirected: the arc h-d is in the gold tree in either direction, or both say root);
    ``skip_punct``: gold-PUNCT dependents are not scored (``--punct skip``)."""
    total = directed = undirected = 0
    for p, g in zip(pred, gold):
        for d, (h, gh) in enumerate(zip(p, g.heads)):
            if skip_punct and g.upos[d] == "PUNCT":
                continue
            total += 1
            directed += h == gh
            undirected += h == gh or (h > 0 and g.heads[h - 1] == d + 1)
    return {"DA": 100 * directed / max(total, 1), "UA": 100 * undirected / max(total, 1), "scored": total}


def productions(pred: list[list[int]], gold: list[EvalView], skip_punct: bool = False) -> dict[str, dict[str, float]]:
    """Table 4: P(dependent UPOS | head UPOS) in %, from the heads ``pred`` and gold UPOS
    (``skip_punct``: gold-PUNCT dependents left out)."""
    counts: dict[str, Counter] = {}
    for p, g in zip(pred, gold):
        for d, h in enumerate(p):
            if h > 0 and not (skip_punct and g.upos[d] == "PUNCT"):
                counts.setdefault(g.upos[h - 1], Counter())[g.upos[d]] += 1
    return {h: {d: 100 * n / sum(c.values()) for d, n in c.most_common()} for h, c in counts.items()}


# --------------------------------------------------------------------------- the model
def tree_shape(trees: list[list[int]], min_words: int = 3) -> dict:
    """How degenerate a set of trees is (heads 1-based, 0 = root), over the trees of at least
    ``min_words`` words: ``star`` % of trees where one word heads every other word (the
    collapse of docs/sa_nmt.md), ``top_head_share`` the mean share of a tree's non-root words
    headed by its most frequent head (1 for a star; L and R branching give 1/(n-1)),
    ``root_first`` / ``root_last`` % of trees rooted at the first / last word; ``trees`` counted."""
    big = [t for t in trees if len(t) >= min_words]
    if not big:
        return {"trees": 0, "star": 0.0, "top_head_share": 0.0, "root_first": 0.0, "root_last": 0.0}
    star = shares = first = last = 0.0
    for t in big:
        root = t.index(0) + 1 if 0 in t else 0
        heads = [h for h in t if h != 0]
        top = Counter(heads).most_common(1)[0][1] if heads else 0
        star += len(heads) == len(t) - 1 and top == len(heads)  # one root, and one head for all the others
        shares += top / max(len(heads), 1)
        first += root == 1
        last += root == len(t)
    n = len(big)
    return {"trees": n, "star": 100 * star / n, "top_head_share": shares / n, "root_first": 100 * first / n,
            "root_last": 100 * last / n}


def _arc_scores(tr, src_ids: list[int], how: str, layer: int, head: int) -> np.ndarray:
    """(P, P) piece-level scores [head, dependent] of the sentence (EOS dropped)."""
    model, dev = tr.model, tr.device
    src = torch.tensor([src_ids], dtype=torch.long, device=dev)
    mask = torch.ones_like(src, dtype=torch.bool)
    with torch.no_grad():
        if tr.cfg.model.family == "rnn":
            if tr.cfg.model.rnn.syntax == "none":
                raise UserError("this RNN checkpoint has no syntactic attention (model.rnn.syntax: none); "
                                "induce trees from an sa or fa model.")
            enc = model.encode(src, mask, need_weights=True)
            phi, beta = enc.attentions["arc_scores"][0][0], enc.attentions["arcs"][0][0]
        else:
            layers = list(model.encoder_layers)
            structured = [i for i, lay in enumerate(layers) if lay.self_attn.tree_heads > 0]
            captured: list = []
            if not 0 <= layer < len(layers):
                raise UserError(f"--layer {layer}: the encoder has layers 0..{len(layers) - 1}.")
            if structured and layer not in structured:
                # --layer left at its default: the first structured layer
                if layer != 0:
                    raise UserError(f"--layer {layer} has no structured attention; the structured layers are "
                                    f"{', '.join(map(str, structured))}.")
                layer = structured[0]
            li = layer
            n_heads = (layers[li].self_attn.tree_heads if structured else layers[li].self_attn.heads)
            if not 0 <= head < n_heads:
                raise UserError(f"--head {head}: layer {li} has {'structured ' if structured else ''}heads "
                                f"0..{n_heads - 1}.")
            hook = layers[li].self_attn.register_forward_hook(lambda _m, _i, o: captured.append(o))
            try:
                model.encode(src, mask, {}, need_weights=True)
            finally:
                hook.remove()
            out = captured[0]
            if structured:
                phi, beta = out.extras["arc_scores"][0, head], out.extras["arcs"][0, head]
            else:  # flat attention: query j's weight on key i = score of i heading j
                beta = out.weights[0, head].transpose(0, 1)
                phi = torch.log(beta.clamp_min(1e-30))
    P = len(src_ids) - 1  # without EOS
    m = {"phi": phi, "beta": beta, "log_beta": torch.log(beta.clamp_min(1e-30))}[how]
    return m[:P, :P].double().cpu().numpy()


def induces_trees(cfg: Config) -> bool:
    """Whether a model induces trees (SA-NMT's structured or flat attention in the RNN, a structured encoder
    layer in a Transformer): the models whose trees of the blind CoNLL-U files are kept, and whose trees
    ``compare --html`` draws."""
    m = cfg.model
    if m.family == "rnn":
        return m.rnn.syntax != "none"
    plan = m.attention
    return plan.encoder_self.name == "structured" or any(
        key.startswith("encoder_self.") and spec.name == "structured" for key, spec in plan.overrides.items())


def induced_heads(tr, words: list[str]) -> list[int] | None:
    """The tree ``run_induce`` would give one sentence (the default scores, layer and head: steps 2-4 of the
    module docstring): heads, 1-based, 0 = the root; None when the sentence cannot be encoded (longer than
    the model's positions, or a piece spanning two words)."""

    text = " ".join(words)
    ids = encode_sources(tr.src_vocab, [text])[0]
    try:
        word_of_piece = _word_of_piece(tr, Sentence(words), text, ids, tr.cfg.model.max_positions)
    except AlignmentError:
        return None
    return single_root_tree(collapse(_arc_scores(tr, ids, "phi", 0, 0), word_of_piece))


def run_induce(*, checkpoint: str | Path, conllu: str | Path, out_dir: str | Path, scores: str = "phi",
               layer: int = 0, head: int = 0, punct: str = "reduce", progress: bool = False, draw: int = 0,
               draw_max_words: int = 25) -> list[Path]:
    """Induce, write and score trees (see the module docstring). ``draw``: pictures of the
    first ``draw`` encoded sentences of 3..``draw_max_words`` words (Figs. 4 and 5,
    :mod:`structnmt.analysis.trees`): ``sent{i}_heads.png`` (beta over head words) and
    ``sent{i}_tree.png`` (the written tree, over the gold one), ``i`` the sentence's number."""
    if scores not in SCORES:
        raise UserError(f"--scores {scores}: use one of {', '.join(SCORES)}.")
    if punct not in PUNCT_PROTOCOLS:
        raise UserError(f"--punct {punct}: use one of {', '.join(PUNCT_PROTOCOLS)}.")
    sents = read_words(conllu)  # the input is checked before the model is loaded
    check_all_or_none_gold(sents, conllu)
    if not sents:
        raise UserError(f"{conllu}: no sentences; give a CoNLL-U file with at least one sentence.")
    stem, out = _induce_output(conllu, out_dir, sents, draw, draw_max_words)
    tr = _load_translator(checkpoint, layer, head)
    ind = _induce_trees(tr, sents, scores, layer, head, progress=progress, draw=draw, draw_max_words=draw_max_words)
    pred, word_scores = ind.pred, ind.word_scores
    written = [_write_conllu(out, f"{stem}.induced.conllu", sents, pred)]
    written += _draw_pictures(out, sents, pred, ind.drawn)
    report = {"checkpoint": str(checkpoint), "input": str(conllu), "input_sha256": _sha256(conllu),
              "scores": scores, "punct": punct, "sentences": len(sents), "not_encoded": [{"line": ln, "why": why} for ln, why in ind.failed],
              "shape": tree_shape([p for p, ws in zip(pred, word_scores) if ws is not None])}
    if all(s.heads is not None for s in sents):
        report.update(_gold_scores(sents, pred, word_scores, punct))
        written += _write_report(out, report)
    else:
        written.append(out.write_text("induce.json", json.dumps(report, indent=1)))
    out.remove_earlier(("*.induced.conllu", "induce.md", "sent*_heads.png", "sent*_tree.png"), written)
    return written


def _induce_output(conllu: str | Path, out_dir: str | Path, sents: list[Sentence], draw: int,
                   draw_max_words: int) -> tuple[str, OutputDir]:
    """The stem of the written trees' file name, and the checked output directory expecting every file of the run."""

    stem = Path(str(conllu)).name.replace(".gz", "").replace(".conllu", "")
    # the pictures' names too (the first `draw` sentences of a drawable length), before any work
    pictures = [i for i, s in enumerate(sents) if 3 <= len(s.words) <= draw_max_words][:draw]
    out = OutputDir(out_dir, "induce", expect=(f"{stem}.induced.conllu", "induce.json", "induce.md",
                                               *(f"sent{i + 1}_{kind}.png" for i in pictures
                                                 for kind in ("heads", "tree"))))
    return stem, out


def _load_translator(checkpoint: str | Path, layer: int, head: int) -> Translator:
    """The checkpoint's :class:`Translator`; an RNN with ``--layer`` / ``--head`` is refused."""

    tr = Translator(checkpoint)
    if tr.src_vocab.moses:
        raise UserError(f"{checkpoint}: trained on Moses-tokenized text (prepare --moses), whose pieces cannot be "
                        "aligned to the treebank's words by their characters; induce trees with a model trained "
                        "without --moses.")
    if tr.cfg.model.family == "rnn" and (layer or head):
        raise UserError(f"--layer {layer} --head {head}: {checkpoint} is an RNN, whose one arc scorer gives the trees; "
                        "--layer and --head select a Transformer layer's attention, drop them.")
    return tr


@dataclass
class _Induced:
    """The trees of an induce run's sentences, in order, and what came with them."""

    pred: list[list[int]] = field(default_factory=list)  # written heads (1-based, 0 = root)
    word_scores: list[np.ndarray | None] = field(default_factory=list)  # (W, W) collapsed scores; None: not encoded
    failed: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of the sentences not encoded
    drawn: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (sentence index, word-level beta) to draw


def _induce_trees(tr, sents: list[Sentence], scores: str, layer: int, head: int, *, progress: bool, draw: int,
                  draw_max_words: int) -> _Induced:
    """Eqs. 7 and 24, then extraction: every sentence's tree; one that cannot be encoded gets the
    right-branching tree and is listed in ``failed``."""

    texts = [" ".join(s.words) for s in sents]
    sources = encode_sources(tr.src_vocab, texts)
    limit = tr.cfg.model.max_positions
    res = _Induced()
    it = range(len(sents))
    if progress:
        it = tqdm(it, desc="induce", unit=" sent", mininterval=1.0)
    for i in it:
        s, text, ids = sents[i], texts[i], sources[i]
        try:
            word_of_piece = _word_of_piece(tr, s, text, ids, limit)
            ws = collapse(_arc_scores(tr, ids, scores, layer, head), word_of_piece)
            res.pred.append(single_root_tree(ws))
            res.word_scores.append(ws)
            if len(res.drawn) < draw and 3 <= len(s.words) <= draw_max_words:
                res.drawn.append((i, collapse(_arc_scores(tr, ids, "beta", layer, head), word_of_piece)
                                  / np.bincount(np.asarray(word_of_piece))[None, :]))
        except AlignmentError as err:
            res.failed.append((s.line, str(err)))
            res.pred.append(branching(len(s.words), "R"))
            res.word_scores.append(None)
    return res


def _word_of_piece(tr, s: Sentence, text: str, ids: list[int], limit: int) -> np.ndarray:
    """The word index of every piece of ``text`` (the sentence's words joined by spaces);
    AlignmentError when the sentence cannot be encoded."""

    if len(ids) > limit:
        raise AlignmentError(f"{len(ids)} pieces, over model.max_positions={limit}")
    read = tr.src_vocab.normalize([text])[0]  # what the model read (lowercased for a --lowercase model)
    if len(read) != len(text):
        raise AlignmentError("lowercasing changes its length, so its pieces cannot be placed in its words")
    spans = tr.src_vocab.encode_spans([read])[0]
    if len(spans) != len(ids) - 1:  # ids end with EOS
        raise AlignmentError(f"{len(spans)} pieces aligned but {len(ids) - 1} encoded")
    al = align(find_word_spans(text, s.words), piece_char_spans(text, [(b, e) for _, b, e in spans]))
    if al.merged:
        raise AlignmentError("a piece spans two words")
    return al.word_of_piece


def _draw_pictures(out, sents: list[Sentence], pred: list[list[int]],
                   drawn: list[tuple[int, np.ndarray]]) -> list[Path]:
    """``sent{i}_heads.png`` and ``sent{i}_tree.png`` of every drawn sentence (Figs. 4 and 5)."""
    written: list[Path] = []
    if drawn:

        for i, beta_words in drawn:
            s = sents[i]
            written.append(out.write_with(f"sent{i + 1}_heads.png", lambda p, s=s, b=beta_words, i=i: draw_head_weights(
                s.words, b, p, f"sentence {i + 1}: attention over head words (beta, eq. 24 collapsed)")))
            written.append(out.write_with(f"sent{i + 1}_tree.png", lambda p, s=s, i=i: draw_tree(
                s.words, pred[i], p, s.heads, f"sentence {i + 1}: induced tree")))
    return written


def _scored_trees(sents: list[Sentence], pred: list[list[int]], word_scores: list[np.ndarray | None],
                  punct: str) -> tuple[list[EvalView], list[bool], list[list[int]], dict]:
    """The gold views scored under ``punct``, whether each sentence was encoded, the model's trees over
    them, and the report's counts of what the protocol leaves out."""
    if punct == "reduce":
        # scored on the sentence without its gold-PUNCT words: the model's tree is extracted over
        # the kept words (their rows and columns of the collapsed scores), the baselines built on them
        views = [eval_view(s) for s in sents]
        kept = [(v, ws) for v, ws in zip(views, word_scores) if v.keep]
        views = [v for v, _ in kept]
        encoded = [ws is not None for _, ws in kept]
        model_trees = [single_root_tree(ws[np.ix_(v.keep, v.keep)]) if ws is not None
                       else branching(len(v.keep), "R") for v, ws in kept]
        left_out = {"only_punctuation_not_scored": len(sents) - len(views),
                    "headed_by_punctuation": sum(h == -1 for v in views for h in v.heads)}
    else:  # one tree over the whole sentence; gold-PUNCT dependents not scored
        views = [full_view(s) for s in sents]
        encoded = [ws is not None for ws in word_scores]
        model_trees = pred
        left_out = {"only_punctuation_not_scored": sum(all(u == "PUNCT" for u in v.upos) for v in views),
                    "headed_by_punctuation": 0}
    return views, encoded, model_trees, left_out


def _gold_scores(sents: list[Sentence], pred: list[list[int]], word_scores: list[np.ndarray | None],
                 punct: str) -> dict:
    """The report's scores against the gold trees: attachment of the model and the L / R baselines
    and, with UPOS, Table 4's productions."""
    report: dict = {"without_upos_punctuation_kept": sum(s.upos is None for s in sents)}
    views, encoded, model_trees, left_out = _scored_trees(sents, pred, word_scores, punct)
    report.update(left_out)
    skip = punct == "skip"
    left = [branching(len(v.keep), "L") for v in views]
    right = [branching(len(v.keep), "R") for v in views]
    report["model"] = attachment(model_trees, views, skip)
    if not all(encoded):  # the model alone, without the baseline trees of the sentences it could not encode
        report["model_encoded_only"] = attachment([t for t, e in zip(model_trees, encoded) if e],
                                                  [v for v, e in zip(views, encoded) if e], skip)
    report["left_branching"] = attachment(left, views, skip)
    report["right_branching"] = attachment(right, views, skip)
    if all(s.upos is not None for s in sents):
        report["productions"] = {"gold": productions([v.heads for v in views], views, skip),
                                 "left": productions(left, views, skip),
                                 "model": productions(model_trees, views, skip)}
    return report


def _write_conllu(out, name: str, sents: list[Sentence], pred: list[list[int]]) -> Path:
    lines = []
    for s, heads in zip(sents, pred):
        lines += s.comments
        for i, (w, h) in enumerate(zip(s.words, heads), start=1):
            upos = s.upos[i - 1] if s.upos is not None else "_"
            lines.append(f"{i}\t{w}\t_\t{upos}\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_")
        lines.append("")
    return out.write_text(name, "\n".join(lines) + "\n")


def _write_report(out, r: dict) -> list[Path]:
    """induce.json and induce.md into ``out`` (a :class:`structnmt.fileio.files.OutputDir`)."""
    json_path = out.write_text("induce.json", json.dumps(r, indent=1))
    how = ("gold PUNCT removed from the sentence, trees over the other words" if r["punct"] == "reduce" else
           "one tree over the whole sentence, gold-PUNCT dependents not scored")
    md = [f"# Induced trees: {r['input']}", "", f"Checkpoint: `{r['checkpoint']}`, scores: {r['scores']}; "
          f"{r['sentences']} sentences, {r['model']['scored']} scored words (--punct {r['punct']}: {how}); "
          f"{len(r['not_encoded'])} sentence(s) not encoded (right-branching tree written and scored as the "
          f"model's); {r['only_punctuation_not_scored']} sentence(s) of punctuation only, not scored; "
          f"{r['headed_by_punctuation']} word(s) whose gold head is punctuation (unattainable); "
          f"{r['without_upos_punctuation_kept']} sentence(s) without UPOS (punctuation kept).", "",
          "| trees | DA % | UA % |", "|---|---|---|"]
    rows = [("model", "model")] + ([("model_encoded_only", "model, encoded sentences only")]
                                   if "model_encoded_only" in r else [])
    for key, name in rows + [("left_branching", "L (head = right neighbour)"),
                             ("right_branching", "R (head = left neighbour)")]:
        md.append(f"| {name} | {r[key]['DA']:.1f} | {r[key]['UA']:.1f} |")
    sh = r["shape"]
    md += ["", f"Shape of the written trees ({sh['trees']} encoded sentences of 3+ words): {sh['star']:.1f} % stars "
           f"(one word heads all others), most frequent head of a tree heads {100 * sh['top_head_share']:.1f} % of "
           f"its words on average, root at the first word {sh['root_first']:.1f} %, at the last "
           f"{sh['root_last']:.1f} %."]
    if "productions" in r:
        md += ["", "Productions P(dependent UPOS | head UPOS), % (Table 4):", "",
               "| rule | gold | left | model |", "|---|---|---|---|"]
        gold = r["productions"]["gold"]
        for h in ("VERB", "NOUN"):
            for d in list(gold.get(h, {}))[:4]:
                vals = [r["productions"][k].get(h, {}).get(d, 0.0) for k in ("gold", "left", "model")]
                md.append(f"| {h} → {d} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    return [json_path, out.write_text("induce.md", "\n".join(md) + "\n")]


# --------------------------------------------------------------------------- Tables 3 and 4 across models


def _shape_of_written(d: Path) -> dict | None:
    """:func:`tree_shape` of the trees an induce run wrote (for reports older than its ``shape``;
    sentences it could not encode carry the right-branching tree and count as such). None when the
    directory holds the report but not the trees (a copy of an old report kept without them)."""
    files = sorted(Path(d).glob("*.induced.conllu"))
    if not files:
        return None
    if len(files) != 1:
        raise UserError(f"{d}: expected one *.induced.conllu written by `structnmt induce`, found {len(files)}; "
                        "give the directory of one induce run.")
    return tree_shape([s.heads for s in read_words(files[0]) if s.heads is not None])

#: Table 4's rules, in the paper's order
TABLE4_RULES = (("VERB", "NOUN"), ("VERB", "PRON"), ("VERB", "ADV"), ("VERB", "VERB"),
                ("NOUN", "DET"), ("NOUN", "ADP"), ("NOUN", "NOUN"), ("NOUN", "ADJ"))


def induce_table(runs: list[tuple[str, str | Path]], out: str | Path, title: str = "",
                 bleu: dict[str, float] | None = None) -> Path:
    """Tables 3 and 4 of several ``structnmt induce`` outputs on the same gold file.

    ``runs``: (label, directory holding induce.json) pairs; every report must have scored
    the same input with the same protocol (refused otherwise, in one sentence). Writes a
    Markdown file: DA/UA of every model with the L and R baselines (Table 3's row), then
    the production percentages of Table 4's rules for gold, L and every model.

    ``bleu``: label -> the model's BLEU (the labels of ``runs``). The table then has a BLEU
    column and the rank correlation of DA and of UA with BLEU across those models
    (Spearman, permutation test: :mod:`structnmt.evaluate.correlation`) — §6.2's "the
    quality of induced trees ... is not correlated with the translation quality"."""
    if not runs:
        raise UserError(f"--out {out}: no induce output to tabulate; give at least one LABEL=DIR.")
    reports = [_read_report(label, d) for label, d in runs]

    for _, path, _ in reports:  # the table is never written over one of its inputs, nor over what induce wrote
        written = OutputDir(path.parent, "induce", check=False).written | {"induce.json"}
        if any(same_file(out, path.parent / name) for name in written):
            raise UserError(f"--out {out}: is a file `structnmt induce` wrote in {path.parent}, an input of the "
                            "table; write the table to another file.")
    check_output_file(out, "--out", "induce-table", own=_is_induce_table)
    bleu = dict(bleu or {})
    unknown = sorted(set(bleu) - {label for label, _, _ in reports})
    if unknown:
        raise UserError(f"--bleu {unknown[0]!r}: no run has that label; the labels are "
                        + ", ".join(repr(label) for label, _, _ in reports) + ".")
    first = reports[0][2]
    for _, path, r in reports[1:]:
        for key in ("input", "punct"):
            if not (_same_gold(r, first) if key == "input" else r[key] == first[key]):
                raise UserError(f"{path}: {key} {r[key]!r}, but {reports[0][1]} has {first[key]!r}; every report "
                                "of one table must score the same file with the same --punct protocol.")
    md = _table3_lines(reports, title, bleu)
    if bleu:
        md += _bleu_correlation_lines(reports, bleu)
    if all("productions" in r for _, _, r in reports):
        md += _table4_lines(reports)

    atomic_write_text(out, "\n".join(md) + "\n")
    record_output_file(out, "induce-table")
    return Path(out)


def _is_induce_table(path: Path) -> bool:
    """Whether ``path`` begins as a table of :func:`induce_table` does (its heading, then the gold file's line)."""

    try:
        head = Path(path).read_text(encoding="utf-8")[:4096]
    except (OSError, UnicodeDecodeError):
        return False
    return re.match(r"# .*\n\nGold file `", head) is not None


def _sha256(path: str | Path) -> str:
    """SHA-256 of the file's bytes (a gold file's identity, whatever path named it)."""
    return file_digest(path)["sha256"]


def _same_gold(a: dict, b: dict) -> bool:
    """Whether two induce reports scored the same gold file: by its bytes where both recorded them, else by
    the path as given or as the file it names from here (``g.conllu`` and ``/abs/g.conllu``)."""
    if a.get("input_sha256") and b.get("input_sha256"):
        return a["input_sha256"] == b["input_sha256"]

    return a["input"] == b["input"] or same_file(a["input"], b["input"])


def _read_report(label: str, d: str | Path) -> tuple[str, Path, dict]:
    """(label, path, report) of the induce.json in ``d``; refused unless it is a checked report of gold trees."""
    path = Path(d) / "induce.json"
    if not path.is_file():
        raise UserError(f"{path}: not found; run `structnmt induce ... --out {d}` first (or fix the directory).")
    try:
        r = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path}: not a readable induce report (truncated or not JSON); run `structnmt induce "
                        f"... --out {d}` again.") from None
    if not isinstance(r, dict) or "model" not in r:
        raise UserError(f"{path}: scored no gold trees (its input has no heads); give induce outputs of a gold "
                        "CoNLL-U file.")
    _check_report(path, r)
    return label, path, r


def _table3_lines(reports: list[tuple[str, Path, dict]], title: str, bleu: dict[str, float]) -> list[str]:
    """The table's title, legend and Table 3: DA / UA and tree shape of every model, then the L and R rows."""
    first = reports[0][2]
    md = [f"# {title or 'Induced trees against ' + first['input']}", "",
          f"Gold file `{first['input']}`, `--punct {first['punct']}`; {first['model']['scored']} scored words. "
          "Each model's DA / UA (%), and the branching baselines. Per model: its checkpoint, the scores collapsed "
          "(eq. 24) and the sentences it could not encode (scored with the right-branching tree).", "",
          "Star %: written trees (3+ words) in which one word heads every other word; top head %: the mean share "
          "of a tree's words headed by its most frequent head (read from each directory's `*.induced.conllu`).", "",
          "| trees | DA % | UA % | star % | top head % |" + (" BLEU |" if bleu else "")
          + " checkpoint | scores | not encoded |",
          "|---|---:|---:|---:|---:|" + ("---:|" if bleu else "") + "---|---|---:|"]
    unrecorded = []
    for label, path, r in reports:
        sh = r.get("shape") or _shape_of_written(path.parent)
        if sh is None:
            unrecorded.append(label)
        shape = (f" {sh['star']:.1f} | {100 * sh['top_head_share']:.1f} |" if sh is not None else " n/r | n/r |")
        b = (f" {bleu[label]:.2f} |" if label in bleu else " |") if bleu else ""
        md.append(f"| {label} | {r['model']['DA']:.1f} | {r['model']['UA']:.1f} |{shape}{b} `{r['checkpoint']}` | "
                  f"{r['scores']} | {len(r['not_encoded'])} |")
    for key, name in (("left_branching", "L (head = right neighbour)"), ("right_branching", "R (head = left neighbour)")):
        # a chain of 3+ words is never a star; each head has one dependent (top head 1 / (n - 1))
        md.append(f"| {name} | {first[key]['DA']:.1f} | {first[key]['UA']:.1f} | 0.0 | 1/(n-1) |"
                  + (" |" if bleu else "") + " | | |")
    if unrecorded:
        md += ["", "n/r: not recorded — the report of " + ", ".join(unrecorded) + " holds no tree shapes, and "
               "its directory does not hold the written trees (`*.induced.conllu`) to count them from."]
    return md


def _bleu_correlation_lines(reports: list[tuple[str, Path, dict]], bleu: dict[str, float]) -> list[str]:
    """The rank correlation of DA and of UA with BLEU across the models that have a BLEU (§6.2)."""

    with_bleu = [(bleu[label], r["model"]) for label, _, r in reports if label in bleu]
    md = ["", f"Rank correlation with BLEU across the {len(with_bleu)} models that have one (Spearman; "
          "two-sided permutation test):", ""]
    if len(with_bleu) < 3:
        md.append(f"not computed: {len(with_bleu)} models with a BLEU, a rank correlation needs at least 3.")
    else:
        for metric in ("DA", "UA"):
            md.append(f"- {metric} vs BLEU: {spearman([m[metric] for _, m in with_bleu], [b for b, _ in with_bleu])}")
    return md


def _table4_lines(reports: list[tuple[str, Path, dict]]) -> list[str]:
    """Table 4: the production percentages of its rules for gold, L and every model."""
    first = reports[0][2]
    labels = [lab for lab, _, _ in reports]
    md = ["", "Productions P(dependent UPOS | head UPOS), % (Table 4's rules):", "",
          "| rule | gold | left | " + " | ".join(labels) + " |", "|---|" + "---:|" * (2 + len(labels))]
    for h, d in TABLE4_RULES:
        vals = [first["productions"]["gold"].get(h, {}).get(d, 0.0),
                first["productions"]["left"].get(h, {}).get(d, 0.0)]
        vals += [r["productions"]["model"].get(h, {}).get(d, 0.0) for _, _, r in reports]
        md.append(f"| {h} → {d} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    return md


def _check_report(path: Path, r: dict) -> None:
    """The fields of an induce.json the table reads, with their types; one sentence naming the first wrong one."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    checks = [("model.DA", lambda: number(r["model"]["DA"])), ("model.UA", lambda: number(r["model"]["UA"])),
              ("model.scored", lambda: number(r["model"]["scored"])),
              ("left_branching", lambda: number(r["left_branching"]["DA"]) and number(r["left_branching"]["UA"])),
              ("right_branching", lambda: number(r["right_branching"]["DA"]) and number(r["right_branching"]["UA"])),
              ("input", lambda: isinstance(r["input"], str)), ("punct", lambda: isinstance(r["punct"], str)),
              ("checkpoint", lambda: isinstance(r["checkpoint"], str)), ("scores", lambda: isinstance(r["scores"], str)),
              ("not_encoded", lambda: isinstance(r["not_encoded"], list)),
              ("shape", lambda: r.get("shape") is None or (number(r["shape"]["star"])
                                                           and number(r["shape"]["top_head_share"]))),
              ("productions", lambda: "productions" not in r or all(
                  number(v) for side in r["productions"].values() for row in side.values() for v in row.values()))]
    for key, ok in checks:
        try:
            good = ok()
        except (KeyError, TypeError):
            good = False
        if not good:
            raise UserError(f"{path}: its field {key} is missing or not of the kind `structnmt induce` writes (edited "
                            "by hand?); run `structnmt induce ... --out DIR` again for this directory.")
