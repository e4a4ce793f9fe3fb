"""Where the decoder lets source syntax in: SA-NMT's gate analysis (section 5, eq. 23).

``structnmt gate --checkpoint CKPT --input SRC [--reference REF] --out DIR`` calls
:func:`run_gate`. For an SA/FA checkpoint of the RNN family (a model with the syntactic
gate of eq. 17) it measures

    z_t = ||sigmoid(W_gate h_t)||_2                                              (eq. 23)

for every predicted target piece, on two target sides of every source sentence:

* ``beam``: the model's own beam-search output (``--beam``, default 5), and
* ``reference``: the reference translation (``--reference``), forced-decoded.

Both are computed by one teacher-forced pass over the target pieces (with dropout off the
decoder state that predicts piece t depends only on the pieces before it, so z_t over a
beam output is exactly the gate of its search; tested).

**Pieces to tokens** (the rule, stated): a token starts at a piece that begins with ``▁``,
at a piece made only of punctuation, and at the piece after such a punctuation piece
(so "▁Straße" "." is two tokens, "Straße" and "."); a token's z is the **maximum** over its
pieces (``--word-rule first``: its first piece's), so the sentence's highest token is the
one that holds its highest piece. End of sentence (``</s>``) is its own entry; it is never
the sentence's "highest word" (the paper's list is over words) but has its own mean.

**POS** of the target tokens: ``--pos hanta`` (German: the HanTa tagger, PyPI ``hanta``,
model ``morphmodel_ger.pgz``, STTS tags mapped to UPOS with :data:`STTS_TO_UPOS`; modal
and auxiliary verbs VM*/VA* are AUX whatever their use), ``--pos spacy:<pipeline>``
(e.g. ``spacy:en_core_web_sm`` for English targets; the tokens are given to spaCy as they
are), or ``--pos none`` (statistics over pieces' tokens only).

**Frequency baseline and chi-squared test**: if the highest token of a sentence were
drawn uniformly from its tokens, its POS would follow that sentence's POS frequencies;
the expected count of a POS is the sum, over sentences, of its share of the sentence's
tokens. Observed counts of the highest token's POS against these expected counts:
Pearson's chi-squared goodness of fit, POS with an expected count below 5 merged into
``OTHER`` (the usual validity rule), ``dof`` = categories - 1, p from the regularised
upper incomplete gamma function.

Written in ``DIR``: ``gate.md`` (the tables), ``gate.json`` (everything in them, counts of
sentences used and skipped), ``gate_tokens.tsv`` (side, line, token index, token, POS, z),
``gate_sentences.png`` (the paper's Fig. 6: the first sentences' beam outputs with every
token coloured by z, the highest in bold) and ``gate_pos.png`` (observed vs expected
shares of the highest token's POS, and the mean z per POS).

Nothing is dropped silently: an empty input line, a source over the model's positions
(no beam output), an empty beam output or an empty reference line is counted and named
by line number in ``gate.json``.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..data.dataset import encode_sources, pad_sources
from ..data.vocab import BOS, PAD
from ..decode.translate import Translator
from ..errors import UserError
from ..fileio.corpus import read_lines
from ..fileio.files import OutputDir
from ..syntax.parsers import resolve_pipeline

SPIECE = "\u2581"
EOS_LABEL = "</s>"

#: STTS (the HanTa tags with their parentheses removed, e.g. "VV(FIN)" -> "VVFIN", except the
#: punctuation tags "$(", "$,", "$.") -> UPOS, following the UD German conversions (TIGER/HDT):
#: modal and auxiliary verbs are AUX, separable verb particles (PTKVZ) ADP, pronominal adverbs
#: ADV; HanTa's own NNA (nominalised adjective, "das Blaue") and NNI are nouns.
STTS_TO_UPOS = {
    "ADJA": "ADJ", "ADJD": "ADJ", "ADV": "ADV",
    "APPR": "ADP", "APPRART": "ADP", "APPO": "ADP", "APZR": "ADP",
    "ART": "DET", "CARD": "NUM", "FM": "X", "ITJ": "INTJ",
    "KOUI": "SCONJ", "KOUS": "SCONJ", "KON": "CCONJ", "KOKOM": "CCONJ",
    "NN": "NOUN", "NE": "PROPN", "NNA": "NOUN", "NNI": "NOUN",  # HanTa's nominalised adjectives (NNA), NNI
    "PDS": "PRON", "PDAT": "DET", "PIS": "PRON", "PIAT": "DET", "PIDAT": "DET",
    "PPER": "PRON", "PPOSS": "PRON", "PPOSAT": "DET", "PRELS": "PRON", "PRELAT": "DET",
    "PRF": "PRON", "PWS": "PRON", "PWAT": "DET", "PWAV": "ADV", "PAV": "ADV", "PROAV": "ADV",
    "PTKZU": "PART", "PTKNEG": "PART", "PTKVZ": "ADP", "PTKANT": "PART", "PTKA": "PART",
    "TRUNC": "X", "XY": "X",
    "VVFIN": "VERB", "VVIMP": "VERB", "VVINF": "VERB", "VVIZU": "VERB", "VVPP": "VERB",
    "VAFIN": "AUX", "VAIMP": "AUX", "VAINF": "AUX", "VAPP": "AUX",
    "VMFIN": "AUX", "VMINF": "AUX", "VMPP": "AUX",
    "$,": "PUNCT", "$.": "PUNCT", "$(": "PUNCT",
}


# --------------------------------------------------------------------------- pieces -> tokens


def _is_punct(text: str) -> bool:
    return bool(text) and all(unicodedata.category(ch).startswith("P") or unicodedata.category(ch).startswith("S")
                              for ch in text)


def piece_tokens(pieces: list[str]) -> list[tuple[str, list[int]]]:
    """Group SentencePiece pieces into tokens: ``[(token text, piece indices)]``.

    A token starts at a piece beginning with ``▁``, at a piece made only of punctuation
    (or symbols), and at the piece after one; a bare ``▁`` piece is glued to what follows.
    """
    out: list[tuple[str, list[int]]] = []
    prev_punct = True
    pending_space = False
    for i, p in enumerate(pieces):
        starts = p.startswith(SPIECE)
        text = p.lstrip(SPIECE)
        if not text:  # a lone "▁": the next piece starts a token
            pending_space = True
            continue
        punct = _is_punct(text)
        if not out or starts or pending_space or punct or prev_punct:
            out.append((text, [i]))
        else:
            out[-1] = (out[-1][0] + text, out[-1][1] + [i])
        prev_punct = punct
        pending_space = False
    return out


def token_gates(z: list[float], groups: list[tuple[str, list[int]]], rule: str = "max") -> list[float]:
    """z of each token from the z of its pieces (``max`` or ``first``)."""
    if rule not in ("max", "first"):
        raise ValueError(f"word rule must be 'max' or 'first', not {rule!r}")
    return [max(z[i] for i in idx) if rule == "max" else z[idx[0]] for _, idx in groups]


# --------------------------------------------------------------------------- statistics


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-squared(dof): the regularised upper incomplete gamma Q(dof/2, x/2)."""
    if dof <= 0:
        return float("nan")
    if x <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(x / 2, dtype=torch.float64)))


def frequency_test(observed: dict[str, int], expected: dict[str, float], min_expected: float = 5.0) -> dict:
    """Pearson's chi-squared of observed counts against expected counts (same total), the
    categories with an expected count below ``min_expected`` merged into ``OTHER``."""
    cats = sorted(set(observed) | set(expected))
    obs, exp = Counter(), Counter()
    merged = []
    for c in cats:
        key = c if expected.get(c, 0.0) >= min_expected else "OTHER"
        if key == "OTHER":
            merged.append(c)
        obs[key] += observed.get(c, 0)
        exp[key] += expected.get(c, 0.0)
    if exp.get("OTHER", 0.0) == 0.0 and obs.get("OTHER", 0) == 0:
        obs.pop("OTHER", None)
        exp.pop("OTHER", None)
    keys = [k for k in exp if exp[k] > 0]
    stat = sum((obs[k] - exp[k]) ** 2 / exp[k] for k in keys)
    dof = len(keys) - 1
    return {"chi2": stat, "dof": dof, "p": chi2_sf(stat, dof), "merged_into_other": merged,
            "categories": {k: {"observed": obs[k], "expected": exp[k]} for k in keys}}


@dataclass
class SentenceGates:
    """One target side of one sentence: its tokens, their POS and z, and z at ``</s>``."""

    line: int  # 1-based input line
    tokens: list[str]
    pos: list[str]
    z: list[float]
    eos: float


def summarise(sents: list[SentenceGates]) -> dict:
    """The section-5 statistics of one target side (see the module docstring)."""
    highest: Counter = Counter()
    expected: Counter = Counter()
    by_pos: dict[str, list[float]] = {}
    by_token: dict[str, list[float]] = {}
    used = 0
    for s in sents:
        if not s.tokens:
            continue
        used += 1
        top = max(range(len(s.z)), key=lambda i: s.z[i])
        highest[s.pos[top]] += 1
        for p, n in Counter(s.pos).items():
            expected[p] += n / len(s.pos)
        for tok, p, v in zip(s.tokens, s.pos, s.z):
            by_pos.setdefault(p, []).append(v)
            by_token.setdefault(tok, []).append(v)
        by_pos.setdefault(EOS_LABEL, []).append(s.eos)
    mean_pos = {p: {"mean": sum(v) / len(v), "count": len(v)} for p, v in by_pos.items()}
    frequent = {t: sum(v) / len(v) for t, v in by_token.items() if len(v) >= 5}
    ranked = sorted(frequent.items(), key=lambda kv: -kv[1])
    return {
        "sentences": used,
        "highest_pos": dict(highest.most_common()),
        "expected_pos": dict(sorted(expected.items(), key=lambda kv: -kv[1])),
        "test": frequency_test(dict(highest), dict(expected)) if used else None,
        "mean_z_by_pos": dict(sorted(mean_pos.items(), key=lambda kv: -kv[1]["mean"])),
        "mean_z": (sum(x for s in sents for x in s.z) / max(1, sum(len(s.z) for s in sents))),
        "highest_mean_tokens": dict(ranked[:15]),
        "lowest_mean_tokens": dict(ranked[-15:][::-1]),
        "min_count_for_token_means": 5,
    }


# --------------------------------------------------------------------------- model and taggers


def forced_gates(model, sources: list[list[int]], targets: list[list[int]], device, batch_size: int = 64,
                 progress: bool = False, desc: str = "gate") -> list[list[float]]:
    """z_t (eq. 23) of every position of each target, by one teacher-forced pass per batch.

    ``sources``: piece ids ending in EOS; ``targets``: piece ids without EOS. Returns, per
    sentence, ``len(target) + 1`` values: one per target piece, then the one of ``</s>``.
    Batches are sorted by length; padding does not reach the real positions (the RNN
    decoder reads only the prefix, attention masks the padded source)."""

    order = sorted(range(len(sources)), key=lambda i: (len(sources[i]), len(targets[i])))
    out: list[list[float] | None] = [None] * len(sources)
    bar = None
    if progress:
        bar = tqdm(total=len(order), desc=desc, unit=" sent", mininterval=1.0)
    with torch.inference_mode():
        for k in range(0, len(order), batch_size):
            idx = order[k:k + batch_size]
            src, mask = pad_sources([sources[i] for i in idx])
            T = max(len(targets[i]) for i in idx) + 1
            tgt_in = torch.full((len(idx), T), PAD, dtype=torch.long)
            for b, i in enumerate(idx):
                row = [BOS] + list(targets[i])
                tgt_in[b, :len(row)] = torch.as_tensor(row, dtype=torch.long)
            res = model(src.to(device), mask.to(device), tgt_in.to(device), None, need_weights=True)
            gate = res.attentions.get("syntax_gate")
            if gate is None:
                raise UserError("this checkpoint has no syntactic gate (eq. 17): `structnmt gate` needs an SA-NMT or "
                                "FA-NMT model of the RNN family (model.rnn.syntax: sa or fa).")
            gate = gate.float().cpu()
            for b, i in enumerate(idx):
                out[i] = gate[b, :len(targets[i]) + 1].tolist()
            if bar is not None:
                bar.update(len(idx))
    if bar is not None:
        bar.close()
    return out  # type: ignore[return-value]


class _Tagger:
    """Token lists -> UPOS lists with HanTa (German), a spaCy pipeline, or nothing."""

    def __init__(self, spec: str):
        self.spec = spec
        self.unmapped: Counter = Counter()
        if spec == "none":
            self.kind = "none"
        elif spec == "hanta":
            try:
                from HanTa import HanoverTagger
            except ImportError:
                raise UserError("--pos hanta needs the HanTa tagger: pip install hanta (or use --pos none).") from None
            self.kind = "hanta"
            self.tagger = HanoverTagger.HanoverTagger("morphmodel_ger.pgz")
        elif spec.startswith("spacy:"):

            try:
                import spacy
            except ImportError:
                raise UserError(f"--pos {spec} needs spaCy: pip install spacy.") from None
            name = resolve_pipeline(spec.split(":", 1)[1])
            if name is None:
                raise UserError(f"--pos {spec}: spaCy pipeline '{spec.split(':', 1)[1]}' is not installed; install "
                                "it or choose --pos hanta / none.")
            self.kind = "spacy"
            self.nlp = spacy.load(name, exclude=["ner", "lemmatizer", "parser"])
        else:
            raise UserError(f"--pos {spec!r}: use hanta, spacy:<pipeline> or none.")

    def __call__(self, tokens: list[str]) -> list[str]:
        if not tokens:
            return []
        if self.kind == "none":
            return ["-"] * len(tokens)
        if self.kind == "hanta":
            tags = []
            for _, _, stts in self.tagger.tag_sent(tokens, taglevel=1):
                # "VV(FIN)" -> "VVFIN"; punctuation tags ("$(", "$,", "$.") are kept as they are
                key = stts if stts.startswith("$") else stts.replace("(", "").replace(")", "")
                if key not in STTS_TO_UPOS:
                    self.unmapped[key] += 1
                tags.append(STTS_TO_UPOS.get(key, "X"))
            return tags
        from spacy.tokens import Doc

        doc = Doc(self.nlp.vocab, words=tokens)
        for _, proc in self.nlp.pipeline:
            doc = proc(doc)
        return [t.pos_ or "X" for t in doc]


# --------------------------------------------------------------------------- pictures


def _draw_sentences(sents: list[SentenceGates], path: Path, lo: float, hi: float) -> Path:
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cmap = colormaps["Reds"]
    fig = Figure(figsize=(11, 0.55 * len(sents) + 1.0))
    renderer = FigureCanvasAgg(fig).get_renderer()  # to measure each word's width as it is placed
    ax = fig.subplots()
    ax.set_axis_off()
    for row, s in enumerate(sents):
        y = 1.0 - (row + 0.7) / (len(sents) + 0.4)
        x = 0.0
        words = list(zip(s.tokens, s.z)) + [(EOS_LABEL, s.eos)]
        top = max(range(len(s.z)), key=lambda i: s.z[i]) if s.z else -1
        for i, (tok, v) in enumerate(words):
            shade = 0.15 + 0.8 * ((v - lo) / (hi - lo) if hi > lo else 0.5)
            t = ax.text(x, y, tok, transform=ax.transAxes, fontsize=10, va="center",
                        fontweight="bold" if i == top else "normal", color="white" if shade > 0.6 else "black",
                        bbox={"facecolor": cmap(shade), "edgecolor": "none", "pad": 1.5})
            box = t.get_window_extent(renderer=renderer).transformed(ax.transAxes.inverted())
            x += box.width + 0.008
    ax.set_title(f"SA-NMT gate norm z_t (eq. 23) per target token (darker = higher, z from {lo:.2f} to {hi:.2f}); "
                 "bold: the sentence's highest", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _draw_pos(summaries: dict[str, dict], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    sides = list(summaries)
    cats = sorted({p for s in summaries.values() for p in s["highest_pos"]} |
                  {p for s in summaries.values() for p in s["expected_pos"]},
                  key=lambda p: -sum(s["highest_pos"].get(p, 0) for s in summaries.values()))[:14]
    width = 0.8 / (2 * len(sides))
    x = np.arange(len(cats))
    for k, side in enumerate(sides):
        s = summaries[side]
        n = max(1, s["sentences"])
        ax1.bar(x + (2 * k) * width, [s["highest_pos"].get(c, 0) / n for c in cats], width, label=f"{side}: highest z")
        ax1.bar(x + (2 * k + 1) * width, [s["expected_pos"].get(c, 0.0) / n for c in cats], width, alpha=0.5,
                label=f"{side}: frequency baseline")
    ax1.set_xticks(x + 0.4 - width / 2)
    ax1.set_xticklabels(cats, rotation=45, ha="right", fontsize=8)
    ax1.set_ylabel("share of sentences")
    ax1.set_title("POS of the token with the sentence's highest gate", fontsize=9)
    ax1.legend(fontsize=7)
    side = sides[0]
    means = summaries[side]["mean_z_by_pos"]
    keys = [k for k in means if means[k]["count"] >= 5]
    ax2.bar(range(len(keys)), [means[k]["mean"] for k in keys], color=["C3" if k == EOS_LABEL else "C0" for k in keys])
    ax2.set_xticks(range(len(keys)))
    ax2.set_xticklabels(keys, rotation=45, ha="right", fontsize=8)
    if keys:
        vals = [means[k]["mean"] for k in keys]
        ax2.set_ylim(min(vals) * 0.97, max(vals) * 1.02)
    ax2.set_ylabel("mean z_t")
    ax2.set_title(f"mean gate per POS ({side}; red: end of sentence; POS with >= 5 tokens)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


# --------------------------------------------------------------------------- the command


def _md_side(name: str, s: dict) -> list[str]:
    lines = [f"### {name}: {s['sentences']} sentences", ""]
    if not s["sentences"]:
        return lines + ["(no sentences)", ""]
    t = s["test"]
    lines += ["| POS | highest z (count) | share % | frequency baseline (expected) | share % |", "|---|---:|---:|---:|---:|"]
    n = s["sentences"]
    for p in sorted(set(s["highest_pos"]) | set(s["expected_pos"]),
                    key=lambda p: (-s["highest_pos"].get(p, 0), -s["expected_pos"].get(p, 0.0))):
        o, e = s["highest_pos"].get(p, 0), s["expected_pos"].get(p, 0.0)
        lines.append(f"| {p} | {o} | {100 * o / n:.1f} | {e:.1f} | {100 * e / n:.1f} |")
    merged = f"; merged into OTHER (expected < 5): {', '.join(t['merged_into_other'])}" if t["merged_into_other"] else ""
    lines += ["", f"Pearson chi-squared against the frequency baseline: chi2 = {t['chi2']:.1f}, dof = {t['dof']}, "
              f"p = {t['p']:.3g}{merged}.", "",
              "| POS | mean z_t | tokens |", "|---|---:|---:|"]
    for p, v in s["mean_z_by_pos"].items():
        lines.append(f"| {p} | {v['mean']:.3f} | {v['count']} |")
    lines.append("")
    return lines


def _gated_translator(checkpoint: str | Path):
    """The checkpoint's :class:`Translator`; refused unless it is an RNN with a syntactic gate (eq. 17)."""

    tr = Translator(checkpoint)
    if getattr(tr.cfg.model, "family", "transformer") != "rnn" or tr.cfg.model.rnn.syntax == "none":
        raise UserError(f"{checkpoint}: `structnmt gate` needs an SA-NMT or FA-NMT model of the RNN family "
                        "(model.rnn.syntax: sa or fa); this one has no syntactic gate.")
    return tr


def _read_inputs(input_path: str | Path, reference_path: str | Path | None,
                 max_sentences: int) -> tuple[list[str], list[str] | None]:
    """The input lines and the reference lines (None without one), both cut to ``max_sentences``."""

    lines = [x.rstrip("\r") for x in read_lines(input_path)]
    refs = None
    if reference_path is not None:
        refs = [x.rstrip("\r") for x in read_lines(reference_path)]
        if len(refs) != len(lines):
            raise UserError(f"{reference_path}: {len(refs)} lines, but {input_path} has {len(lines)}; give the "
                            "reference translation of every input line, in order.")
    if max_sentences > 0:
        lines = lines[:max_sentences]
        refs = refs[:max_sentences] if refs is not None else None
    return lines, refs


def _target_sides(tr, lines: list[str], refs: list[str] | None, keep: list[int], fits: list[int], beam: int,
                  progress: bool, skipped: dict[str, list[int]]) -> dict[str, list[tuple[int, list[int]]]]:
    """Beam outputs (and references) of the sources that fit: side -> [(source index, target ids)];
    empty ones are added to ``skipped``."""

    dcfg = tr.cfg.decode
    dcfg = replace(dcfg, beam=beam, nbest=1)
    hyps = tr.translate([lines[keep[k]] for k in fits], dcfg, progress=progress)
    sides: dict[str, list[tuple[int, list[int]]]] = {"beam": []}  # (source index into fits, target ids)
    for j, k in enumerate(fits):
        ids = list(hyps[j][0].tokens)
        if ids:
            sides["beam"].append((k, ids))
        else:
            skipped["empty_beam_output"].append(keep[k] + 1)
    if refs is not None:
        sides["reference"] = []
        ref_ids = tr.tgt_vocab.encode([refs[keep[k]].strip() for k in fits])
        for j, k in enumerate(fits):
            if ref_ids[j] and refs[keep[k]].strip():
                sides["reference"].append((k, ref_ids[j]))
            else:
                skipped["empty_reference"].append(keep[k] + 1)
    return sides


def _side_gates(tr, tagger: _Tagger, side: str, items: list[tuple[int, list[int]]], sources: list[list[int]],
                keep: list[int], word_rule: str, batch_size: int, progress: bool) -> list[SentenceGates]:
    """The tokens, their POS and z (eq. 23) of every sentence of one target side."""
    zs = forced_gates(tr.model, [sources[k] for k, _ in items], [t for _, t in items], tr.device,
                      batch_size=batch_size, progress=progress, desc=f"gate ({side})")
    sents = []
    for (k, ids), z in zip(items, zs):
        pieces = tr.tgt_vocab.pieces(ids)
        groups = piece_tokens(pieces)
        tz = token_gates(z[:-1], groups, word_rule)
        toks = [g[0] for g in groups]
        sents.append(SentenceGates(keep[k] + 1, toks, tagger(toks), tz, z[-1]))
    return sents


def _tokens_tsv(results: dict[str, list[SentenceGates]]) -> str:
    """gate_tokens.tsv: a row per token (side, line, index, token, POS, z), then one for ``</s>``."""
    rows = ["side\tline\tindex\ttoken\tpos\tz\n"]
    for side, sents in results.items():
        for s in sents:
            rows += [f"{side}\t{s.line}\t{i}\t{tok}\t{tag}\t{v:.5f}\n"
                     for i, (tok, tag, v) in enumerate(zip(s.tokens, s.pos, s.z))]
            rows.append(f"{side}\t{s.line}\t{len(s.tokens)}\t{EOS_LABEL}\t{EOS_LABEL}\t{s.eos:.5f}\n")
    return "".join(rows)


def _gate_md(info: dict, unmapped: Counter, summaries: dict[str, dict]) -> str:
    """gate.md: the run (as in gate.json's ``info``), the skipped counts and each side's tables."""
    checkpoint, input_path, reference_path = info["checkpoint"], info["input"], info["reference"]
    beam, pos, word_rule, skipped = info["beam"], info["pos"], info["word_rule"], info["skipped"]
    md = [f"# SA-NMT gate analysis (section 5, eq. 23): `{checkpoint}`", "",
          f"Input `{input_path}`" + (f", references `{reference_path}`" if reference_path else "") +
          f"; {info['lines']} lines; beam {beam}; POS: {pos}; a token's z is the {word_rule} over its pieces "
          "(tokens: a new one at every `▁` piece and around punctuation-only pieces; see structnmt.analysis.gate).",
          "", "Skipped (line numbers in gate.json): " +
          ", ".join(f"{k.replace('_', ' ')} {len(v)}" for k, v in skipped.items()) + ".", ""]
    if unmapped:
        md += [f"STTS tags without a UPOS mapping (counted as X): {dict(unmapped)}.", ""]
    for side, s in summaries.items():
        md += _md_side("beam outputs" if side == "beam" else "forced-decoded references", s)
    return "\n".join(md)


def _write_pictures(out, results: dict[str, list[SentenceGates]], summaries: dict[str, dict],
                    draw: int) -> list[Path]:
    """gate_sentences.png (the first ``draw`` beam outputs) and gate_pos.png, each if it has something to show."""
    written: list[Path] = []
    drawn = [s for s in results.get("beam", []) if s.tokens][:max(0, draw)]
    if drawn:
        allz = [v for s in drawn for v in s.z + [s.eos]]
        written.append(out.write_with("gate_sentences.png",
                                      lambda tmp: _draw_sentences(drawn, tmp, min(allz), max(allz))))
    if any(s["sentences"] for s in summaries.values()):
        written.append(out.write_with("gate_pos.png", lambda tmp: _draw_pos(summaries, tmp)))
    return written


def run_gate(*, checkpoint: str | Path, input_path: str | Path, out_dir: str | Path,
             reference_path: str | Path | None = None, beam: int = 5, pos: str = "hanta", word_rule: str = "max",
             max_sentences: int = 0, draw: int = 6, batch_size: int = 64, progress: bool = False) -> list[Path]:
    """Write the gate analysis of ``checkpoint`` on ``input_path`` (and ``reference_path``)
    to ``out_dir``; returns the written paths (see the module docstring)."""

    if word_rule not in ("max", "first"):
        raise UserError(f"--word-rule {word_rule!r}: use max or first.")

    # the report directory is checked before the tagger and the model are loaded; made with the first file
    out = OutputDir(out_dir, "gate", expect=("gate.json", "gate_tokens.tsv", "gate.md", "gate_sentences.png",
                                             "gate_pos.png"))
    tagger = _Tagger(pos)
    tr = _gated_translator(checkpoint)
    lines, refs = _read_inputs(input_path, reference_path, max_sentences)
    skipped: dict[str, list[int]] = {"empty_input": [], "too_long": [], "empty_beam_output": [],
                                     "empty_reference": []}
    keep = [i for i, x in enumerate(lines) if x.strip()]
    skipped["empty_input"] = [i + 1 for i, x in enumerate(lines) if not x.strip()]
    limit = tr.cfg.model.max_positions
    sources = encode_sources(tr.src_vocab, [lines[i].strip() for i in keep])
    fits = [k for k, s in enumerate(sources) if len(s) <= limit]
    skipped["too_long"] = [keep[k] + 1 for k, s in enumerate(sources) if len(s) > limit]

    sides = _target_sides(tr, lines, refs, keep, fits, beam, progress, skipped)
    results: dict[str, list[SentenceGates]] = {}
    for side, items in sides.items():
        results[side] = _side_gates(tr, tagger, side, items, sources, keep, word_rule, batch_size, progress)

    summaries = {side: summarise(s) for side, s in results.items()}
    written: list[Path] = []
    info = {
        "checkpoint": str(checkpoint), "input": str(input_path),
        "reference": str(reference_path) if reference_path is not None else None,
        "beam": beam, "pos": pos, "word_rule": word_rule, "lines": len(lines),
        "definition": "z_t = ||sigmoid(W_gate h_t)||_2 (eq. 23) when predicting each target piece; a token's z is "
                      f"the {word_rule} over its pieces",
        "skipped": skipped, "unmapped_stts_tags": dict(tagger.unmapped), "sides": summaries,
    }
    written.append(out.write_text("gate.json", json.dumps(info, indent=2, ensure_ascii=False)))
    written.append(out.write_text("gate_tokens.tsv", _tokens_tsv(results)))
    written.append(out.write_text("gate.md", _gate_md(info, tagger.unmapped, summaries)))
    return written + _write_pictures(out, results, summaries, draw)
