"""Decoding steps of fixed shapes, replayed as one CUDA graph (``decode.cuda_graphs``).

A decoding step of a small model launches a few hundred kernels (every attention, layer norm and
projection of every layer), each costing the host a few microseconds whatever its size: on a GPU the step
is bound by the Python process, not by the device. A CUDA graph records the step's kernels once and
replays them with one call — but only if every replay runs the same kernels on the same memory: the same
shapes, no allocation that moves, no value read back by the host. Two things of the ordinary search break
that (:mod:`structnmt.decode.beam`): the self-attention cache grows by a position every step (a new,
longer tensor each time), and the batch shrinks as sentences finish.

Here both are fixed for the whole batch:

* :class:`StaticCache`: every growing entry is allocated once at its full length (``capacity``, the batch's
  longest possible output) and step ``t`` writes its position ``t`` in place; the position is a device
  tensor (:attr:`StaticCache.position`), read by the step's kernels, never by the host. Self-attention reads
  all ``capacity`` keys with the later ones masked (:meth:`StaticCache.self_key_mask`): the masked keys'
  weights are exact zeros, so the outputs are those of the growing cache up to the order of float sums.
  Fixed-size state (the RNN decoder's h, c, u) is overwritten in place.
* :class:`StaticSteps`: the search keeps ``sentences x beam`` rows, a sentence's hypotheses in its own
  ``beam`` *slots*, for the whole batch: a finished sentence's slots go on computing (their output is never
  read) instead of leaving the tensors. The search itself still works on the compact rows of the sentences
  left; each step its last tokens are written into their slots, the step runs on all slots, and the
  compact rows' logits are read out of the slots; the beam's reorder is one in-place gather of each cache
  tensor over the slots (outside the graph).

On a CUDA device with ``graphs=True`` the step (the model's ``decode_static``) runs eagerly at step 0
(which fills the source keys and values and allocates the cache), is captured at step 1 (after one untimed
warm-up run whose writes are undone), and replayed from there on. :class:`GraphPool` keeps the steps from
batch to batch: a batch padded to its bucket (sentences, source length and longest output rounded up to
multiples of 8) takes the bucket's tensors, written in place, and replays the graph the bucket's first batch
recorded: one capture a bucket, not a batch (``translate`` keeps one pool per call, a ``Translator`` one per
number format). Without ``graphs`` the same fixed-shape step runs eagerly — what the tests check on the CPU:
the same translations as the ordinary search, the same kernels with the same shapes at every step, no read
of a device value, and, with a stand-in for the graph that replays the recorded calls on the recorded
tensors, batches of a bucket translating as the ordinary search does.

Models take part through two optional methods of the decoding protocol:
``decode_static(last_tokens (N, 1), enc, cache: StaticCache) -> logits (N, V)`` and
``static_decoding_refusal() -> str | None`` (why this model cannot, in words, or None).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import torch
from torch import Tensor

from ..data.vocab import BOS
from ..nn.attention import IncrementalCache


class StaticCache(IncrementalCache):
    """An :class:`IncrementalCache` whose tensors never change shape or address after their first step.

    ``extend`` writes its one new position at :attr:`position` into a buffer of ``capacity`` positions;
    ``set`` of an existing entry (fixed-size state) copies into its tensors; per-sentence entries (the
    source keys and values, set once) stay as set. The beam's reorder is :meth:`reorder_slots`, in place.
    """

    def __init__(self, beam: int, capacity: int, device: torch.device) -> None:
        super().__init__(beam=beam)
        self.capacity = capacity
        self.position = torch.zeros((), dtype=torch.long, device=device)  # the step being decoded
        self._positions = torch.arange(capacity, device=device)
        self._grown: set[str] = set()  # the entries made by extend (keys and values written at their position)
        self._spare: dict[str, dict[str, Tensor]] = {}  # the last batch's tensors, taken again by set and extend

    def clear(self) -> None:
        """Empty the cache for the next batch of the same shapes, keeping its tensors: a new entry takes the
        tensors of the entry of the same name and shapes again (written into: the addresses a recorded graph
        reads), so the next batch's steps find an empty cache as the first batch's did."""
        for key in self._grown:  # the grown entries' later positions are masked; zeros make them finite too
            for t in self.entries[key].values():
                t.zero_()
        self._spare = self.entries
        self.entries, self.per_sentence, self.pending = {}, set(), {}
        self._grown = set()
        self.position.zero_()

    def _reused(self, key: str, value: dict[str, Tensor], shapes: dict[str, list[int]]) -> dict[str, Tensor] | None:
        """The spare entry ``key`` if its tensors have these ``shapes`` and ``value``'s dtypes, else None."""
        spare = self._spare.pop(key, None)
        if spare is None or spare.keys() != value.keys():
            return None
        if any(list(spare[n].shape) != shapes[n] or spare[n].dtype != t.dtype for n, t in value.items()):
            return None
        return spare

    def self_key_mask(self) -> Tensor:
        """(1, capacity) bool: the positions written so far, this step's included (what causality allows)."""
        return (self._positions <= self.position)[None, :]

    def get(self, key: str) -> dict[str, Tensor] | None:
        return self.entries.get(key)

    def set(self, key: str, value: dict[str, Tensor], *, per_sentence: bool = False) -> None:
        entry = self.entries.get(key)
        if entry is None or per_sentence:
            spare = self._reused(key, value, {name: list(t.shape) for name, t in value.items()})
            if spare is None:
                spare = {name: t.contiguous().clone() for name, t in value.items()}
            else:
                for name, t in value.items():
                    spare[name].copy_(t)
            super().set(key, spare, per_sentence=per_sentence)
            return
        for name, t in value.items():
            entry[name].copy_(t)

    def extend(self, key: str, new: dict[str, Tensor], dim: int) -> dict[str, Tensor]:
        entry = self.entries.get(key)
        if entry is None:
            shapes = {name: [self.capacity if d == dim else size for d, size in enumerate(t.shape)]
                      for name, t in new.items()}
            entry = self._reused(key, new, shapes) or {name: t.new_zeros(shapes[name]) for name, t in new.items()}
            self.entries[key] = entry
            self._grown.add(key)
        at = self.position.view(1)
        for name, t in new.items():
            if t.shape[dim] != 1:
                raise ValueError(f"StaticCache.extend: one new position a step, got {t.shape[dim]} for {key}.{name}")
            entry[name].index_copy_(dim, at, t)
        return entry

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        raise TypeError("a StaticCache keeps its rows in place: reorder it with reorder_slots(index)")

    def reorder_slots(self, index: Tensor) -> None:
        """Every slot ``s`` takes the state of slot ``index[s]`` (in place); per-sentence entries stay."""
        for key, entry in self.entries.items():
            if key not in self.per_sentence:
                for t in entry.values():
                    t.copy_(t.index_select(0, index))

    def snapshot(self) -> dict[str, dict[str, Tensor]]:
        """Copies of the state a step overwrites (the entries ``set`` updates in place), to undo a warm-up run's
        writes with :meth:`restore`. The grown entries are left out: a step writes its own position there, the
        same values a rerun writes again; the per-sentence entries are only read."""
        return {key: {name: t.clone() for name, t in entry.items()} for key, entry in self.entries.items()
                if key not in self._grown and key not in self.per_sentence}

    def restore(self, saved: dict[str, dict[str, Tensor]]) -> None:
        for key, entry in saved.items():
            for name, t in entry.items():
                self.entries[key][name].copy_(t)


def static_decoding_refusal(model) -> str | None:
    """Why ``model`` cannot decode in fixed shapes (one clause), or None if it can."""
    if not hasattr(model, "decode_static"):
        return f"{type(model).__name__} has no fixed-shape decoding step (decode_static)"
    refusal = getattr(model, "static_decoding_refusal", lambda: None)
    return refusal()


def cuda_graphs_refusal(model, device: torch.device) -> str | None:
    """Why ``model`` cannot decode with CUDA graphs on ``device`` (one clause), or None if it can."""
    if device.type != "cuda":
        return (f"CUDA graphs are a CUDA feature and this model decodes on {device.type} (on a CPU there is no "
                "kernel launch to save)")
    return static_decoding_refusal(model)


class StaticSteps:
    """The model's decoding steps over ``sentences x beam`` fixed slots (see the module docstring).

    ``enc``: the encoder output, one row per sentence; ``shared``: the model reads it so for all the beam's
    hypotheses (else it is copied to one row per slot once, here). ``capacity``: the most steps the batch
    can take. ``graphs``: capture the step at step 1 and replay it (CUDA only)."""

    def __init__(self, model, enc, *, sentences: int, beam: int, capacity: int, shared: bool, graphs: bool) -> None:
        device = enc.memory.device  # graphs on a CUDA device: the caller checks (cuda_graphs_refusal)
        self.model = model
        self.beam = beam
        self.shared = shared
        self.graphs = graphs
        self.cache = StaticCache(beam if shared else 1, capacity, device)
        slots = sentences * beam
        self.enc = self._per_slot(enc)
        self.tokens = torch.full((slots, 1), BOS, dtype=torch.long, device=device)  # each slot's last token
        self.rows = torch.arange(sentences, device=device) * beam  # the slot of each compact row
        self._all_slots = torch.arange(slots, device=device)
        self._graph = None
        self._out: Tensor | None = None

    def _per_slot(self, enc):
        """The encoder output as the step reads it: one row per sentence (shared), else one per slot."""
        if self.shared or self.beam == 1:
            return enc
        return enc.reorder(torch.arange(enc.memory.shape[0], device=enc.memory.device).repeat_interleave(self.beam))

    def load(self, enc, sentences: int) -> bool:
        """Take the next batch, of the shapes of the first (``enc`` as :class:`GraphPool` pads it, ``sentences`` of
        its rows real), into this object's tensors, written in place, so that a recorded graph replays it: False
        (nothing changed) if its tensors' shapes differ."""
        new = _leaves(self._per_slot(enc))
        old = _leaves(self.enc)
        if len(new) != len(old) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(old, new)):
            return False
        for a, b in zip(old, new):
            a.copy_(b)
        self.cache.clear()
        self.tokens.fill_(BOS)
        self.rows = torch.arange(sentences, device=self.tokens.device) * self.beam
        return True

    def _step(self) -> Tensor:
        return self.model.decode_static(self.tokens, self.enc, self.cache)

    def logits(self, tokens: Tensor, step: int) -> Tensor:
        """tokens (n, t): the compact rows' prefixes -> their next-token logits (n, V), a fresh tensor."""
        self.tokens.index_copy_(0, self.rows, tokens[:, -1:])
        self.cache.position.fill_(step)
        if step == 0:  # eager: it sets what the recorded steps only read (the source keys and values, the state)
            out = self._step()
        elif self._graph is not None:
            self._graph.replay()
            out = self._out
        elif self.graphs:
            self._graph, out = _capture(self._step, self.cache)
            self._graph.replay()
            self._out = out
        else:
            out = self._step()
        return out.index_select(0, self.rows)

    def reorder(self, rows: Tensor, active: Tensor) -> None:
        """rows (n' * beam,): the compact row of the last step each new row extends; active (n',): the sentences
        left (their ids: slot groups). Moves every new hypothesis's state into its slot."""
        parents = self.rows.index_select(0, rows)
        new_rows = (active[:, None] * self.beam + torch.arange(self.beam, device=active.device)).view(-1)
        index = self._all_slots.index_put((new_rows,), parents)
        self.cache.reorder_slots(index)
        self.rows = new_rows


def _leaves(enc) -> list[Tensor]:
    """The tensors of an encoder output (a dataclass of tensors, tuples and dicts of them), in a fixed order."""
    out = []
    for f in dataclasses.fields(enc):
        out += [t for t in torch.utils._pytree.tree_leaves(getattr(enc, f.name)) if isinstance(t, Tensor)]
    return out


def _round_up(n: int, multiple: int = 8) -> int:
    return -(-n // multiple) * multiple


class GraphPool:
    """Fixed-shape decoding steps kept from batch to batch (``decode.cuda_graphs`` over a whole input): a batch
    is padded to a bucket (its sentences, its source length and its longest output rounded up to multiples of
    8; the added sentences repeat its first, never read; the added source positions masked), and every batch
    of a bucket reuses the bucket's tensors and replays its recorded graph, so a graph is captured once a
    bucket, not once a batch. At most ``size`` buckets are kept (the least recently used is dropped, with its
    graph's memory); each holds its cache (slots x layers x capacity) and encoder output on the device until
    dropped or :meth:`clear`. An encoder output that cannot be padded (source structures, whose layout the
    mechanism defines) gets steps of its own, one capture for its batch."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._steps: OrderedDict[tuple, StaticSteps] = OrderedDict()

    def clear(self) -> None:
        """Drop every bucket (its tensors and its graph's memory)."""
        self._steps.clear()

    def steps(self, model, enc, *, sentences: int, beam: int, capacity: int, shared: bool,
              max_positions: int | None = None, make=None) -> StaticSteps:
        """The steps for this batch (``make``: the :class:`StaticSteps` class to build, a subclass included)."""
        make = make or StaticSteps
        rows, length = _round_up(sentences), _round_up(enc.memory.shape[1])
        table = getattr(model, "positions", None)  # a Transformer's position table: the capacity may not pass it
        limits = [n for n in (max_positions, None if table is None else table.shape[0]) if n is not None]
        capacity = max(capacity, min([_round_up(capacity), *limits]))
        padded = enc.padded(rows, length) if hasattr(enc, "padded") else None
        if padded is None:
            return make(model, enc, sentences=sentences, beam=beam, capacity=capacity, shared=shared, graphs=True)
        # inference tensors (beam search) cannot be written outside inference mode (greedy search): apart
        key = (id(model), rows, length, capacity, beam, shared, torch.is_inference_mode_enabled())
        steps = self._steps.pop(key, None)
        if steps is None or not steps.load(padded, sentences):
            steps = make(model, padded, sentences=rows, beam=beam, capacity=capacity, shared=shared, graphs=True)
            steps.rows = steps.rows[:sentences]
        self._steps[key] = steps  # the most recently used last
        while len(self._steps) > self.size:
            self._steps.popitem(last=False)
        return steps


def _capture(step, cache: StaticCache):
    """Record ``step()`` as a CUDA graph -> (graph, its output tensor). One warm-up run first (:func:`_warm_up`),
    whose writes to the cache are undone: a fixed-size state updated in place would otherwise advance twice."""
    saved = cache.snapshot()
    _warm_up(step)
    cache.restore(saved)
    return _record(step)


def _warm_up(step) -> None:
    """Run ``step()`` once on a side stream, as capturing requires (lazy initialisations, cuBLAS workspaces)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)


def _record(step):
    """-> (a ``torch.cuda.CUDAGraph`` of ``step()``'s kernels, the tensor its replays write the output into)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out
