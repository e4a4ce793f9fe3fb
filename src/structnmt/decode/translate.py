"""Translate raw text with a trained checkpoint: encode, batch by length, search, detokenise.

A source longer than the model's positions (``model.max_positions``, EOS included)
cannot be encoded. It does not stop the others: by default it gets an empty
translation; with ``too_long="truncate"`` its first ``max_positions - 1`` pieces are
translated. Either way :attr:`Translator.too_long` lists its 1-based line number.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import queue
import signal
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..config import Config, DecodeConfig, ModelConfig, build_dataclass, low_precision_refusal
from ..data.dataset import encode_sources, pad_sources
from ..data.vocab import EOS
from ..errors import CheckpointError, UserError
from ..machine.allocator import configure_allocator
from ..machine.cpu_gemm import to_plain, uses_onednn, with_cpu_gemm
from ..machine.device import get_device, slow_dtype_refusal, usable_cores, use_threads
from ..models.checkpoint import load_checkpoint, model_from_checkpoint
from ..syntax.align import AlignmentError, align_trees
from ..syntax.batching import build_structures
from ..syntax.features import FEATURES
from ..syntax.parse_cache import ParseCacheIndex, cached_parses, read_parse_cache
from ..syntax.parsers import FileParser, ParserConfig, TreeReader, build_parser
from .beam import beam_search, greedy_search
from .cuda_graphs import GraphPool, cuda_graphs_refusal


@dataclass
class Translation:
    text: str
    score: float
    tokens: list[int]


AUTO_MIN_BATCHES = 8
"""``translate`` without ``--workers`` decodes in worker processes (one thread each, one per core) from this
many batches of input on: each process spawns, imports torch and loads the model first, which one process
decoding 8 batches of 128 sentences (~1,000) no longer pays for. Measured on an AMD EPYC (Zen 4, 2 cores),
quiet, `translate` wall time with the model's load, heterogeneous QUERYK at 2,000 updates, beam 5 (2026-11-25):
256 sentences 4.1 s in one process against 6.1 s with 2 workers, 1,014: 9.6 s / 9.5 s, 2,028: 17.4 / 15.6 s,
4,056: 30.8 / 26.1 s (1.27x the sentences per second once started); identical translations. Command:
``time structnmt translate --checkpoint <grid run>/average.pt --input IN --output OUT --workers W --no-progress``
with W = 1 and 2, IN the first N lines of Multi30k's val.en (2,028 and 4,056: val.en repeated), the
cross-paper grid's heterogeneous QUERYK seed 1; the machine's trainings paused (SIGSTOP)."""

DECODE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.float32}
"""decode.dtype -> the dtype of the decoder's floating-point parameters and activations. ``int8``
keeps them float32; its linear layers compute in 8-bit integers (:func:`int8_copy`)."""


def check_dtype(model, dtype: str) -> None:
    """Raise :class:`UserError` unless ``model`` can decode in ``dtype``."""
    if dtype not in DECODE_DTYPES:
        raise UserError(f"decode.dtype={dtype!r}: give float32, bfloat16 or int8.")
    if dtype == "float32":
        return
    cfg = getattr(model, "cfg", None)
    why = (low_precision_refusal(cfg) if isinstance(cfg, ModelConfig)
           else f"{type(model).__name__} is not a structnmt model with a model config")
    if why:
        raise UserError(f"decode.dtype={dtype}: {why}; only plain Transformers decode in {dtype}, "
                        "decode this one in float32 (drop --dtype, or set decode.dtype=float32).")
    device = next(model.parameters()).device
    if dtype == "int8" and device.type != "cpu":
        raise UserError(f"decode.dtype=int8 is for CPUs (PyTorch's int8 kernels are CPU kernels) and this model is "
                        f"on {device}; on a GPU decode in float32 or bfloat16.")


def check_dtype_speed(dcfg: DecodeConfig, device: torch.device) -> None:
    """Refuse a number format slower than float32 on this machine (:func:`structnmt.machine.device.slow_dtype_refusal`)
    unless ``dcfg.allow_slow_dtype``: one sentence with the formats to use instead."""

    why = None if dcfg.allow_slow_dtype else slow_dtype_refusal(dcfg.dtype, device)
    if why:
        raise UserError(f"decode.dtype={dcfg.dtype}: {why}; decode in float32 (drop --dtype) or int8 (--dtype int8), "
                        "or add --allow-slow-dtype (decode.allow_slow_dtype=true) to decode in it anyway.")


def check_decode_cuda_graphs(model, dcfg: DecodeConfig) -> None:
    """Refuse ``decode.cuda_graphs`` where it cannot run (off a GPU, or a decoder that cannot keep its shapes
    fixed): one sentence with the fix. (``translate`` never gets here with a checkpoint's stored setting:
    :meth:`Translator.__init__` turns that off where it cannot run, and the command refuses its own
    ``--cuda-graphs`` first.)"""
    if dcfg.cuda_graphs:
        why = cuda_graphs_refusal(model, next(model.parameters()).device)
        if why:
            raise UserError(f"decode.cuda_graphs: {why}; decode without it (set decode.cuda_graphs=false; "
                            "translate: --no-cuda-graphs).")


def stored_decoding_note(model, dcfg: DecodeConfig, device: torch.device, checkpoint: str | Path) -> str:
    """A checkpoint's decoding settings are defaults, not requirements: its ``decode.cuda_graphs=true`` (set for
    a GPU) where CUDA graphs cannot run (on a CPU, or a decoder that cannot keep its shapes fixed) is turned off
    in ``dcfg``, and the line saying so is returned; '' when nothing changed."""
    if not dcfg.cuda_graphs:
        return ""
    why = cuda_graphs_refusal(model, device)
    if why is None:
        return ""
    dcfg.cuda_graphs = False
    return (f"{checkpoint} stores decode.cuda_graphs=true, which cannot run here ({why}); decoding without CUDA "
            "graphs, which gives the same translations.")


def is_int8(model) -> bool:
    """Whether ``model`` is a copy made by :func:`int8_copy`."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    return any(isinstance(m, DynamicInt8Linear) for m in model.modules())


def int8_copy(model):
    """A copy of ``model`` whose linear layers compute in 8-bit integers, for decoding on a CPU.

    PyTorch's dynamic quantization (``torch.ao.quantization.quantize_dynamic``, x86/fbgemm
    kernels): every ``nn.Linear`` (attention projections, feed-forward layers, the output
    projection) stores its weight in int8 with one scale per output row, quantizes its input
    at run time (one scale per call) and returns float32 with the float32 bias added.
    Embeddings, layer norms, attention scores and the normaliser stay float32. The tied
    output projection gets its own int8 copy of the embedding matrix; the caller's model is
    not changed. Measured on Multi30k: docs/results/, "int8 decoding".

    PyTorch marks this eager-mode API deprecated (to move to torchao) but keeps it in the
    versions this project supports (torch < 2.14); where it is gone this raises
    :class:`UserError`.
    """

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as e:  # pragma: no cover - depends on the installed PyTorch
        raise UserError(f"decode.dtype=int8 needs PyTorch's dynamic quantization, which this PyTorch "
                        f"({torch.__version__}) lacks ({e}); decode in float32 or bfloat16.") from e
    with warnings.catch_warnings():  # the deprecation notices of the eager API, once per copy
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        return quantize_dynamic(to_plain(copy.deepcopy(model)), {torch.nn.Linear: per_channel_dynamic_qconfig})


def model_for_dtype(model, dtype: str):
    """``model`` itself when it is in ``dtype`` already (float32, or a copy made before);
    otherwise a copy of it in ``dtype``: parameters and buffers cast (bfloat16), or the
    linear layers quantized (int8, :func:`int8_copy`).

    A copy, so the caller's model (a trainer's, which goes on learning) is never changed; for the
    tiny recipe the copy takes milliseconds. Raises :class:`UserError` for a model that
    :func:`check_dtype` refuses.
    """
    check_dtype(model, dtype)
    if is_int8(model):
        if dtype == "int8":  # a copy made before
            return model
        raise ValueError(f"an int8 copy cannot be decoded in {dtype}; pass the float32 model it was made from")
    if dtype == "int8":
        return int8_copy(model)
    target = DECODE_DTYPES[dtype]
    if next(model.parameters()).dtype == target:  # float32, or a copy made before
        return model

    return copy.deepcopy(model).to(target)


def decoding_model(model, dtype: str, rows: int = 640):
    """:func:`model_for_dtype`, then, for float32 on a CPU, the linear layers on the library the CPU runs
    faster for this model with ``rows`` hypotheses a step (batch size x beam)
    (:func:`structnmt.machine.cpu_gemm.with_cpu_gemm`, measured once per machine; a view sharing the weights,
    the caller's model unchanged)."""
    out = model_for_dtype(model, dtype)
    if dtype == "float32" and next(out.parameters()).device.type == "cpu" and not uses_onednn(out):
        out = with_cpu_gemm(out, in_place=False, purpose="decode", rows=rows)
    return out


def decode_rows(dcfg: DecodeConfig) -> int:
    """Hypotheses in a decoding step: sentences a batch times the beam (what the linear layers multiply)."""
    return max(1, dcfg.batch_size) * max(1, dcfg.beam)


def decode_batch(model, src: torch.Tensor, src_mask: torch.Tensor, dcfg: DecodeConfig, max_positions: int,
                 structures: dict | None = None, graph_pool: GraphPool | None = None):
    """Beam search (or greedy when ``beam == 1`` and ``nbest == 1``) on one padded batch (``graph_pool``: with
    ``decode.cuda_graphs``, the graphs kept from batch to batch)."""
    kw = dict(max_len_a=dcfg.max_len_a, max_len_b=dcfg.max_len_b, max_positions=max_positions,
              structures=structures, lenpen=dcfg.lenpen, cuda_graphs=dcfg.cuda_graphs, graph_pool=graph_pool)
    if dcfg.beam == 1 and dcfg.nbest == 1:
        return greedy_search(model, src, src_mask, **kw)
    return beam_search(model, src, src_mask, beam=dcfg.beam, nbest=dcfg.nbest, **kw)


def translate_ids(
    model,
    sources: list[list[int]],
    dcfg: DecodeConfig,
    *,
    device: torch.device,
    max_positions: int,
    progress: bool = False,
    structures_for: Callable[[list[int], int], dict[str, torch.Tensor]] | None = None,
    pool: DecodePool | None = None,
    graph_pool: GraphPool | None = None,
) -> list[list]:
    """Piece-id sources (with EOS) -> per sentence the n-best :class:`Hypothesis` list, in input order.

    A source longer than ``max_positions`` is not decoded: its list is empty.

    ``structures_for(indices, S)`` builds the structure tensors of the sentences
    ``indices`` padded to length ``S``, for mechanisms that need them. ``pool``: the
    batches are decoded by its worker processes (same batches, same results), not here.
    ``graph_pool``: with ``decode.cuda_graphs``, the recorded graphs to reuse (a caller that
    translates again keeps one; by default one for this call's batches).
    """
    order = sorted((i for i in range(len(sources)) if len(sources[i]) <= max_positions), key=lambda i: len(sources[i]))
    results: list[list] = [[] for _ in sources]  # a source longer than max_positions keeps []
    bar = None
    if progress:
        bar = tqdm(total=len(sources), desc="translate", unit=" sent", mininterval=1.0)
    batches = [order[start : start + dcfg.batch_size] for start in range(0, len(order), dcfg.batch_size)]
    if pool is not None and structures_for is not None:
        raise ValueError("a DecodePool decodes models that read no structures")
    check_dtype(model, dcfg.dtype)  # here too when a pool decodes: refused before any work is sent
    check_dtype_speed(dcfg, next(model.parameters()).device)
    check_decode_cuda_graphs(model, dcfg)

    def decoded_here():
        model_d = decoding_model(model, dcfg.dtype, decode_rows(dcfg))
        graphs = graph_pool if graph_pool is not None or not dcfg.cuda_graphs else GraphPool()
        for idx in batches:
            src, mask = pad_sources([sources[i] for i in idx])
            structures = None
            if structures_for is not None:
                structures = {k: v.to(device) for k, v in structures_for(idx, src.shape[1]).items()}
            yield decode_batch(model_d, src.to(device), mask.to(device), dcfg, max_positions, structures, graphs)

    decoded = (pool.decode([[sources[i] for i in idx] for idx in batches], dcfg, max_positions)
               if pool is not None else enumerate(decoded_here()))
    for k, hyps in decoded:
        idx = batches[k]
        for i, h in zip(idx, hyps):
            results[i] = h
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    return results


class DecodePool:
    """``workers`` CPU processes, each with its own copy of a checkpoint's model on ``threads`` threads.

    On a CPU with few cores, beam search over small matrices uses a second thread poorly
    (most of its operations are too small to split); two processes with one thread each
    decode two batches at once instead. Each batch is decoded exactly as in one process
    (the same batches, so the same translations); the batches go, longest first, to
    whichever worker is free. The workers start and load the model when the pool is made,
    which waits for them (a worker that cannot load is reported then, in one sentence);
    :meth:`close` stops them. Only for models that read no parses (their structure
    tensors are built from the parent's parses). The workers are spawned (not forked), so
    a script that makes a pool needs Python's ``if __name__ == "__main__":`` guard; the
    command line has it.
    """

    #: seconds to wait for the workers to load the model before giving up
    START_TIMEOUT = 600.0

    def __init__(self, checkpoint: str | Path, workers: int, threads: int = 1, data_dir: str | Path | None = None):
        if workers < 2:
            raise ValueError("a DecodePool has at least 2 workers")
        ctx = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
        ready = ctx.Queue()
        self.pool = ctx.Pool(workers, initializer=_pool_init, initargs=(str(checkpoint), threads, data_dir, ready))
        self.workers = workers
        # the pool returns before its workers have imported torch and loaded the model (seconds): wait for
        # them here, so that the first batches do not pay for it and a worker that cannot load fails now
        try:
            self._wait_until_loaded(ready, checkpoint)
        except BaseException:
            self.close()
            raise

    def _wait_until_loaded(self, ready, checkpoint) -> None:
        """One message per worker on ``ready``: None (loaded) or why it could not load. A worker that
        dies without a word (killed, crashed, a script without the ``__main__`` guard) is replaced by
        the pool under a new process id; that, or the timeout, ends the wait too."""

        workers = self.workers
        # the pool's processes: multiprocessing.Pool's own list (no public API gives it; without it only the
        # timeout ends the wait for a worker that died without a word)
        processes = lambda: list(getattr(self.pool, "_pool", []))  # noqa: E731
        started = {p.pid for p in processes()}
        deadline = time.monotonic() + self.START_TIMEOUT
        loaded = 0
        while loaded < workers:
            try:
                why = ready.get(timeout=1.0)
            except queue.Empty:
                if {p.pid for p in processes()} != started or any(p.exitcode for p in processes()):
                    raise UserError(f"--workers {workers}: a decoding process exited while loading {checkpoint}; "
                                    "decode with one process (drop --workers) to see why.") from None
                if time.monotonic() > deadline:
                    raise UserError(f"--workers {workers}: the decoding processes did not load {checkpoint} within "
                                    f"{self.START_TIMEOUT:.0f} s; decode with one process (drop --workers).") from None
                continue
            if why is not None:
                raise UserError(f"--workers {workers}: a decoding process could not load {checkpoint}: {why}; "
                                "decode with one process (drop --workers) to see the whole error.")
            loaded += 1

    def decode(self, batches: list[list[list[int]]], dcfg: DecodeConfig,
               max_positions: int) -> Iterable[tuple[int, list]]:
        """Batches of piece-id sources (the caller sorts them shortest first) -> ``(k, n-best
        lists of batches[k])`` for every ``k``, last batch first.

        The longest batches are handed out first, so they do not end up alone at the end on one
        worker while the others wait (measured: benchmarks/README.md, the side-by-side run on an Intel Xeon).
        """
        order = range(len(batches) - 1, -1, -1)
        done = self.pool.imap(_pool_decode, [(batches[k], dcfg, max_positions) for k in order], chunksize=1)
        return zip(order, done)

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


_POOL_MODEL: dict = {}


def _pool_init(checkpoint: str, threads: int, data_dir, ready) -> None:
    """A worker's start: load the model, then put None (or why it failed) on ``ready``. Ctrl-C and SIGTERM
    are the parent's to handle (it stops the pool): a worker ignores them, so none prints a traceback."""


    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        configure_allocator()
        use_threads(threads)
        _POOL_MODEL["model"] = model_from_checkpoint(load_checkpoint(checkpoint), checkpoint, data_dir)[3]
    except Exception as e:  # reported by the parent as one sentence, which then stops the pool
        ready.put(f"{type(e).__name__}: {e}")  # (not raised here: the pool would start the worker again)
        return
    ready.put(None)


def _pool_decode(task) -> list:
    sources, dcfg, max_positions = task
    src, mask = pad_sources(sources)
    if dcfg.dtype not in _POOL_MODEL:  # the worker's model never changes: one copy per number format
        _POOL_MODEL[dcfg.dtype] = decoding_model(_POOL_MODEL["model"], dcfg.dtype, decode_rows(dcfg))
    return decode_batch(_POOL_MODEL[dcfg.dtype], src, mask, dcfg, max_positions)


class Translator:
    """A checkpoint with its vocabularies, ready to translate raw lines.

    When the model's config asks for structure tensors (``data.structures``), new input
    is parsed with the parser backend the training data was prepared with (read from
    the dataset's manifest; ``parser_overrides`` replaces fields, e.g. the pre-parsed
    files of the ``file`` backend), aligned to the pieces, and batched like in training.
    """

    def __init__(self, checkpoint: str | Path, *, data_dir: str | Path | None = None, device: str = "auto",
                 parser_overrides: dict | None = None, too_long: str = "empty", workers: int | None = 1,
                 parse_cache: str | Path | None = None):
        if too_long not in ("empty", "truncate"):
            raise ValueError(f"too_long must be 'empty' or 'truncate', not {too_long!r}")
        if workers is not None and workers < 1:
            raise UserError(f"--workers {workers}: give a number of decoding processes >= 1.")
        self.pool: DecodePool | None = None
        self.too_long_policy = too_long
        self.note = ""  # one line for the user about how the input is read, if anything is unusual
        self.pieces_without_prefix = False
        self.too_long: list[int] = []  # 1-based numbers of the input lines over max_positions (last call)
        self.unaligned: list[int] = []  # 1-based numbers of the input lines whose parse does not fit their text
        state = load_checkpoint(checkpoint)
        # the checkpoint's own vocabularies; a --data directory must hold the same ones
        self.cfg: Config
        self.cfg, self.src_vocab, self.tgt_vocab, self.model = model_from_checkpoint(state, checkpoint, data_dir)
        self.device = get_device(device)
        self.model.to(self.device)
        # the checkpoint's decoding settings are defaults: one that cannot run here is turned off, and said
        self.decode_note = stored_decoding_note(self.model, self.cfg.decode, self.device, checkpoint)
        self._cast: dict[str, torch.nn.Module] = {}  # decode.dtype -> the model in that format (made on first use)
        self._graphs: dict[str, GraphPool] = {}  # decode.dtype -> its CUDA graphs, kept across calls (release_graphs)
        self.parser_cfg = None
        # parses made beforehand (structnmt parse), read instead of parsing, on demand (bounded memory)
        self.parse_cache: ParseCacheIndex | None = None
        self.parse_cache_path = str(parse_cache or "")
        self.label_ids: dict[str, int] = {}
        self._backends: dict[tuple[str, ...], object] = {}  # the parser backends made so far (spaCy loads once)
        self.trees: TreeReader | None = None  # pre-parsed trees read in step with a chunked input (open_trees)
        self.structures = {**self.cfg.data.structures, **self.model.required_structures()}
        if parser_overrides and not self.structures:
            flags = " and ".join(f"--parse-{k.split('_')[0]}" for k in parser_overrides)
            raise UserError(f"{flags}: {checkpoint} reads no parses (its attention uses no structure), so the "
                            f"trees would be ignored; drop {flags}.")
        if self.structures:

            syntax = state.get("data_syntax")
            where = f"{checkpoint} (data_syntax)"
            if syntax is None:  # older checkpoints: the dataset's manifest
                root = Path(data_dir or self.cfg.data.path)
                if not (root / "manifest.json").is_file():
                    raise CheckpointError(f"{checkpoint}: its parser settings are in {root}/manifest.json, which "
                                          "does not exist; pass --data DIR, the dataset it was trained on.")
                manifest = json.loads((root / "manifest.json").read_text())
                syntax = {"parser": manifest["config"].get("parser", {}),
                          "labels": (manifest.get("syntax") or {}).get("labels", [])}
                where = f"{root}/manifest.json parser"
            saved = {**(syntax.get("parser") or {}), **(parser_overrides or {})}
            parser_cfg = build_dataclass(ParserConfig, saved, where)
            # without a parser, tree-free features take their words from the pieces
            self.parser_cfg = parser_cfg if parser_cfg.name != "none" else None
            self.label_ids = {x: i for i, x in enumerate(syntax.get("labels") or [])}
            self._use_parse_cache(parse_cache, parser_cfg)

            needs_trees = any(FEATURES[spec.feature].needs for spec in self.structures.values())
            templates = [t for t in (parser_cfg.dependency_file, parser_cfg.constituency_file) if t]
            if parser_cfg.name == "synthetic" and not templates:  # its default files are per split
                templates = ["{prefix}.{lang}.conllu"]
            if (self.parser_cfg is not None and parser_cfg.name in ("file", "synthetic") and not needs_trees
                    and any("{prefix}" in t or "{lang}" in t for t in templates) and not parser_overrides):
                # pre-parsed trees of the dataset's own splits, none for this input (unless a split's prefix is
                # given, as the experiment runner does), and no feature reads a tree: words from the pieces
                self.pieces_without_prefix = True
                self.note = ("this model's features read no trees; its dataset's pre-parsed trees do not cover this "
                             "input, so words are taken from the subword pieces (pass --parse-dependency and "
                             "--parse-constituency to use parses instead).")
        if workers is not None and workers > 1:
            if self.device.type != "cpu":
                raise UserError(f"--workers {workers}: several decoding processes are for the CPU; on {self.device} "
                                "decode with one (drop --workers).")
            if self.structures:
                raise UserError(f"--workers {workers}: {checkpoint} reads parses ({', '.join(sorted(self.structures))}), "
                                "which one process builds; decode it with one worker (drop --workers).")
        # the most decoding processes (None: chosen per call, auto_workers); a call uses at most one per batch
        self.workers = workers
        self.workers_used = 1  # how many the last call used
        self._pool_args = (checkpoint, data_dir)

    def auto_workers(self, batches: int) -> int:
        """How many decoding processes ``workers=None`` uses for ``batches`` batches: one per usable core
        (at most one per batch) on a CPU with several cores when the input has at least
        :data:`AUTO_MIN_BATCHES` batches and the model reads no parses; else 1 (this process)."""
        if self.device.type != "cpu" or self.structures or batches < AUTO_MIN_BATCHES:
            return 1
        return max(1, min(usable_cores(), batches))

    def _pool_for(self, batches: int) -> DecodePool | None:
        """The decoding processes for a call with ``batches`` batches: none for a single batch, else
        ``min(workers, batches)`` of them (``auto_workers`` when ``workers`` is None), started on first use
        (and started again, larger, when a later call has more batches than the pool has processes), so no
        process loads the model for nothing."""
        want = self.auto_workers(batches) if self.workers is None else min(self.workers, batches)
        self.workers_used = max(want, 1)
        if want < 2:
            return None
        if self.pool is None or self.pool.workers < want:
            self.close()
            checkpoint, data_dir = self._pool_args
            self.pool = DecodePool(checkpoint, want, data_dir=data_dir)
        self.workers_used = min(self.pool.workers, batches)
        return self.pool

    def close(self) -> None:
        """Stop the decoding processes (``workers`` > 1), if any were started; a later call starts them again."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _use_parse_cache(self, path: str | Path | None, parser_cfg) -> None:
        """Read the parses of ``structnmt parse`` (for a dataset parsed by spaCy) instead of running spaCy."""
        if not path:
            return
        if parser_cfg.name != "spacy":
            raise UserError(f"--parse-cache {path}: this model's dataset was parsed by '{parser_cfg.name}', whose "
                            "parses come from files already; the cache is for spaCy-parsed datasets, drop it.")

        self.parse_cache = read_parse_cache(path)

    def _parse(self, texts: list[str], prefix: str | None = None, lang: str | None = None):
        """((dependency, constituency), word_of_piece) of every (non-empty, stripped) text;
        None for a text whose parse cannot be aligned with it.

        Without a parser the trees are ``None`` and the words are the vocabulary's, read off the
        piece ids as the collator reads them (:meth:`structnmt.data.vocab.Vocab.word_of_piece`).
        """
        if self.parser_cfg is None or (self.pieces_without_prefix and prefix is None and lang is None):
            return [((None, None), self.src_vocab.word_of_piece(ids)) for ids in self.src_vocab.encode(texts)]

        if self.parse_cache is not None:

            parsed = cached_parses(self.parse_cache, self.parse_cache_path, self.parser_cfg, texts)
        elif self.trees is not None:  # a chunk of a longer input: the next trees of the files
            parsed = self.trees.take(len(texts))
        else:
            # exhausted: pre-parsed files get their count check; {prefix}/{lang} in their paths are filled in
            parsed = list(self._backend().parse(iter(texts), prefix=prefix, lang=lang))
        out = []
        for text, p, spans in zip(texts, parsed, self.src_vocab.encode_spans(texts)):
            try:
                dep, const, al = align_trees(text, [(b, e) for _, b, e in spans],
                                             p.dependency, p.constituency, p.spans)
            except AlignmentError:
                out.append(None)  # one bad parse does not stop the others: the caller reports it
                continue
            out.append(((dep, const), al.word_of_piece))
        return out

    def _backend(self):
        """The parser backend for the trees this model's features read, no others (made once)."""
        needs = tuple(sorted({t for spec in self.structures.values() for t in FEATURES[spec.feature].needs}))
        if needs not in self._backends:
            self._backends[needs] = build_parser(self.parser_cfg, needs)
        return self._backends[needs]

    def reads_tree_files(self) -> bool:
        """Whether this model's input comes with pre-parsed trees in files (parser ``file`` or ``synthetic``)."""
        return (self.parser_cfg is not None and self.parse_cache is None and not self.pieces_without_prefix
                and isinstance(self._backend(), FileParser))

    def open_trees(self) -> None:
        """Read the pre-parsed files' trees in step with an input translated a chunk at a time
        (:mod:`structnmt.decode.stream`): each :meth:`translate` call takes the next trees. No-op for a model
        without tree files."""
        if self.reads_tree_files():
            self.trees = self._backend().open()

    def skip_trees(self, count: int) -> None:
        """Pass over the trees of ``count`` non-blank lines (a resumed run's done part), keeping none."""
        if self.trees is not None:
            self.trees.skip(count)

    def close_trees(self) -> None:
        """At the end of a chunked input: tree files with trees left over are one sentence."""
        if self.trees is not None:
            trees, self.trees = self.trees, None
            trees.finish()

    def release_graphs(self) -> None:
        """Free what ``decode.cuda_graphs`` keeps on the device from call to call (each bucket's cache, encoder
        output and graph memory): the next call records its graphs again."""
        for pool in self._graphs.values():
            pool.clear()
        self._graphs.clear()

    def translate(self, lines: Iterable[str], dcfg: DecodeConfig | None = None, progress: bool = False, *,
                  parse_prefix: str | None = None, parse_lang: str | None = None,
                  first_line: int = 0) -> list[list[Translation]]:
        """Translate raw lines; an empty line gives an empty translation, kept in place.

        ``parse_prefix`` / ``parse_lang`` fill ``{prefix}`` / ``{lang}`` in the paths of
        pre-parsed trees (parser ``file`` or ``synthetic``), as ``prepare`` does for a split.
        ``first_line``: how many input lines came before ``lines`` (a chunk of a longer input), for the line
        numbers of error messages; :attr:`too_long` and :attr:`unaligned` count from ``lines``' first."""
        dcfg = dcfg or self.cfg.decode
        lines = list(lines)
        keep = [i for i, line in enumerate(lines) if line.strip()]
        texts = [lines[i].strip() for i in keep]
        sources = encode_sources(self.src_vocab, texts)
        limit = self.cfg.model.max_positions
        self.too_long = [keep[j] + 1 for j, s in enumerate(sources) if len(s) > limit]
        if self.too_long and self.too_long_policy == "truncate":
            if self.structures:
                raise UserError(f"line {first_line + self.too_long[0]}: cannot be truncated for a model that reads parses (the "
                                "parse covers the whole sentence); drop --too-long truncate to give it an empty output.")
            sources = [s if len(s) <= limit else s[: limit - 1] + [EOS] for s in sources]
        parsed: list = []
        self.unaligned = []
        if self.structures:
            parsed = self._parse(texts, parse_prefix, parse_lang)
            self.unaligned = [keep[j] + 1 for j, p in enumerate(parsed) if p is None]
        # a line of characters the pieces' normalisation removes (zero-width spaces, controls) encodes to EOS alone:
        # it is an empty line, and gets an empty translation, not what the model makes of an empty source
        blank = {j for j, s in enumerate(sources) if len(s) <= 1}
        # sentences that are decoded: not over the positions, with a usable parse, not blank
        todo = [j for j, s in enumerate(sources)
                if len(s) <= limit and (not parsed or parsed[j] is not None) and j not in blank]
        structures_for = None
        if self.structures:

            def structures_for(idx: list[int], S: int) -> dict[str, torch.Tensor]:
                chosen = [parsed[todo[k]] for k in idx]
                return build_structures(self.structures, [c[0] for c in chosen], [c[1] for c in chosen], S,
                                        self.label_ids)

        check_dtype(self.model, dcfg.dtype)  # before the copy in that format is made
        check_dtype_speed(dcfg, self.device)
        if dcfg.dtype not in self._cast:  # this translator's model never changes: one copy per number format
            self._cast[dcfg.dtype] = decoding_model(self.model, dcfg.dtype, decode_rows(dcfg))
        pool = self._pool_for(-(-len(todo) // dcfg.batch_size)) if self.workers != 1 else None
        graphs = self._graphs.setdefault(dcfg.dtype, GraphPool()) if dcfg.cuda_graphs else None
        hyps = translate_ids(self._cast[dcfg.dtype], [sources[j] for j in todo], dcfg, device=self.device,
                             max_positions=limit, progress=progress, structures_for=structures_for, pool=pool,
                             graph_pool=graphs)
        # empty lines, and lines that could not be translated, get one empty translation in place
        kept = set(keep) - {keep[j] for j in blank}
        out = [[Translation("", float("-inf") if i in kept else 0.0, [])] for i in range(len(lines))]
        for k, j in enumerate(todo):
            out[keep[j]] = [Translation(self.tgt_vocab.decode(h.tokens), h.score, h.tokens) for h in hyps[k]]
        return out
