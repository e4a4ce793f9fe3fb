"""Probing classifiers for MG-SA §4.2 (Table 5): ``structnmt probe CONFIG.yaml``.

Five label-prediction tasks of Shi et al. (2016), from sentence to word granularity
(labels from :mod:`structnmt.syntax.probing`): ``voice``, ``tense``, ``tss`` (sentence
level) and ``spc``, ``pos`` (word level). Two modes:

``frozen``   a trained NMT checkpoint's encoder, frozen (eval mode, no gradients); its
             output ``EncoderOutput.memory`` is computed once per sentence and an MLP is
             trained on it per task.
``scratch``  an encoder of ``model.layers`` (3 in the paper) Transformer encoder layers
             whose self-attention is ``model.attention`` (``mha``, ``mgsa`` with options,
             any registered mechanism), trained jointly with the MLP from scratch, one
             encoder per task. Auxiliary losses of the mechanism (MG-SA tag supervision)
             are *not* used: Table 5 uses "only syntactic boundary ... no tag supervision".

Representations: a sentence is the **mean of its pieces' vectors** (the appended EOS
excluded; ``sentence_pool: eos`` takes the EOS vector instead); a word is the vector of
its **first piece** (``word_pool: mean`` averages its pieces).

Pipeline: read ``corpus.limit`` sentences (first ones of the file) with their trees
(spaCy/file trees for ``kind: text``, gold trees from ``kind: conllu``), shuffle with
``split.seed`` and split by ``split.ratios`` (10/1/1), label with
:func:`structnmt.syntax.probing` (TSS classes = the 19 most frequent sequences of the
*training* split, others "other"), align words to SentencePiece pieces
(:mod:`structnmt.syntax.align`; words SentencePiece merges are one word labelled by its
first word), train per task with model selection on valid accuracy, report test
accuracy next to two baselines (majority class; for word tasks also the most frequent
label of the word form in training). Writes ``out_dir/probe.md`` and ``probe.json``.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import platform
import random
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import (
    AttentionPlan,
    AttentionSpec,
    ConfigError,
    ModelConfig,
    apply_overrides,
    build_dataclass,
    check_seed,
    from_dict,
    naming_override,
    read_yaml_mapping,
    to_dict,
)
from ..data.dataset import pad_sources
from ..data.vocab import EOS, PAD, Vocab, VocabSizeError, train_sentencepiece
from ..errors import UserError
from ..fileio.corpus import read_lines
from ..fileio.files import OutputDir
from ..machine.device import set_threads
from ..models import build_model
from ..models.checkpoint import checkpoint_vocabs, load_checkpoint, load_model_state
from ..models.transformer import EncoderStack, sinusoidal_table
from ..nn.attention import collect_structures
from ..syntax import probing as P
from ..syntax.align import AlignmentError, align_trees
from ..syntax.batching import build_structures
from ..syntax.convert import dependency_to_constituency
from ..syntax.io import read_conllu_with_text
from ..syntax.parsers import ParserConfig, build_parser

TASKS = ("voice", "tense", "tss", "spc", "pos")
SENTENCE_TASKS = ("voice", "tense", "tss")
WORD_TASKS = ("spc", "pos")


# --------------------------------------------------------------------------- configuration


@dataclass
class ProbeCorpusConfig:
    kind: str = "text"  # text (one sentence a line, parsed by `parser`) | conllu (gold trees + "# text =")
    path: str = ""
    limit: int = 0  # the first `limit` usable sentences of the file; 0 = all
    max_len: int = 128  # sentences with more pieces are skipped (counted)
    parser: ParserConfig = field(default_factory=lambda: ParserConfig(name="spacy"))  # kind: text only


@dataclass
class SplitConfig:
    ratios: tuple[int, int, int] = (10, 1, 1)  # train/valid/test
    seed: int = 1


@dataclass
class ProbeModelConfig:
    """The scratch encoder: ``layers`` Transformer encoder layers with ``attention``."""

    layers: int = 3
    d_model: int = 128
    ffn_dim: int = 256
    heads: int = 4
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pre_norm: bool = True
    max_positions: int = 512
    attention: AttentionSpec = field(default_factory=AttentionSpec)  # every layer
    overrides: dict[str, AttentionSpec] = field(default_factory=dict)  # layer index ("0") -> spec
    vocab: str = ""  # an existing spm.model; "" = train one on the probe's training split
    vocab_size: int = 1000


@dataclass
class MLPConfig:
    hidden: int = 256  # 0 = a linear classifier
    dropout: float = 0.1


@dataclass
class ProbeTrainConfig:
    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 64  # sentences
    seed: int = 1
    threads: int = 0  # torch.set_num_threads; 0 = leave the default
    device: str = "cpu"  # cpu | cuda | auto
    weight_decay: float = 0.0


@dataclass
class ProbeConfig:
    corpus: ProbeCorpusConfig = field(default_factory=ProbeCorpusConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    tasks: list[str] = field(default_factory=lambda: list(TASKS))
    mode: str = "scratch"  # frozen | scratch
    name: str = ""  # column name in the report; "" = derived from mode and attention
    checkpoint: str = ""  # frozen: a trained NMT checkpoint
    data_dir: str = ""  # frozen: the checkpoint's prepared dataset (for spm.model); "" = its saved data.path
    sentence_pool: str = "mean"  # mean (over pieces, EOS excluded) | eos
    word_pool: str = "first"  # first piece of the word | mean of its pieces
    model: ProbeModelConfig = field(default_factory=ProbeModelConfig)
    mlp: MLPConfig = field(default_factory=MLPConfig)
    train: ProbeTrainConfig = field(default_factory=ProbeTrainConfig)
    compare: list[str] = field(default_factory=list)  # other runs' probe.json: extra columns in the table
    out_dir: str = "runs/probe"


def _check(cfg: ProbeConfig, where: str) -> ProbeConfig:
    def bad(msg: str):
        raise ConfigError(f"{where}: {msg}")

    if cfg.mode not in ("frozen", "scratch"):
        bad(f"mode '{cfg.mode}' is not frozen or scratch.")
    if cfg.mode == "frozen" and not cfg.checkpoint:
        bad("mode frozen needs 'checkpoint' (a trained NMT checkpoint, e.g. runs/multi30k_transformer_tiny/avg10.pt).")
    if cfg.corpus.kind not in ("text", "conllu"):
        bad(f"corpus.kind '{cfg.corpus.kind}' is not text or conllu.")
    if not cfg.corpus.path:
        bad("corpus.path is empty; give the sentence file (text) or CoNLL-U file (conllu).")
    if not cfg.tasks:
        bad("tasks is empty; use a subset of " + ", ".join(TASKS) + ".")
    for t in cfg.tasks:
        if t not in TASKS:

            close = difflib.get_close_matches(t, TASKS, n=1)
            bad(f"unknown task '{t}'" + (f"; did you mean '{close[0]}'?" if close else f"; valid: {', '.join(TASKS)}."))
    if len(cfg.split.ratios) != 3 or min(cfg.split.ratios) <= 0:
        bad("split.ratios must be three positive numbers (train, valid, test), e.g. [10, 1, 1].")
    t = cfg.train
    for key in ("epochs", "batch_size"):
        if getattr(t, key) < 1:
            bad(f"train.{key}={getattr(t, key)} must be at least 1.")
    if not (math.isfinite(t.lr) and t.lr > 0):
        bad(f"train.lr={t.lr} must be a positive number.")
    check_seed(t.seed, where)  # as train's: one check of a seed for every command
    if cfg.sentence_pool not in ("mean", "eos"):
        bad(f"sentence_pool '{cfg.sentence_pool}' is not mean or eos.")
    if cfg.word_pool not in ("first", "mean"):
        bad(f"word_pool '{cfg.word_pool}' is not first or mean.")
    if cfg.model.layers < 1 or cfg.model.d_model % cfg.model.heads:
        bad("model.layers must be >= 1 and model.d_model divisible by model.heads.")
    return cfg


def load_probe_config(path: str | Path | None, overrides: list[str] | None = None) -> ProbeConfig:
    """Strictly load a probe YAML (unknown keys -> :class:`ConfigError` with the nearest name) plus overrides."""
    where = str(path) if path else "probe config"
    data = {} if path is None else read_yaml_mapping(
        path, "probe config (examples in configs/probe/)", expect="a mapping (corpus, split, tasks, mode, ...)")
    data = apply_overrides(data, overrides or [])
    cfg = build_dataclass(ProbeConfig, data, where)
    cfg.split.ratios = tuple(cfg.split.ratios)
    try:
        return _check(cfg, where)
    except ConfigError as err:
        raise naming_override(err, overrides or []) from None


# --------------------------------------------------------------------------- corpus


@dataclass
class Item:
    text: str
    trees: tuple  # (dependency | None, constituency) after merging words SentencePiece joins
    ids: list[int] = field(default_factory=list)  # pieces + EOS
    wop: np.ndarray | None = None  # (P,) word of piece
    labels: dict[str, Any] = field(default_factory=dict)  # task -> str | [str per (merged) word]
    words: list[str] = field(default_factory=list)  # (merged) word forms, for the word-form baseline


def read_corpus(cc: ProbeCorpusConfig) -> tuple[list[tuple[str, Any, Any, Any]], Counter]:
    """``[(text, dependency, constituency, spans)]`` of the first ``limit`` usable sentences, and skip counts."""

    skipped: Counter = Counter()
    out: list = []
    limit = cc.limit or math.inf
    if cc.kind == "conllu":

        for dep, text in read_conllu_with_text(cc.path):
            if len(out) >= limit:
                break
            if not text:
                skipped["no # text"] += 1
                continue
            out.append((text, dep, dependency_to_constituency(dep), None))
        return out, skipped

    lines = []
    for line in read_lines(cc.path):
        if len(lines) >= limit:
            break
        if line.strip():
            lines.append(line.strip())
        else:
            skipped["empty line"] += 1
    parser = build_parser(cc.parser)
    if not parser.produces_trees:
        raise ConfigError("corpus.parser.name 'none' gives no trees; the probing labels need a parser (spacy, file).")
    prefix = str(cc.path)
    for suf in (".gz",):
        prefix = prefix[: -len(suf)] if prefix.endswith(suf) else prefix
    for text, p in zip(lines, parser.parse(iter(lines), prefix=prefix.rsplit(".", 1)[0], lang=prefix.rsplit(".", 1)[-1])):
        if p.constituency is None or not p.words:
            skipped["no tree"] += 1
            continue
        out.append((text, p.dependency, p.constituency, p.spans))
    return out, skipped


def split_indices(n: int, ratios: tuple[int, int, int], seed: int) -> dict[str, list[int]]:
    """Deterministic shuffle (``random.Random(seed)``) and split by ``ratios`` (valid/test rounded)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    total = sum(ratios)
    n_valid = max(1, round(n * ratios[1] / total))
    n_test = max(1, round(n * ratios[2] / total))
    n_train = n - n_valid - n_test
    if n_train < 1:
        raise ConfigError(f"only {n} usable sentences: too few to split {ratios[0]}/{ratios[1]}/{ratios[2]}.")
    return {"train": order[:n_train], "valid": order[n_train : n_train + n_valid], "test": order[n_train + n_valid :]}


def sentence_labels(trees: list, train_idx: list[int], n_tss: int = 19) -> dict[str, list]:
    """Labels of every sentence (constituency trees); TSS classes fitted on ``train_idx`` only."""

    seqs = [P.top_level_sequence(t) for t in trees]
    fitted = P.tss_classes([seqs[i] for i in train_idx], n_tss)
    keep = {s for s in fitted if s != P.OTHER}
    return {
        "voice": [P.voice(t) for t in trees],
        "tense": [P.tense(t) for t in trees],
        "tss": [s if s in keep else P.OTHER for s in seqs],
        "spc": [P.smallest_phrase_constituent(t) for t in trees],
        "pos": [P.pos_labels(t) for t in trees],
    }


def align_items(raw: list, labels: dict[str, list], vocab, max_len: int, skipped: Counter) -> list[Item | None]:
    """Encode each text with ``vocab`` (a :class:`Vocab`) and align its words to pieces; None for a skipped sentence."""

    out: list[Item | None] = []
    for i, ((text, dep, const, spans), pieces) in enumerate(zip(raw, vocab.encode_spans([r[0] for r in raw]))):
        if not pieces:
            skipped["no pieces"] += 1
            out.append(None)
            continue
        if len(pieces) > max_len:
            skipped[f"longer than {max_len} pieces"] += 1
            out.append(None)
            continue
        try:
            dep, const, al = align_trees(text, [(b, e) for _, b, e in pieces], dep, const, spans)
        except AlignmentError:
            skipped["unalignable"] += 1
            out.append(None)
            continue
        if al.merged:
            skipped["(words merged by the subword pieces, kept)"] += al.merged
        lab: dict[str, Any] = {t: labels[t][i] for t in SENTENCE_TASKS}
        for t in WORD_TASKS:
            lab[t] = [labels[t][i][g[0]] for g in al.groups]
        out.append(Item(text=text, trees=(dep, const), ids=[x for x, _, _ in pieces] + [EOS], wop=al.word_of_piece,
                        labels=lab, words=[const.words[k] for k in range(len(const.words))]))
    return out


# --------------------------------------------------------------------------- models


class ScratchEncoder(nn.Module):
    """Embeddings + sinusoidal positions + ``layers`` encoder layers (+ final LayerNorm when pre-norm)."""

    def __init__(self, mc: ProbeModelConfig, vocab_size: int):
        super().__init__()

        ov = {f"encoder_self.{int(k)}": v for k, v in mc.overrides.items()}
        self.cfg = ModelConfig(d_model=mc.d_model, ffn_dim=mc.ffn_dim, heads=mc.heads, encoder_layers=mc.layers,
                               decoder_layers=0, dropout=mc.dropout, attention_dropout=mc.attention_dropout,
                               pre_norm=mc.pre_norm, max_positions=mc.max_positions,
                               attention=AttentionPlan(encoder_self=mc.attention, overrides=ov))

        self.embed = nn.Embedding(vocab_size, mc.d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, mean=0.0, std=mc.d_model**-0.5)
        nn.init.zeros_(self.embed.weight[PAD])
        self.register_buffer("positions", sinusoidal_table(mc.max_positions, mc.d_model), persistent=False)
        self.stack = EncoderStack(self.cfg, mc.layers, self.positions)
        self.scale = math.sqrt(mc.d_model)
        self.dropout = mc.dropout

    def required_structures(self) -> dict:
        return collect_structures(self)

    def forward(self, src, mask, structures):
        S = src.shape[1]
        x = F.dropout(self.embed(src) * self.scale + self.positions[:S], self.dropout, self.training)
        return self.stack(x, mask, structures)[0][:, :S]  # the tokens (hypernodes, if any, dropped)


def _mlp(d: int, mc: MLPConfig, n_out: int) -> nn.Module:
    if mc.hidden <= 0:
        return nn.Sequential(nn.Dropout(mc.dropout), nn.Linear(d, n_out))
    return nn.Sequential(nn.Linear(d, mc.hidden), nn.ReLU(), nn.Dropout(mc.dropout), nn.Linear(mc.hidden, n_out))


def load_frozen(checkpoint: str, data_dir: str = ""):
    """(model, source vocabulary, label_ids, structure specs, model config dict) of an NMT checkpoint."""

    state = load_checkpoint(checkpoint)
    saved = copy.deepcopy(state["config"])
    if saved.get("data", {}).get("structures") == []:  # older checkpoints saved an empty list
        saved["data"]["structures"] = {}
    cfg = from_dict(saved, where=f"{checkpoint} (saved config)", saved=True)
    vocab, tgt_vocab = checkpoint_vocabs(state, checkpoint, data_dir or None)
    if vocab.lowercase or vocab.moses:  # the probe encodes the treebank's raw text (align_items)
        raise UserError(f"{checkpoint}: trained on {'Moses-tokenized' if vocab.moses else 'lowercased'} text "
                        f"(prepare --{'moses' if vocab.moses else 'lowercase'}), but probing reads the treebank's raw "
                        "text, so its encoder would see text in a form it was never trained on; probe a model "
                        "trained without --lowercase and --moses.")
    model = build_model(cfg.model, len(vocab), len(tgt_vocab))
    load_model_state(model, state, checkpoint)
    specs = {**cfg.data.structures, **model.required_structures()}
    label_ids: dict[str, int] = {}
    root = Path(data_dir or cfg.data.path)
    if specs and state.get("data_syntax"):
        label_ids = {x: i for i, x in enumerate(state["data_syntax"].get("labels") or [])}
    elif specs and (root / "manifest.json").exists():
        manifest = json.loads((root / "manifest.json").read_text())
        label_ids = {x: i for i, x in enumerate((manifest.get("syntax") or {}).get("labels", []))}
    return model, vocab, label_ids, specs, to_dict(cfg.model)


# --------------------------------------------------------------------------- batching


def _batch(items: list[Item], specs: dict, label_ids: dict, device):

    src, mask = pad_sources([it.ids for it in items])
    structures = {}
    if specs:
        structures = build_structures(specs, [it.trees for it in items], [it.wop for it in items], src.shape[1],
                                      label_ids)
    return src.to(device), mask.to(device), {k: v.to(device) for k, v in structures.items()}


def _pool(h: torch.Tensor, items: list[Item], sentence_pool: str, word_pool: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S, D) encoder states -> sentence vectors (B, D) and word vectors (sum of words, D)."""
    sent, words = [], []
    for b, it in enumerate(items):
        P = len(it.wop)
        sent.append(h[b, :P].mean(0) if sentence_pool == "mean" else h[b, P])
        wop = torch.as_tensor(it.wop, device=h.device)
        W = int(it.wop[-1]) + 1
        if word_pool == "first":
            first = torch.cat([torch.zeros(1, dtype=torch.long, device=h.device),
                               torch.nonzero(wop[1:] != wop[:-1]).flatten() + 1])
            words.append(h[b, first])
        else:
            s = torch.zeros(W, h.shape[-1], device=h.device, dtype=h.dtype).index_add_(0, wop, h[b, :P])
            words.append(s / torch.bincount(wop, minlength=W).unsqueeze(1).to(h.dtype))
    return torch.stack(sent), torch.cat(words)


def _targets(items: list[Item], task: str, classes: dict[str, int], device) -> torch.Tensor:
    unk = len(classes)  # labels unseen in training: never predicted, always wrong
    if task in SENTENCE_TASKS:
        ys = [classes.get(it.labels[task], unk) for it in items]
    else:
        ys = [classes.get(x, unk) for it in items for x in it.labels[task]]
    return torch.tensor(ys, dtype=torch.long, device=device)


# --------------------------------------------------------------------------- training


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    return int((logits.argmax(-1) == y).sum()), int(y.numel())


def _train_frozen_task(task, feats, ys, n_classes, cfg: ProbeConfig, device, log, bs: int):
    """Train an MLP on cached features (``bs`` vectors a batch); returns (valid acc, test acc, best epoch)."""
    torch.manual_seed(cfg.train.seed)
    d = feats["train"].shape[1]
    mlp = _mlp(d, cfg.mlp, n_classes).to(device)
    opt = torch.optim.Adam(mlp.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    X, Y = feats["train"], ys["train"]
    g = torch.Generator().manual_seed(cfg.train.seed)
    best = (-1.0, 0.0, 0)
    best_state = None

    def evaluate(split):
        mlp.eval()
        with torch.no_grad():
            c, n = _accuracy(mlp(feats[split]), ys[split])
        return c / max(n, 1)

    for epoch in range(1, cfg.train.epochs + 1):
        mlp.train()
        perm = torch.randperm(X.shape[0], generator=g).to(device)
        for s in range(0, X.shape[0], bs):
            idx = perm[s : s + bs]
            loss = F.cross_entropy(mlp(X[idx]), Y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        va = evaluate("valid")
        if va > best[0]:
            best = (va, 0.0, epoch)
            best_state = copy.deepcopy(mlp.state_dict())
        log(f"probe {task}: epoch {epoch} valid {va:.4f}")
    mlp.load_state_dict(best_state)
    return best[0], evaluate("test"), best[2]


def _train_scratch_task(task, splits, classes, vocab_size, cfg: ProbeConfig, device, log):
    torch.manual_seed(cfg.train.seed)
    enc = ScratchEncoder(cfg.model, vocab_size).to(device)
    head = _mlp(cfg.model.d_model, cfg.mlp, len(classes)).to(device)
    specs = enc.required_structures()
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    rng = random.Random(cfg.train.seed)
    bs = cfg.train.batch_size
    word = task in WORD_TASKS

    def run(items, train: bool):
        enc.train(train)
        head.train(train)
        correct = total = 0
        order = list(range(len(items)))
        if train:
            rng.shuffle(order)
        else:  # length-sorted for speed
            order.sort(key=lambda i: len(items[i].ids))
        for s in range(0, len(order), bs):
            b = [items[i] for i in order[s : s + bs]]
            src, mask, structures = _batch(b, specs, {}, device)
            with torch.set_grad_enabled(train):
                h = enc(src, mask, structures)
                sent, words = _pool(h, b, cfg.sentence_pool, cfg.word_pool)
                logits = head(words if word else sent)
                y = _targets(b, task, classes, device)
                if train:
                    keep = y < len(classes)
                    loss = F.cross_entropy(logits[keep], y[keep])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                else:
                    c, n = _accuracy(logits, y)
                    correct, total = correct + c, total + n
        return correct / max(total, 1)

    best = (-1.0, 0)
    best_state = None
    for epoch in range(1, cfg.train.epochs + 1):
        run(splits["train"], True)
        va = run(splits["valid"], False)
        if va > best[0]:
            best = (va, epoch)
            best_state = (copy.deepcopy(enc.state_dict()), copy.deepcopy(head.state_dict()))
        log(f"probe {task}: epoch {epoch} valid {va:.4f}")
    enc.load_state_dict(best_state[0])
    head.load_state_dict(best_state[1])
    return best[0], run(splits["test"], False), best[1], sum(p.numel() for p in params)


# --------------------------------------------------------------------------- baselines and report


def _labels_of(items: list[Item], task: str) -> list[str]:
    if task in SENTENCE_TASKS:
        return [it.labels[task] for it in items]
    return [x for it in items for x in it.labels[task]]


def baselines(splits: dict[str, list[Item]], task: str) -> dict[str, float]:
    train, test = _labels_of(splits["train"], task), _labels_of(splits["test"], task)
    major = Counter(train).most_common(1)[0][0]
    out = {"majority": sum(y == major for y in test) / max(len(test), 1), "majority_label": major}
    if task in WORD_TASKS:
        by_word: dict[str, Counter] = {}
        for it in splits["train"]:
            for w, y in zip(it.words, it.labels[task]):
                by_word.setdefault(w.lower(), Counter())[y] += 1
        pred = [by_word[w.lower()].most_common(1)[0][0] if w.lower() in by_word else major
                for it in splits["test"] for w in it.words]
        out["word_form"] = sum(p == y for p, y in zip(pred, test)) / max(len(test), 1)
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def write_report(out, result: dict) -> Path:
    """probe.md into ``out`` (a :class:`structnmt.fileio.files.OutputDir`)."""
    cols = [(result["name"], result)]
    for path in result["config"]["compare"]:
        other = json.loads(Path(path).read_text())
        cols.append((other["name"], other))
    tasks = result["config"]["tasks"]
    lines = [f"# Probing (MG-SA §4.2, Table 5): {result['name']}", "",
             "Test accuracy (%) per task; model selection on valid accuracy. Baselines are computed on the same "
             "test split: *majority* predicts the training split's most frequent label; *word form* (word tasks) "
             "predicts the most frequent training label of the lower-cased word (majority for unseen words).", ""]
    head = ["Task", "classes", "test items", "majority", "word form"] + [c for c, _ in cols]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    avg: dict[str, list] = {c: [] for c, _ in cols}
    for t in tasks:
        r = result["tasks"][t]
        row = [t.upper() if t != "tense" and t != "voice" else t.capitalize(), str(r["classes"]), str(r["test_items"]),
               _pct(r["majority"]), _pct(r.get("word_form"))]
        for c, res in cols:
            acc = res["tasks"].get(t, {}).get("test_acc")
            row.append(_pct(acc))
            avg[c].append(acc)
        lines.append("| " + " | ".join(row) + " |")
    if len(tasks) > 1:
        maj = [result["tasks"][t]["majority"] for t in tasks]
        row = ["Avg", "", "", _pct(sum(maj) / len(maj)), ""]
        for c, _ in cols:
            v = avg[c]
            row.append(_pct(sum(v) / len(v)) if all(x is not None for x in v) else "–")
        lines.append("| " + " | ".join(row) + " |")
    c = result["corpus"]
    lines += ["", "## Run", "",
              f"- command: `{result['command']}`",
              f"- mode: {result['config']['mode']}"
              + (f" (checkpoint `{result['config']['checkpoint']}`)" if result["config"]["mode"] == "frozen" else
                 f" ({result['config']['model']['layers']} layers, attention `{result['config']['model']['attention']['name']}`"
                 f" {result['config']['model']['attention']['options'] or ''})"),
              f"- representation: sentence = {result['config']['sentence_pool']} "
              f"({'mean of the pieces, EOS excluded' if result['config']['sentence_pool'] == 'mean' else 'EOS vector'}); "
              f"word = {result['config']['word_pool']} piece(s) of the word",
              f"- corpus: `{c['path']}` ({c['kind']}), {c['read']} sentences read, {c['used']} used; split "
              f"train/valid/test = {c['train']}/{c['valid']}/{c['test']} sentences "
              f"({c['train_words']}/{c['valid_words']}/{c['test_words']} words); skipped: {c['skipped'] or 'none'}",
              f"- vocabulary: {result['vocab']}",
              f"- hardware: {result['hardware']}; wall time {result['seconds']:.0f} s",
              "- best epoch per task (valid accuracy): "
              + ", ".join(f"{t} {result['tasks'][t]['best_epoch']} ({_pct(result['tasks'][t]['valid_acc'])})" for t in tasks),
              ""]
    return out.write_text("probe.md", "\n".join(lines))


# --------------------------------------------------------------------------- entry point


def _device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


@dataclass
class _Encoder:
    """What the probe's pieces come from: the vocabulary, and in frozen mode the NMT model."""

    vocab: Any  # structnmt.data.vocab.Vocab
    vocab_desc: str  # the report's "vocabulary" line
    model: Any = None  # frozen: the checkpoint's model
    label_ids: dict[str, int] = field(default_factory=dict)  # frozen: syntax label ids of the checkpoint
    specs: dict = field(default_factory=dict)  # frozen: the structures its encoder reads
    mcfg: dict | None = None  # frozen: the checkpoint's model config


def _read_usable_corpus(cfg: ProbeConfig) -> tuple[list, Counter, int]:
    """The corpus's usable sentences, skip counts and sentences read; refused under 3 sentences."""
    raw, skipped = read_corpus(cfg.corpus)
    n_read = len(raw) + sum(skipped.values())
    if len(raw) < 3:
        drops = "".join(f", {n} skipped ({why})" for why, n in skipped.items())
        raise ConfigError(f"corpus.path={cfg.corpus.path} gave {len(raw)} usable sentence(s){drops}: the probe needs "
                          f"at least 3 (a training, a validation and a test split); give a larger file.")
    return raw, skipped, n_read


def _load_encoder(cfg: ProbeConfig, outdir, raw: list, train_idx: list[int]) -> _Encoder:
    """The checkpoint (frozen), or the scratch vocabulary: ``model.vocab`` or one trained on the training split."""
    if cfg.mode == "frozen":
        model, vocab, label_ids, specs, mcfg = load_frozen(cfg.checkpoint, cfg.data_dir)
        return _Encoder(vocab, f"the checkpoint's ({len(vocab)} pieces)", model, label_ids, specs, mcfg)

    if cfg.model.vocab:
        vocab = Vocab(cfg.model.vocab)
        return _Encoder(vocab, f"`{cfg.model.vocab}` ({len(vocab)} pieces)")
    out = outdir.path
    outdir.claim("spm.model")
    outdir.claim("spm.vocab")
    size = cfg.model.vocab_size
    try:
        vocab = train_sentencepiece((raw[i][0] for i in train_idx), out / "spm",  # atomic files
                                    vocab_size=size, num_threads=1)
    except VocabSizeError as err:
        need, least = ((f"at least {err.needed:,}", f"model.vocab_size={err.needed} or more") if err.needed
                       else ("more than 4", "a larger model.vocab_size"))
        raise ConfigError(f"model.vocab_size={size} is too small for the probe's training split (corpus.path="
                          f"{cfg.corpus.path}): SentencePiece needs {need} pieces for it (its 4 special pieces and "
                          f"one for each distinct character); give {least} (the default is 1000).",
                          ("model.vocab_size",)) from None
    outdir.record("spm.model", "spm.vocab")
    return _Encoder(vocab, f"SentencePiece BPE trained on the training split, {len(vocab)} pieces "
                        f"(`{out / 'spm.model'}`)")


def _frozen_split_features(enc: _Encoder, its: list[Item], cfg: ProbeConfig, device) -> dict[str, torch.Tensor]:
    """Sentence (N, D) and word (sum of words, D) vectors of one split, in the split's order."""
    sents, words = [], []
    order = sorted(range(len(its)), key=lambda i: len(its[i].ids))
    inv = [0] * len(its)
    for pos, i in enumerate(order):
        inv[i] = pos
    for s in range(0, len(order), 64):
        b = [its[i] for i in order[s : s + 64]]
        src, mask, structures = _batch(b, enc.specs, enc.label_ids, device)
        h = enc.model.encode(src, mask, structures).memory[:, : src.shape[1]].float()
        sv, wv = _pool(h, b, cfg.sentence_pool, cfg.word_pool)
        sents.append(sv)
        words.extend(torch.split(wv, [int(x.wop[-1]) + 1 for x in b]))
    sents_t = torch.cat(sents)[torch.tensor(inv)]
    words_t = torch.cat([words[inv[i]] for i in range(len(its))])
    return {"sent": sents_t, "word": words_t}


def _frozen_features(enc: _Encoder, splits: dict[str, list[Item]], cfg: ProbeConfig,
                     device) -> dict[str, dict[str, torch.Tensor]]:
    """Freeze the checkpoint's model and encode every split once: split -> {"sent", "word"} vectors."""
    enc.model.to(device).eval()
    for p in enc.model.parameters():
        p.requires_grad_(False)
    feats: dict[str, dict[str, torch.Tensor]] = {}
    with torch.no_grad():
        for k, its in splits.items():
            feats[k] = _frozen_split_features(enc, its, cfg, device)
    return feats


def _probe_task(task: str, splits: dict[str, list[Item]], feats, vocab_size: int, cfg: ProbeConfig, device,
                log) -> dict:
    """Train and score one task (on frozen features or with a scratch encoder); its entry of ``tasks``."""
    train_labels = _labels_of(splits["train"], task)
    classes = {y: i for i, y in enumerate(sorted(set(train_labels)))}
    base = baselines(splits, task)
    if cfg.mode == "frozen":
        kind = "sent" if task in SENTENCE_TASKS else "word"
        X = {k: feats[k][kind] for k in splits}
        Y = {k: _targets(splits[k], task, classes, device) for k in splits}
        keep = Y["train"] < len(classes)
        X["train"], Y["train"] = X["train"][keep], Y["train"][keep]
        # word tasks batch the words of about batch_size sentences: as many updates as sentence tasks
        per_sent = 1 if task in SENTENCE_TASKS else max(1, round(len(train_labels) / len(splits["train"])))
        va, te, ep = _train_frozen_task(task, X, Y, len(classes), cfg, device, log, cfg.train.batch_size * per_sent)
        n_params = None
    else:
        va, te, ep, n_params = _train_scratch_task(task, splits, classes, vocab_size, cfg, device, log)
    result = {"test_acc": te, "valid_acc": va, "best_epoch": ep, "classes": len(classes),
              "test_items": len(_labels_of(splits["test"], task)), "trained_params": n_params,
              "unseen_test_labels": sum(y not in classes for y in _labels_of(splits["test"], task)),
              **base}
    log(f"probe {task}: test {te:.4f} (majority {base['majority']:.4f})")
    return result


def _hardware(device: torch.device) -> str:
    """The report's hardware line: machine, CPUs, torch threads, device (and GPU name)."""
    hw = f"{platform.machine()} {platform.processor() or ''}".strip() + f", {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, device {device}"
    if device.type == "cuda":
        hw += f" ({torch.cuda.get_device_name(device)})"
    return hw


def _corpus_summary(cfg: ProbeConfig, n_read: int, splits: dict[str, list[Item]], skipped: Counter) -> dict:
    """probe.json's ``corpus``: sentences read and used, split sizes (sentences, words), skip counts."""
    return {"path": cfg.corpus.path, "kind": cfg.corpus.kind, "read": n_read, "used": sum(len(v) for v in splits.values()),
            **{k: len(v) for k, v in splits.items()},
            **{f"{k}_words": sum(len(it.words) for it in v) for k, v in splits.items()},
            "skipped": dict(skipped)}


def run_probe(cfg: ProbeConfig, log=print) -> Path:
    """Run every task of ``cfg``; return the path of the Markdown report (``out_dir/probe.md``)."""
    t0 = time.time()

    set_threads(cfg.train.threads)
    device = _device(cfg.train.device)

    outdir = OutputDir(cfg.out_dir, "probe", expect=("probe.json", "probe.md"))
    raw, skipped, n_read = _read_usable_corpus(cfg)
    split_idx = split_indices(len(raw), cfg.split.ratios, cfg.split.seed)
    labels = sentence_labels([r[2] for r in raw], split_idx["train"])

    enc = _load_encoder(cfg, outdir, raw, split_idx["train"])
    items = align_items(raw, labels, enc.vocab, cfg.corpus.max_len, skipped)
    splits = {k: [items[i] for i in v if items[i] is not None] for k, v in split_idx.items()}
    if not splits["train"] or not splits["valid"] or not splits["test"]:
        raise ConfigError("a split is empty after alignment; use more sentences (corpus.limit).")
    log(f"probe: {len(raw)} sentences -> train/valid/test {[len(splits[k]) for k in ('train', 'valid', 'test')]}")

    results: dict[str, dict] = {}
    extra: dict[str, Any] = {}
    feats = None
    if cfg.mode == "frozen":
        feats = _frozen_features(enc, splits, cfg, device)
        extra["encoder"] = {"d_model": enc.mcfg["d_model"], "layers": enc.mcfg["encoder_layers"],
                            "attention": enc.mcfg["attention"]["encoder_self"]}
    for task in cfg.tasks:
        results[task] = _probe_task(task, splits, feats, len(enc.vocab), cfg, device, log)

    name = cfg.name or (f"frozen {Path(cfg.checkpoint).parent.name}/{Path(cfg.checkpoint).name}" if cfg.mode == "frozen"
                        else f"scratch {cfg.model.attention.name}")
    result = {
        "name": name,
        "command": ("structnmt " + shlex.join(sys.argv[1:]) if Path(sys.argv[0]).name == "structnmt"
                    else shlex.join(sys.argv)),
        "config": to_dict(cfg),
        "corpus": _corpus_summary(cfg, n_read, splits, skipped),
        "vocab": enc.vocab_desc,
        "hardware": _hardware(device),
        "seconds": time.time() - t0,
        "tasks": results,
        **extra,
    }
    outdir.write_text("probe.json", json.dumps(result, indent=2) + "\n")
    return write_report(outdir, result)
