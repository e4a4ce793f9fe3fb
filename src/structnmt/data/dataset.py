"""Memory-mapped prepared datasets, token-based length-bucketed batches, collation.

A :class:`PreparedSplit` opens ``{split}.{side}.bin/.idx`` with ``numpy.memmap``; only the
offsets (8 bytes per sentence) are read eagerly, so a WMT-size split costs a few
megabytes of RAM however many tokens it has.

Batching follows fairseq: sentences are ordered by (target length, source length) with a
seeded random tie-break, cut greedily into batches whose padded size
``n_sentences * max(len)`` stays under ``max_tokens``, and the list of batches is
shuffled anew each epoch from ``seed + epoch``. The order is a pure function of
``(seed, epoch)``, which is what makes resuming exact: a checkpoint stores only the
epoch and the number of batches consumed in it.

Collated tensors (batch first, ``PAD = 0``):

* ``src``      (B, S)  source pieces + EOS
* ``tgt_in``   (B, T)  BOS + target pieces (decoder input)
* ``tgt_out``  (B, T)  target pieces + EOS (labels)
* ``src_mask`` (B, S)  bool, True = real token (the project-wide polarity: True may attend)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..errors import UserError
from ..syntax.batching import check_structures, feature_values, pad_structures
from ..syntax.features import FEATURES
from ..syntax.trees import trees_from_json
from .feature_store import FeatureStore, open_store
from .vocab import BOS, EOS, PAD, Vocab, VocabError, vocab_pair


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) long
    tgt_in: torch.Tensor  # (B, T) long
    tgt_out: torch.Tensor  # (B, T) long
    src_mask: torch.Tensor  # (B, S) bool, True = real token
    ids: torch.Tensor  # (B,) sentence indices in the split
    structures: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def n_tgt_tokens(self) -> int:
        """The target tokens (EOS included, padding not); counted by numpy while the batch is on the CPU, so
        that counting it there is no read of a tensor (the trainer counts before it moves the batch)."""
        if self.tgt_out.device.type == "cpu":
            return int(np.count_nonzero(self.tgt_out.numpy() != PAD))
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(
            src=self.src.to(device, non_blocking=True),
            tgt_in=self.tgt_in.to(device, non_blocking=True),
            tgt_out=self.tgt_out.to(device, non_blocking=True),
            src_mask=self.src_mask.to(device, non_blocking=True),
            ids=self.ids,
            structures={k: v.to(device, non_blocking=True) for k, v in self.structures.items()},
        )


class PreparedSplit:
    """One split of a prepared dataset, memory-mapped."""

    def __init__(self, root: str | Path, split: str, src_vocab: Vocab | None = None, *,
                 structure_cache_mb: float = 1024):
        self.root = Path(root)
        self.split = split
        # per-sentence structure features, computed once (see structure_values)
        self.structure_cache_bytes = int(structure_cache_mb * 2**20)
        self._feature_cache: dict[tuple, dict[int, object]] = {}
        self._feature_cache_used = 0
        # requests read from their feature store (structnmt features) instead: see open_feature_stores
        self._stores: dict[tuple, FeatureStore] = {}
        self.src_vocab = src_vocab  # derives word boundaries from pieces when there are no parses
        self.data = {}
        self.offsets = {}
        for side in ("src", "tgt"):
            self.offsets[side], self.data[side] = _read_side(self.root, f"{split}.{side}")
        if len(self.offsets["src"]) != len(self.offsets["tgt"]):
            raise DatasetError(f"{self.root / f'{split}.tgt.idx'}: {len(self.offsets['tgt']) - 1:,} sentences, but "
                               f"{split}.src.idx has {len(self.offsets['src']) - 1:,}: the dataset is damaged; "
                               f"prepare it again (structnmt prepare ... --destdir {self.root}).")
        self.src_lens = np.diff(self.offsets["src"])
        self.tgt_lens = np.diff(self.offsets["tgt"])
        # word-level trees and the piece->word alignment, when prepared with a parser
        self.has_trees = (self.root / f"{split}.src.trees.idx").exists()
        if self.has_trees:
            self.tree_offsets = np.fromfile(self.root / f"{split}.src.trees.idx", dtype=np.int64)
            self.tree_data = np.memmap(self.root / f"{split}.src.trees.bin", dtype=np.uint8, mode="r")
            wop_path = self.root / f"{split}.src.wop.bin"
            self.wop_data = (np.memmap(wop_path, dtype=np.int32, mode="r") if wop_path.stat().st_size
                             else np.zeros(0, dtype=np.int32))

    def __len__(self) -> int:
        return len(self.src_lens)

    def get(self, side: str, i: int) -> np.ndarray:
        o = self.offsets[side]
        return np.asarray(self.data[side][o[i]:o[i + 1]])

    def trees(self, i: int, kinds: frozenset[str] = frozenset({"dependency", "constituency"})):
        """(DependencyTree | None, ConstituencyTree | None) of source sentence ``i``; only
        the ``kinds`` asked for are built (the other is None)."""
        if not self.has_trees:
            raise ValueError(f"{self.root}: the {self.split} split has no trees; prepare it with a parser "
                             "(parser.name: spacy | file | synthetic).")
        o = self.tree_offsets
        return trees_from_json(json.loads(bytes(self.tree_data[o[i]:o[i + 1]]).decode("utf-8")), kinds)

    def structure_inputs(self, ids, structures: dict) -> tuple[list, list[np.ndarray]]:
        """(trees, word_of_piece) of sentences ``ids``; trees are loaded only when a
        requested feature reads them."""

        kinds = frozenset(k for spec in structures.values() if spec.feature in FEATURES
                          for k in FEATURES[spec.feature].needs)
        trees = [self.trees(int(i), kinds) for i in ids] if kinds else [(None, None)] * len(ids)
        return trees, [self.word_of_piece(int(i)) for i in ids]

    def open_feature_stores(self, structures: dict) -> dict[str, Path]:
        """Read each request of ``structures`` that has a feature store (``structnmt features``) from it from now
        on: memory-mapped, nothing computed, nothing kept in this process. Returns ``{key: store directory}``
        of those; the others are computed as before. A store made for another dataset or another version of
        the feature's code is refused (:class:`~structnmt.data.feature_store.FeatureStoreError`)."""
        check_structures(structures)
        found: dict[str, Path] = {}
        for key, spec in structures.items():
            store = open_store(self.root, spec, self.split, len(self))
            if store is not None:
                self._stores[_spec_key(spec)] = store
                found[key] = store.path
        return found

    def structure_values(self, ids, structures: dict) -> dict[str, list]:
        """Unpadded feature values (key -> one value per sentence of ``ids``) of the
        requested structures.

        A request with an open feature store (:meth:`open_feature_stores`) is read from it.
        Otherwise, a feature is a pure function of the stored trees and alignment, so each
        (feature, params, sentence) is computed once and kept, up to
        ``structure_cache_mb`` (after that, sentences not yet kept are computed every
        time they are batched). The trainer fills it before the first update
        (:meth:`precompute_structures`), so batching a structure is only padding;
        integer matrices are kept in the smallest integer type that holds them.
        """

        out: dict[str, list] = {}
        ids = [int(i) for i in ids]
        for key, spec in structures.items():
            store = self._stores.get(_spec_key(spec))
            if store is not None:
                out[key] = [store.value(i) for i in ids]
                continue
            cache = self._feature_cache.setdefault(_spec_key(spec), {})
            missing = [i for i in dict.fromkeys(ids) if i not in cache]
            extra: dict[int, object] = {}  # past the memory bound: this call only
            if missing:
                trees, wops = self.structure_inputs(missing, {key: spec})
                for i, v in zip(missing, feature_values(spec, trees, wops)):
                    v = _compact(v)
                    size = _nbytes(v)
                    if self._feature_cache_used + size <= self.structure_cache_bytes:
                        cache[i] = v
                        self._feature_cache_used += size
                    else:
                        extra[i] = v
            out[key] = [cache[i] if i in cache else extra[i] for i in ids]
        return out

    @property
    def structures_kept_mb(self) -> float:
        """Memory (MB) of the feature values this split keeps."""
        return self._feature_cache_used / 2**20

    def precompute_structures(self, structures: dict, *, chunk: int = 1000, progress: bool = False) -> int:
        """Compute and keep the requested features of every sentence, before training
        (within ``structure_cache_mb``); returns how many sentences are kept. Batches then
        only pad (see :meth:`structure_values`). Requests read from a feature store are skipped."""
        structures = {k: s for k, s in structures.items() if _spec_key(s) not in self._stores}
        if not structures:
            return len(self)
        n = len(self)
        bar = tqdm(total=n, desc=f"structures {self.split}", unit="sent", disable=not progress, leave=False)
        kept = 0
        for start in range(0, n, chunk):
            ids = range(start, min(n, start + chunk))
            self.structure_values(ids, structures)
            bar.update(len(ids))
            kept = min(len(self._feature_cache[_spec_key(spec)]) for spec in structures.values())
            if kept < start + len(ids):  # the cache is full: the rest are computed per batch
                break
        bar.close()
        return kept

    def word_of_piece(self, i: int) -> np.ndarray:
        """Word index of every source piece: the parser's words when the split was
        prepared with a parser, else the vocabulary's words (:meth:`Vocab.word_of_piece`: a
        SentencePiece piece starting with ▁ starts a word, a subword-nmt piece ending in @@ is continued)."""
        if self.has_trees:
            o = self.offsets["src"]
            return np.asarray(self.wop_data[o[i]:o[i + 1]], dtype=np.int64)
        if self.src_vocab is None:
            raise ValueError(f"{self.root}: word boundaries of the {self.split} split need its vocabulary.")
        return self.src_vocab.word_of_piece(self.get("src", i))

    def text(self, kind: str) -> list[str]:
        """Raw kept text of a valid/test split: ``kind`` = 'src' or 'ref'."""
        # split on "\n" only: str.splitlines() and universal newlines would also break at
        # "\r", "\x0c", "\u2028"... inside a sentence and misalign the lines with the data
        text = (self.root / f"{self.split}.{kind}.txt").read_bytes().decode("utf-8")
        lines = text.split("\n")
        return lines[:-1] if lines and lines[-1] == "" else lines


class DatasetError(UserError, ValueError):
    """A prepared dataset directory that is missing, incomplete or damaged: prepare it again."""


def _damaged(path: Path, what: str) -> DatasetError:
    return DatasetError(f"{path}: {what}: the dataset is damaged; prepare it again (structnmt prepare ... "
                        f"--destdir {path.parent}).")


def _read_side(root: Path, stem: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, pieces) of ``<stem>.idx`` and ``<stem>.bin``, checked against each other: the offsets start at
    0, never decrease and end at the number of pieces the .bin holds (a cut or swapped file is refused)."""
    idx_path, bin_path = root / f"{stem}.idx", root / f"{stem}.bin"
    for p in (idx_path, bin_path):
        if not p.is_file():
            raise _damaged(p, "missing")
    if idx_path.stat().st_size % 8 or bin_path.stat().st_size % 4:
        raise _damaged(idx_path if idx_path.stat().st_size % 8 else bin_path, "its size is not a whole number of entries")
    idx = np.fromfile(idx_path, dtype=np.int64)
    n_pieces = bin_path.stat().st_size // 4
    if len(idx) == 0 or idx[0] != 0 or (np.diff(idx) < 0).any():
        raise _damaged(idx_path, "not an index of sentence offsets")
    if idx[-1] != n_pieces:
        raise _damaged(bin_path, f"holds {n_pieces:,} pieces, but {idx_path.name} points to {int(idx[-1]):,}")
    data = np.memmap(bin_path, dtype=np.int32, mode="r") if n_pieces else np.zeros(0, dtype=np.int32)
    return idx, data


class PreparedDataset:
    """The manifest, the vocabularies and the splits of a prepared directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        mpath = self.root / "manifest.json"
        if not mpath.exists():
            raise DatasetError(f"{mpath}: no prepared dataset here; run `structnmt prepare` first, or set data.path "
                               "to the directory it wrote.")
        try:
            self.manifest = json.loads(mpath.read_text(encoding="utf-8"))
            entries = self.manifest["vocab"]
            files = {side: entries[side]["file"] for side in ("src", "tgt")}
        except (ValueError, KeyError, TypeError) as err:
            raise _damaged(mpath, f"not a dataset manifest ({err.__class__.__name__})") from None
        try:
            self.src_vocab, self.tgt_vocab = vocab_pair(self.root, files, entries)
        except VocabError:
            raise  # already one sentence naming the file
        except (OSError, RuntimeError, ValueError, IndexError, KeyError) as err:
            raise DatasetError(f"{self.root}: its vocabulary model ({files['src']}, {files['tgt']}) cannot be read "
                               f"({type(err).__name__}); restore the file prepare wrote, or prepare the dataset "
                               "again.") from None
        for side, vocab in (("src", self.src_vocab), ("tgt", self.tgt_vocab)):
            _check_vocab_file(self.root / files[side], vocab, entries[side])

    def split(self, name: str, *, structure_cache_mb: float = 1024) -> PreparedSplit:
        return PreparedSplit(self.root, name, self.src_vocab, structure_cache_mb=structure_cache_mb)

    @property
    def splits(self) -> list[str]:
        return list(self.manifest["counts"])


def _check_vocab_file(path: Path, vocab, entry: dict) -> None:
    """The vocabulary model ``prepare`` wrote, not another one put in its place: its SHA-256 (manifests from
    before the hash: its size) against the manifest's, or one sentence (no training on other pieces)."""
    want_hash, want_size = entry.get("sha256"), entry.get("size")
    if want_hash is not None and vocab.sha256 != want_hash:
        raise DatasetError(f"{path}: not the vocabulary model this dataset was prepared with (sha256 "
                           f"{vocab.sha256[:12]}..., the manifest says {want_hash[:12]}...): the file was replaced or "
                           "edited; restore it or prepare the dataset again.")
    if isinstance(want_size, int) and len(vocab) != want_size:
        raise DatasetError(f"{path}: has {len(vocab)} pieces but the manifest says {want_size}: the file was replaced; "
                           "restore it or prepare the dataset again.")


def _spec_key(spec) -> tuple:
    """Cache key of a structure request: its feature and parameters."""
    return spec.feature, tuple(sorted((k, repr(v)) for k, v in spec.params.items()))


def _compact(value):
    """A feature value with its integer matrices in the smallest integer type that holds them."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "i" and value.ndim >= 2 and value.size:
            lo, hi = int(value.min()), int(value.max())
            for t in (np.int8, np.int16, np.int32):
                if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
                    return value.astype(t)
        return value
    if isinstance(value, tuple):
        return tuple(_compact(v) for v in value)
    return value


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes + 112
    if isinstance(value, (tuple, list)):
        return 64 + sum(_nbytes(v) for v in value)
    return 64


def make_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    *,
    max_tokens: int,
    max_sentences: int = 0,
    max_len: int = 0,
    seed: int = 1,
) -> tuple[list[np.ndarray], int]:
    """Length-bucketed batches of sentence indices; returns (batches, n_filtered).

    Pairs longer than ``max_len`` (either side, EOS included) are filtered and counted.
    A single pair that alone exceeds ``max_tokens`` gets a batch of its own.
    """
    n = len(src_lens)
    size = np.maximum(src_lens, tgt_lens) + 1
    keep = np.ones(n, dtype=bool) if max_len <= 0 else size <= max_len
    filtered = int(n - keep.sum())
    rng = np.random.default_rng(seed)
    tie = rng.random(n)
    order = np.lexsort((tie, src_lens, tgt_lens))
    order = order[keep[order]]
    batches: list[np.ndarray] = []
    start = 0
    cur_max = 0
    sizes = size[order]
    for i in range(len(order)):
        new_max = max(cur_max, int(sizes[i]))
        count = i - start + 1
        if count > 1 and (new_max * count > max_tokens or (max_sentences and count > max_sentences)):
            batches.append(order[start:i])
            start, new_max = i, int(sizes[i])
        cur_max = new_max
    if start < len(order):
        batches.append(order[start:])
    return batches, filtered


class EpochBatchIterator:
    """Yields the batches of an epoch for one rank, in an order fixed by (seed, epoch).

    With ``world_size > 1`` every rank gets ``ceil(n / world)`` batches: the list is
    padded by repeating its first batches so that all ranks step together.
    """

    def __init__(self, batches: list[np.ndarray], *, seed: int, rank: int = 0, world_size: int = 1):
        self.batches = batches
        self.seed = seed
        self.rank = rank
        self.world_size = world_size

    def epoch_order(self, epoch: int) -> list[np.ndarray]:
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.batches))
        ordered = [self.batches[i] for i in perm]
        per_rank = -(-len(ordered) // self.world_size)
        # pad cyclically: a slice of ``ordered`` is too short when there are fewer batches than ranks
        ordered = ordered + [ordered[i % len(ordered)] for i in range(per_rank * self.world_size - len(ordered))]
        return ordered[self.rank :: self.world_size]

    def __len__(self) -> int:
        return -(-len(self.batches) // self.world_size)


def collate(split: PreparedSplit, ids: np.ndarray, structures: dict | None = None,
            label_ids: dict[str, int] | None = None) -> Batch:
    """Pad sentences ``ids`` of ``split`` into a :class:`Batch` (see module docstring).

    ``structures`` (key -> :class:`~structnmt.syntax.batching.StructureSpec`) names the
    structure tensors to build; only those are computed.
    """
    srcs = [split.get("src", int(i)) for i in ids]
    tgts = [split.get("tgt", int(i)) for i in ids]
    B = len(ids)
    S = max(len(s) for s in srcs) + 1
    T = max(len(t) for t in tgts) + 1
    src = np.full((B, S), PAD, dtype=np.int64)
    tgt_in = np.full((B, T), PAD, dtype=np.int64)
    tgt_out = np.full((B, T), PAD, dtype=np.int64)
    for b, (s, t) in enumerate(zip(srcs, tgts)):
        src[b, : len(s)] = s
        src[b, len(s)] = EOS
        tgt_in[b, 0] = BOS
        tgt_in[b, 1 : len(t) + 1] = t
        tgt_out[b, : len(t)] = t
        tgt_out[b, len(t)] = EOS
    src_t = torch.from_numpy(src)
    built = {}
    if structures:
        built = pad_structures(structures, split.structure_values(ids, structures), S, label_ids)
    return Batch(
        src=src_t,
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        src_mask=src_t != PAD,
        ids=torch.as_tensor(np.asarray(ids, dtype=np.int64)),
        structures=built,
    )


def encode_sources(vocab: Vocab, lines: list[str]) -> list[list[int]]:
    """Source lines -> piece ids with EOS, for decoding."""
    return [ids + [EOS] for ids in vocab.encode(lines)]


def pad_sources(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) padded ids and (B, S) bool mask (True = real token)."""
    S = max(len(s) for s in seqs)
    out = torch.full((len(seqs), S), PAD, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out, out != PAD
