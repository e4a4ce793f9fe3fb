"""The ``structnmt`` command line: thin wrappers that parse arguments and call the library.

Each command's function (``cmd_<name>``) has its parser beside it (``_parser_<name>``, listed in
:data:`PARSERS`). Subcommands (``structnmt <cmd> -h`` for their options)::

    synth         write the synthetic syntactic-transduction corpus and its gold trees
    prepare       parallel text -> SentencePiece-encoded, memory-mapped dataset (and parses)
    features      structure features of a dataset computed once, into memory-mapped stores beside it
    train         train from a YAML config with dotted overrides (torchrun-compatible)
    translate     beam search / greedy decoding from a file or standard input
    export        a plain Transformer checkpoint -> CTranslate2 model directory
    average       average the last N checkpoints
    score         sacreBLEU BLEU and chrF with signatures, the paired and the seed-aware tests
    experiment    a grid of configs -> results table with significance, learning curves
    probe         probing classifiers on a frozen encoder or trained from scratch (MG-SA sec. 4.2)
    tag           POS tagging with an encoder-only Transformer (PhraseTransformer Table 2)
    induce        dependency trees induced from a trained encoder, scored against gold (SA-NMT sec. 6)
    induce-table  Tables 3 and 4 of several induce outputs
    head-roles    redundant encoder heads (RHE) over training, compared across runs
    sweep-plot    a score against a swept setting, from an experiment's results.csv
    delta-plot    each row's difference from the baseline in several experiments' results.csv (PNG)
    plan-seeds    each row's minimal detectable effect, and the seeds a given difference needs
    compare       where systems of several seeds differ: seed-aware Δ by length, syntax and word frequency
    analyze       attention heatmaps (PNG) and statistics of a checkpoint
    gate          SA-NMT's syntactic gate per target token and POS (Fig. 6)
    demo          the embedded default: synth -> prepare -> train on CPU -> BLEU

Every command takes ``--user-dir DIR`` (mechanisms and features of your own, :mod:`structnmt.plugins`), after
the command's name or, as in fairseq, before it (``structnmt --user-dir DIR experiment grid.yaml``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from ..errors import UserError, os_error_sentence


def _at_least(low: int):
    """An argparse type: a whole number of at least ``low`` (else argparse's one-line usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: give a whole number of at least {low}")
        return value

    return parse


def _err(msg: str) -> int:
    print(f"structnmt: error: {msg}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- commands


def cmd_synth(args) -> int:
    from ..data.synthetic import SynthConfig, write_corpus

    for flag, value in (("--n-train", args.n_train), ("--n-valid", args.n_valid), ("--n-test", args.n_test)):
        if value < 1:
            return _err(f"{flag} {value}: give a number of sentences of at least 1.")
    if args.generalization:
        from ..data.generalization import BenchmarkConfig, write_benchmark

        if args.n_gen < 1 or args.train_max_len < 3:
            return _err("--n-gen must be at least 1 and --train-max-len at least 3.")
        meta = write_benchmark(BenchmarkConfig(seed=args.seed, n_train=args.n_train, n_valid=args.n_valid,
                                               n_test=args.n_test, n_gen=args.n_gen,
                                               train_max_len=args.train_max_len), args.out,
                               progress=not args.no_progress)
        for name, s in meta["splits"].items():
            print(f"synth: {name:>13}: {s['sentences']:>6,} sentences, {s['length'][0]}-{s['length'][1]} words; "
                  f"{s['statement']}")
        print(f"synth: benchmark in {args.out} (checked: {meta['checked']}; see benchmark.json)")
        return 0
    cfg = SynthConfig(seed=args.seed, n_train=args.n_train, n_valid=args.n_valid, n_test=args.n_test)
    counts = write_corpus(cfg, args.out, progress=not args.no_progress)
    print(f"synth: wrote {counts} to {args.out}")
    return 0


def _parser_synth(sub) -> None:
    s = sub.add_parser("synth", help="write the synthetic syntactic-transduction corpus")
    s.add_argument("--out", default="data/synth", help="output directory (default data/synth)")
    s.add_argument("--seed", type=int, default=1, help="the grammar's random seed (default 1)")
    s.add_argument("--n-train", type=int, default=20000, help="training sentence pairs (default 20,000)")
    s.add_argument("--n-valid", type=int, default=500, help="validation sentence pairs (default 500)")
    s.add_argument("--n-test", type=int, default=500, help="i.i.d. test sentence pairs (default 500)")
    s.add_argument("--generalization", action="store_true",
                   help="the structural generalization benchmark: training without the held-out structures, "
                        "plus attraction2-4, depth2-3, length and recombination test splits (docs/generalization.md)")
    s.add_argument("--n-gen", type=int, default=500, help="sentences per held-out split (--generalization)")
    s.add_argument("--train-max-len", type=int, default=20,
                   help="longest training sentence in words; the length split is longer (--generalization)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_synth)


def cmd_prepare(args) -> int:
    from ..data.prepare import PrepareConfig, prepare
    from ..syntax.parsers import ParserConfig

    parser = ParserConfig(name=args.parser, pipeline=args.spacy_pipeline, n_process=args.spacy_processes,
                          dependency_file=args.parse_dependency or "", constituency_file=args.parse_constituency or "",
                          conversion_style=args.conversion_style)
    if args.subword == "subword-nmt" and (args.vocab_size is not None or args.tgt_vocab_size or args.model_type):
        raise UserError("--vocab-size / --tgt-vocab-size / --model-type shape a SentencePiece model; subword-nmt's "
                        "vocabulary is every piece its merges leave in the training text: give --merges N instead.")
    if args.subword == "sentencepiece" and args.merges is not None:
        raise UserError("--merges counts subword-nmt merge operations: add --subword subword-nmt, or size the "
                        "SentencePiece model with --vocab-size N.")
    cfg = PrepareConfig(
        source_lang=args.source_lang, target_lang=args.target_lang, trainpref=args.trainpref,
        validpref=args.validpref, testprefs=args.testpref or [], joint_vocab=not args.separate_vocab,
        vocab_size=10000 if args.vocab_size is None else args.vocab_size, tgt_vocab_size=args.tgt_vocab_size,
        model_type=args.model_type or "bpe", merges=10000 if args.merges is None else args.merges,
        max_len=args.max_len, eval_too_long=args.eval_too_long, parser=parser, lowercase=args.lowercase,
        moses=args.moses, subword=args.subword,
    )
    manifest = prepare(cfg, args.destdir, workers=args.workers, progress=not args.no_progress)
    for split, c in manifest["counts"].items():
        print(f"prepare {split}: {c['kept']:,} pairs kept of {c['lines']:,} lines "
              f"({c['dropped_empty']} empty, {c['dropped_too_long']} too long"
              + (f", {c['dropped_no_pieces']} without pieces" if c.get("dropped_no_pieces") else "") + "); "
              f"{c['src_tokens']:,} source / {c['tgt_tokens']:,} target pieces"
              + (f"; {c['dropped_unaligned']} unaligned parses dropped, {c['merged_words']} words merged"
                 if "dropped_unaligned" in c else ""))
    return 0


def _parser_prepare(sub) -> None:
    s = sub.add_parser("prepare", help="encode parallel text into a dataset directory")
    s.add_argument("-s", "--source-lang", required=True, help="source language suffix of the files, e.g. en")
    s.add_argument("-t", "--target-lang", required=True, help="target language suffix of the files, e.g. de")
    s.add_argument("--trainpref", required=True, help="files {trainpref}.{lang}[.gz]")
    s.add_argument("--validpref", help="files {validpref}.{lang}[.gz] (validation during training)")
    s.add_argument("--testpref", action="append", help="repeatable")
    s.add_argument("--destdir", required=True, help="the dataset directory to write")
    s.add_argument("--vocab-size", type=_at_least(8), default=None, help="SentencePiece pieces (default 10,000)")
    s.add_argument("--separate-vocab", action="store_true", help="one SentencePiece model per side")
    s.add_argument("--tgt-vocab-size", type=_at_least(0), default=0, help="with --separate-vocab (0: --vocab-size)")
    s.add_argument("--model-type", default=None, choices=["bpe", "unigram"], help="SentencePiece model (default bpe)")
    s.add_argument("--subword", choices=["sentencepiece", "subword-nmt"], default="sentencepiece",
                   help="the subword segmentation: SentencePiece (--vocab-size, --model-type; default) or subword-nmt "
                        "BPE (--merges), the papers' and fairseq's: its pieces are every piece of the BPE'd training text")
    s.add_argument("--merges", type=_at_least(0), default=None,
                   help="subword-nmt merge operations (--subword subword-nmt; default 10,000, fairseq's Multi30k)")
    s.add_argument("--lowercase", action="store_true",
                   help="lowercase both sides before SentencePiece (as fairseq's Multi30k recipe); models trained on it "
                        "lowercase what they translate; the references stay raw (score with --lc-tok)")
    s.add_argument("--moses", action="store_true",
                   help="normalise and Moses-tokenize each side in its language (-s/-t) before SentencePiece, as "
                        "fairseq's example scripts do (sacremoses, no escaping); models trained on it tokenize what they "
                        "translate and detokenize their output; the references stay raw")
    s.add_argument("--max-len", type=int, default=256,
                   help="pairs with more pieces are dropped (train) or handled by --eval-too-long (valid/test), "
                        "and counted")
    s.add_argument("--eval-too-long", choices=["truncate", "drop"], default="truncate",
                   help="valid/test pairs over --max-len: keep them with their pieces cut to --max-len (the raw text "
                        "stays whole for BLEU; default) or drop them; either way counted")
    s.add_argument("--parser", default="none", help="parse the source side: none | spacy | file | synthetic")
    s.add_argument("--spacy-pipeline", default="en_core_web_sm", help="spaCy pipeline package (parser spacy)")
    s.add_argument("--spacy-processes", type=_at_least(1), default=1,
                   help="spaCy's own processes (parser spacy): they parse while one process aligns and encodes; "
                        "--workers N does both in N processes, so give one or the other; capped at the CPUs and the "
                        "batches to parse")
    s.add_argument("--parse-dependency", help="parser file: CoNLL-U, may use {prefix} and {lang}")
    s.add_argument("--parse-constituency", help="parser file: PTB trees one per line, may use {prefix} and {lang}")
    s.add_argument("--conversion-style", choices=["hybrid", "flat", "xbar"], default="hybrid",
                   help="constituency trees converted from dependency trees (spacy, or file without a PTB file): "
                        "the conversion style (bracket F1 on the PTB sample in docs/syntax.md; default hybrid)")
    s.add_argument("--workers", type=_at_least(1), default=1,
                   help="processes that encode each split, each a contiguous part of it: with a parser they also "
                        "parse it with spaCy or read its given trees, and align the trees to the pieces; the "
                        "dataset is the same byte for byte as with 1 (default 1); capped at the CPUs and the lines "
                        "(said in one line). Use it instead of --spacy-processes, which must then stay 1")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_prepare)


def cmd_features(args) -> int:
    from .store_features import requests_of, store_features

    data, requests = requests_of(args.feature or [], args.config, args.overrides, args.data)
    if not requests:
        print(f"features: {args.config} reads no structure features; nothing to store.")
        return 0
    store_features(data, requests, force=args.force, progress=not args.no_progress)
    return 0


def _parser_features(sub) -> None:
    s = sub.add_parser("features", help="compute structure features once per dataset (memory-mapped stores that "
                                        "every training process reads instead of computing them)")
    s.add_argument("--data", help="the prepared dataset (default with --for: the config's data.path)")
    s.add_argument("--feature", action="append", metavar="NAME[:k=v,...]",
                   help="a feature and its parameters, e.g. lpea_positions:k=2,rule=rule2 or dep_mask; may be repeated")
    s.add_argument("--for", dest="config", metavar="CONFIG.yaml",
                   help="store every feature a training of this config reads (its mechanisms', data.structures, hooks')")
    s.add_argument("overrides", nargs="*", default=[], help="section.key=value overrides of the --for config")
    s.add_argument("--force", action="store_true", help="rebuild stores that are up to date")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_features)


def cmd_train(args) -> int:
    from ..config import load_config
    from .training import train

    cfg = load_config(args.config, args.overrides)
    if args.no_progress:
        cfg.train.progress = False
    train(cfg, allow_config_change=args.allow_config_change)
    return 0


def _parser_train(sub) -> None:
    s = sub.add_parser("train", help="train a model (use torchrun for several processes)")
    s.add_argument("config")
    s.add_argument("overrides", nargs="*", default=[], help="section.key=value, e.g. train.max_updates=1000")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--allow-config-change", action="store_true",
                   help="resume even though the config differs from the saved one in more than budget, logging, "
                        "threads and device (the differing keys are printed)")
    s.set_defaults(func=cmd_train)


def cmd_translate(args) -> int:
    from ..decode.translate import Translator

    overrides = {k: v for k, v in (("dependency_file", args.parse_dependency),
                                   ("constituency_file", args.parse_constituency)) if v}

    if args.output:  # refused or unwritable now, not after decoding
        from ..fileio.files import check_output_file

        check_output_file(args.output, "--output", "translate", [
            ("the input file", args.input), ("the checkpoint", args.checkpoint), ("the parse cache", args.parse_cache),
            ("the dependency parse file", args.parse_dependency),
            ("the constituency parse file", args.parse_constituency)])
    from ..tasks.export import is_export

    if is_export(args.checkpoint):
        if args.workers not in (None, 1):
            return _err("--workers is for structnmt checkpoints; a CTranslate2 export runs its own threads "
                        "(drop --workers).")
        return _translate_ctranslate2(args)
    tr = Translator(args.checkpoint, data_dir=args.data, device=args.device, parser_overrides=overrides,
                    too_long=args.too_long, workers=args.workers, parse_cache=args.parse_cache)
    try:
        _cap_translate_workers(tr, args)
        if args.parse_cache and not tr.structures:
            return _err(f"--parse-cache {args.parse_cache}: {args.checkpoint} reads no parses (its attention uses no "
                        "structure), so the parses would be ignored; drop --parse-cache.")
        return _translate_with(tr, args)
    finally:
        tr.close()


def _cap_translate_workers(tr, args) -> None:
    """``--workers N`` capped at the CPUs and at ``--chunk-batches``: a chunk is decoded before the next is read, one
    process per batch, so a chunk of fewer batches than N never keeps N processes busy (said in one line)."""
    if tr.workers is None or tr.workers < 2:
        return
    from ..machine.device import cap_workers

    n = args.chunk_batches
    tr.workers, note = cap_workers(tr.workers, "translate: --workers", [
        (n, f"--chunk-batches {n}: the input is decoded a chunk of {n} batch{'es' if n != 1 else ''} at a time, one "
            "process per batch")])
    if note:
        print(note, file=sys.stderr)


def cmd_parse(args) -> int:
    import dataclasses

    from ..fileio.corpus import read_lines
    from ..syntax.parse_cache import dataset_parser, write_parse_cache

    parser = dataset_parser(args.data)
    if parser is None:
        return _err(f"--data {args.data}: no prepared dataset there (no manifest.json); give the directory of "
                    "`structnmt prepare` the models were trained on.")
    if parser.name != "spacy":
        return _err(f"--data {args.data}: its parser is '{parser.name}', not spacy: its models read "
                    "parses from files (or none), so there is nothing to parse beforehand.")
    from ..fileio.files import check_output_file
    from ..syntax.parse_cache import is_parse_cache

    check_output_file(args.out, "--out", "parse", [("an input file", path) for path in args.input],
                      own=is_parse_cache)
    texts = (line for path in args.input for line in read_lines(path))
    n = write_parse_cache(dataclasses.replace(parser, n_process=_parse_processes(args, parser)), texts, args.out,
                          progress=not args.no_progress, resume=args.resume, input_name=" ".join(args.input))
    print(f"parse: {n:,} distinct lines of {len(args.input)} file(s) parsed with {parser.pipeline} into "
          f"{args.out}")
    return 0


def _parse_processes(args, parser) -> int:
    """``--spacy-processes`` capped at the CPUs and at the batches the inputs make (said in one line)."""
    from ..fileio.corpus import count_lines
    from ..machine.device import cap_workers

    n, size = args.spacy_processes, max(1, parser.batch_size)
    if n < 2:
        return n
    lines = 0
    for path in args.input:
        lines += count_lines(path, n * size - lines)
    batches = -(-lines // size)
    n, note = cap_workers(n, "parse: --spacy-processes",
                          [(batches, f"{batches:,} batch{'es' if batches != 1 else ''} of {size:,} lines to parse")])
    if note:
        print(note)
    return n


def _parser_parse(sub) -> None:
    s = sub.add_parser("parse", help="parse text beforehand with a dataset's parser (spaCy), for translate "
                                     "--parse-cache on a machine without it")
    s.add_argument("--data", required=True, help="the prepared dataset whose parser settings are used")
    s.add_argument("--input", nargs="+", required=True, help="text files (.gz ok), one sentence per line")
    s.add_argument("--out", required=True, help="the parse cache to write (.jsonl, or .jsonl.gz)")
    s.add_argument("--spacy-processes", type=_at_least(1), default=1,
                   help="spaCy worker processes (capped at the CPUs and the batches to parse)")
    s.add_argument("--resume", action="store_true",
                   help="go on with an interrupted run into --out (its FILE.partial), after the chunks it finished")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_parse)


def _parser_translate(sub) -> None:
    s = sub.add_parser("translate", help="translate text with a checkpoint")
    s.add_argument("--checkpoint", required=True,
                   help="a checkpoint, or a directory written by `structnmt export` (translates with CTranslate2)")
    s.add_argument("--input", help="file (.gz ok) or - for standard input (default)")
    s.add_argument("--output", help="default: standard output")
    s.add_argument("--data", help="prepared dataset dir holding the vocabularies (default: the one in the checkpoint)")
    s.add_argument("--beam", type=int, help="beam size (default: the checkpoint's decode.beam)")
    s.add_argument("--lenpen", type=float, help="length penalty (default: the checkpoint's decode.lenpen)")
    s.add_argument("--max-len-a", type=float,
                   help="longest output = a * source length + b (default: the checkpoint's decode.max_len_a)")
    s.add_argument("--max-len-b", type=int, help="b of --max-len-a (default: the checkpoint's decode.max_len_b)")
    s.add_argument("--nbest", type=int, help="hypotheses per sentence, at most the beam (default: the checkpoint's decode.nbest, 1)")
    s.add_argument("--batch-size", type=int, help="sentences per batch (default: the checkpoint's decode.batch_size)")
    s.add_argument("--greedy", action="store_true", help="greedy search instead of beam search")
    s.add_argument("--dtype", choices=["float32", "bfloat16", "int8"],
                   help="number format of the decoder (default: the checkpoint's decode.dtype, float32); bfloat16 "
                        "and int8 (linear layers in 8-bit integers, CPU only) are for plain Transformers and not "
                        "bit-identical; bfloat16 on a CPU without bfloat16 arithmetic (no AVX512-BF16 or AMX) "
                        "is refused, being slower than float32 (benchmarks/README.md)")
    s.add_argument("--allow-slow-dtype", action="store_true",
                   help="decode in --dtype even where it is slower than float32 on this machine")
    s.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="on a GPU, replay each decoding step as one CUDA graph (decode.cuda_graphs; Transformer "
                        "decoders of plain attention or Rel_Pos, and RNNs); refused where it cannot run. Default: "
                        "the checkpoint's decode.cuda_graphs where it can run, else without (said in one line); "
                        "--no-cuda-graphs decodes without")
    s.add_argument("--too-long", choices=["empty", "truncate"], default="empty",
                   help="a line longer than the model's positions: empty output (default) or translate its beginning; "
                        "either way its line number is reported")
    s.add_argument("--parse-dependency", help="pre-parsed input (CoNLL-U) for models prepared with parser 'file'")
    s.add_argument("--parse-constituency", help="pre-parsed input (PTB) for models prepared with parser 'file'")
    s.add_argument("--parse-cache", metavar="FILE",
                   help="the input's parses made beforehand by `structnmt parse` (spaCy-parsed datasets): read "
                        "instead of running spaCy here")
    s.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu or cuda[:N]")
    s.add_argument("--workers", type=int, default=None,
                   help="CPU decoding processes, one thread each, never more than the CPUs, --chunk-batches or "
                        "the batches the input has (--batch-size sentences each; said in one line when capped); 1: "
                        "this process on torch's threads. Default: one per core on a CPU with several cores when the "
                        "input has at least 8 batches and the model reads no parses, else 1 (said in one line when it "
                        "uses several)")
    s.add_argument("--chunk-batches", type=_at_least(1), default=64,
                   help="the input is read, sorted by length and written this many batches at a time (default 64: "
                        "8,192 lines at --batch-size 128), so memory does not grow with the input")
    s.add_argument("--resume", action="store_true",
                   help="go on with an interrupted translation into --output (its FILE.partial), after the lines "
                        "it finished; refused unless the input, checkpoint and options are the same")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_translate)


def _translate_with(tr, args) -> int:
    from ..decode.cuda_graphs import cuda_graphs_refusal

    d = tr.cfg.decode
    _apply_decode_options(args, d)
    why = cuda_graphs_refusal(tr.model, tr.device) if args.cuda_graphs else None
    if why:  # asked for here (a checkpoint's stored setting was turned off where it cannot run: decode_note)
        return _err(f"--cuda-graphs: {why}; drop --cuda-graphs to decode without CUDA graphs.")
    for note in (tr.decode_note if args.cuda_graphs is None else "", tr.note):
        if note:
            print(f"translate: {note}", file=sys.stderr)
    used = []

    def chunk(lines, first):
        from ..decode.stream import ChunkResult

        results = tr.translate(lines, d, first_line=first)
        used.append(tr.workers_used)
        return ChunkResult(results, list(tr.too_long), list(tr.unaligned))

    tr.open_trees()
    summary = _stream(args, chunk, d, args.checkpoint, skip_trees=tr.skip_trees, finish=tr.close_trees)
    most = max(used, default=1)
    if tr.workers is None and most > 1:
        print(f"translate: decoding with {most} processes of one thread each, one per core "
              f"(--workers 1 decodes in this process).", file=sys.stderr)
    if tr.workers is not None and tr.workers > 1 and most < tr.workers:
        asked = f"--workers {args.workers}" + (f" (capped at {tr.workers})" if tr.workers != args.workers else "")
        print(f"translate: {asked}, but the input makes {most} batch(es) of up to {d.batch_size} sentences: decoded "
              f"with {most} process(es).", file=sys.stderr)
    if summary.unaligned_count:
        shown = ", ".join(map(str, summary.unaligned)) + (", ..." if summary.unaligned_count > 20 else "")
        print(f"translate: {summary.unaligned_count} input line(s) whose parse cannot be aligned with the text got an "
              f"empty translation (check that the pre-parsed input matches the input lines): line {shown}.",
              file=sys.stderr)
    _report_too_long(summary, args.too_long, tr.cfg.model.max_positions)
    return 0


def _report_too_long(summary, policy: str, max_positions: int) -> None:
    if summary.too_long_count:
        shown = ", ".join(map(str, summary.too_long)) + (", ..." if summary.too_long_count > 20 else "")
        done = ("were cut to their first pieces" if policy == "truncate"
                else "got an empty translation (--too-long truncate translates their beginning)")
        print(f"translate: {summary.too_long_count} input line(s) longer than model.max_positions="
              f"{max_positions} pieces {done}: line {shown}.", file=sys.stderr)


def _stream(args, chunk, d, identity: str, *, skip_trees=None, finish=None):
    """Translate ``args.input`` into ``args.output`` a chunk of ``--chunk-batches`` batches at a time
    (:func:`structnmt.decode.stream.run_stream`); ``--resume`` goes on with an interrupted ``--output``.
    ``identity``: the file that identifies the model (its hash is in the resume record)."""
    import dataclasses

    from ..decode.stream import StreamOptions, run_stream
    from ..fileio.corpus import file_digest

    chunk_lines = args.chunk_batches * d.batch_size
    parses = [args.parse_dependency, args.parse_constituency, args.parse_cache]
    settings = {"decode": dataclasses.asdict(d), "too_long": args.too_long, "chunk_lines": chunk_lines,
                "parse": [file_digest(p)["sha256"] if p and Path(p).is_file() else p for p in parses]}
    opts = StreamOptions(input=args.input, output=args.output, checkpoint=identity, settings=settings,
                         chunk_lines=chunk_lines, nbest=d.nbest, resume=args.resume,
                         progress=not args.no_progress and args.output is not None)
    summary = run_stream(chunk, opts, _input_lines, skip_trees=skip_trees, finish=finish)
    if summary.resumed_from:
        print(f"translate: resumed after line {summary.resumed_from:,}; {summary.lines:,} lines translated in all.",
              file=sys.stderr)
    return summary


def _input_lines(path):
    from ..fileio.corpus import decode_lines, read_lines

    if path in (None, "-"):  # bytes, decoded as a file's are: invalid UTF-8 is a sentence naming the line
        return decode_lines(sys.stdin.buffer, "<stdin>")
    return read_lines(path)


def _apply_decode_options(args, d) -> None:
    """The translate command's --beam, --lenpen, ... over the checkpoint's decode settings ``d``, checked."""
    from ..config import validate_decode

    for name in ("beam", "lenpen", "max_len_a", "max_len_b", "nbest", "batch_size", "dtype"):
        value = getattr(args, name)
        if value is not None:
            setattr(d, name, value)
    if args.greedy:
        d.beam, d.nbest = 1, 1
    if args.allow_slow_dtype:
        d.allow_slow_dtype = True
    if args.cuda_graphs is not None:  # --cuda-graphs / --no-cuda-graphs over the checkpoint's default
        d.cuda_graphs = args.cuda_graphs
    validate_decode(d, "translate options (--beam, --nbest, --batch-size, ...)")


def _translate_ctranslate2(args) -> int:
    """``translate --checkpoint DIR`` where DIR is a ``structnmt export --format ctranslate2`` directory."""
    from ..tasks.export import CT2Translator

    if args.parse_dependency or args.parse_constituency:
        return _err(f"{args.checkpoint} is a CTranslate2 export of a plain Transformer, which reads no parses; "
                    "drop --parse-dependency/--parse-constituency.")
    if args.too_long == "truncate":
        return _err("--too-long truncate is not available with a CTranslate2 export; drop it (over-long lines get "
                    "an empty translation and are reported).")
    if args.dtype is not None:
        return _err("--dtype is for structnmt checkpoints; a CTranslate2 export has the number format it was "
                    "exported with (structnmt export --quantization); drop --dtype.")
    if args.cuda_graphs:
        return _err(f"--cuda-graphs is for structnmt checkpoints; {args.checkpoint} is a CTranslate2 export, which "
                    "CTranslate2 decodes with its own kernels and no CUDA graphs of structnmt's; drop --cuda-graphs.")
    tr = CT2Translator(args.checkpoint, device=args.device, data_dir=args.data)
    d = tr.decode
    _apply_decode_options(args, d)

    def chunk(lines, first):
        from ..decode.stream import ChunkResult

        return ChunkResult(tr.translate(lines, d), list(tr.too_long))

    from ..tasks.export import MARKER

    summary = _stream(args, chunk, d, str(Path(args.checkpoint) / MARKER))
    _report_too_long(summary, "empty", tr.max_positions)
    return 0


def cmd_export(args) -> int:
    from ..tasks.export import export_ctranslate2

    out = export_ctranslate2(args.checkpoint, args.out, quantization=args.quantization)
    print(f"export: {args.checkpoint} -> {out} (CTranslate2, quantization {args.quantization or 'none'}); "
          f"translate with: structnmt translate --checkpoint {out} --input FILE")
    return 0


def _parser_export(sub) -> None:
    s = sub.add_parser("export", help="export a plain Transformer checkpoint to CTranslate2 (fast CPU/GPU decoding)")
    s.add_argument("--format", choices=["ctranslate2"], default="ctranslate2", help="the export format")
    s.add_argument("--checkpoint", required=True, help="the checkpoint to export (e.g. <run>/average.pt)")
    s.add_argument("--out", required=True, help="a new directory (or an earlier export) for the CTranslate2 model")
    s.add_argument("--quantization", choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
                   help="store the weights quantized (default: float32, whose translations equal structnmt's)")
    s.set_defaults(func=cmd_export)


def cmd_average(args) -> int:
    from ..train.average import average_checkpoints, last_checkpoints

    if not args.checkpoints and not args.inputs:
        return _err("average needs checkpoints: --inputs SAVE_DIR (its last --num) or --checkpoints FILE [FILE ...].")
    if args.num < 1:
        return _err(f"--num {args.num}: average at least 1 checkpoint.")
    from ..fileio.files import check_output_file

    paths = [Path(p) for p in args.checkpoints] if args.checkpoints else last_checkpoints(args.inputs, args.num)
    from ..fileio.files import same_file_pairs

    dup = same_file_pairs(paths, by_content=False)
    if dup:
        return _err(f"average: {dup[0]} and {dup[1]} are the same file; averaging it twice would weight it double: "
                    "give each checkpoint once.")
    from ..train.average import is_average

    check_output_file(args.output, "--output", "average", [("one of the checkpoints being averaged", p) for p in paths],
                      own=is_average, example="average.pt")
    average_checkpoints(paths, args.output)
    from ..fileio.files import record_output_file

    record_output_file(args.output, "average")
    print(f"average: {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) -> {args.output}")
    if not args.checkpoints and len(paths) < args.num:  # averaged what there is, and said so
        print(f"average: averaged {len(paths)} checkpoint{'s' if len(paths) != 1 else ''}, fewer than --num "
              f"{args.num}: {args.inputs} holds no more numbered checkpoints (train.keep_last keeps the last few).")
    return 0


def _parser_average(sub) -> None:
    s = sub.add_parser("average", help="average checkpoints")
    s.add_argument("--inputs", help="a save_dir: average its last --num numbered checkpoints")
    s.add_argument("--num", type=int, default=10,
                   help="how many of the last checkpoints (default 10); a save_dir with fewer: what it holds is "
                        "averaged, and said in one line")
    s.add_argument("--checkpoints", nargs="*", help="explicit checkpoint files instead of --inputs")
    s.add_argument("--output", required=True, help="the averaged checkpoint to write")
    s.set_defaults(func=cmd_average)


def _score_systems(args, refs: list[str]) -> tuple[dict[str, list[list[str]]], str | None]:
    """{system label: its runs' hypotheses} of the --hyp groups, or an error sentence."""
    from ..evaluate.runs import check_runs
    from ..evaluate.score import moses_unescape, read_lines

    check_runs([(group[0], [[p] for p in group]) for group in args.hyp])  # one run counts once
    systems: dict[str, list[list[str]]] = {}
    for group in args.hyp:
        label = group[0] if len(group) == 1 else f"{group[0]} (+{len(group) - 1} more runs)"
        runs = []
        for path in group:
            hyps = read_lines(path)
            if args.unescape:  # Moses' XML escapes in tokenized outputs (fairseq on Moses-tokenized data)
                hyps = [moses_unescape(x) for x in hyps]
            if len(hyps) != len(refs):
                return {}, (f"{path} has {len(hyps)} lines but the references {args.ref} have {len(refs)}; "
                            "give one hypothesis per reference line (an empty line for an empty output).")
            runs.append(hyps)
        systems[label] = runs
    first = next(iter(systems))
    if any(len(r) > 1 for r in systems.values()):  # the seed-aware test: at least 2 runs of every system
        odd = next((n for n, r in systems.items() if len(r) < 2), None)
        if odd is not None:
            other = first if odd != first else next(n for n, r in systems.items() if len(r) > 1)
            return {}, (f"--hyp {odd.split(' (+')[0]}: this system has 1 run but {other.split(' (+')[0]} has "
                        f"{len(systems[other])}; the seed-aware test needs at least 2 runs (seeds) of every system: "
                        "give one file per seed (--hyp A_SEED1 A_SEED2 A_SEED3 --hyp B_SEED1 B_SEED2 B_SEED3).")
    return systems, None


def _bootstrap_problem(args, n_lines: int) -> str | None:
    """--bootstrap beyond what memory allows for ``n_lines`` test lines: the sentence that says so, else None."""
    from ..evaluate.score import bootstrap_refusal

    return bootstrap_refusal(args.bootstrap, f"--bootstrap {args.bootstrap}", n_lines)


def cmd_score(args) -> int:
    from ..evaluate.score import read_lines

    if args.bootstrap < 0:
        return _err(f"--bootstrap {args.bootstrap}: give a number of samples >= 0.")
    if len(args.ref) > 1:
        return _score_test_sets(args)
    args.ref = args.ref[0]
    refs = read_lines(args.ref)
    if not refs:
        return _err(f"{args.ref}: the reference file is empty; give the references, one per line.")
    too_many = _bootstrap_problem(args, len(refs))
    if too_many:
        return _err(too_many)
    systems, problem = _score_systems(args, refs)
    if problem:
        return _err(problem)
    _score_report(systems, refs, args)
    return 0


def _score_test_sets(args) -> int:
    """``score --ref A B ...``: every --hyp file given as one file per test set, comma-joined in the order of --ref;
    the joined set (every set's lines concatenated) scored and tested first, then each set alone."""
    import argparse

    from ..evaluate.score import read_lines

    n = len(args.ref)
    for group in args.hyp:
        odd = next((h for h in group if len(h.split(",")) != n or "" in h.split(",")), None)
        if odd is not None:
            return _err(f"--hyp {odd}: {len(odd.split(','))} file(s) for the {n} test sets of --ref; give one file "
                        f"per test set, comma-joined in the order of --ref (--hyp A_{Path(args.ref[0]).name}.hyp,"
                        f"A_{Path(args.ref[1]).name}.hyp ...).")
    sets = []
    for i, ref in enumerate(args.ref):
        refs = read_lines(ref)
        if not refs:
            return _err(f"{ref}: the reference file is empty; give the references, one per line.")
        one = argparse.Namespace(**{**vars(args), "ref": ref,
                                    "hyp": [[h.split(",")[i] for h in group] for group in args.hyp]})
        systems, problem = _score_systems(one, refs)
        if problem:
            return _err(problem)
        sets.append((ref, refs, systems))
    too_many = _bootstrap_problem(args, sum(len(set_refs) for _, set_refs, _ in sets))
    if too_many:
        return _err(too_many)
    labels = [g[0] if len(g) == 1 else f"{g[0]} (+{len(g) - 1} more runs)" for g in args.hyp]
    joined = {label: [[h for _, _, systems in sets for h in list(systems.values())[j][k]]
                      for k in range(len(args.hyp[j]))] for j, label in enumerate(labels)}
    refs = [r for _, set_refs, _ in sets for r in set_refs]
    print(f"#### joined test set: {' + '.join(args.ref)} ({len(refs):,} lines; scores recomputed on the join)")
    _score_report(joined, refs, args)
    for ref, set_refs, systems in sets:
        print(f"\n#### test set {ref} ({len(set_refs):,} lines)")
        _score_report(systems, set_refs, args)
    return 0


def _score_report(systems: dict[str, list[list[str]]], refs: list[str], args) -> None:
    """Print every system's scores (mean ± std over its runs) and, with --bootstrap, the test against the first."""
    import statistics

    from ..evaluate.score import corpus_scores, format_report

    for name, runs in systems.items():
        print(f"== {name}")
        per_run = [corpus_scores(h, refs, lowercase_tokenized=args.lc_tok, lang=args.lang) for h in runs]
        if len(runs) == 1:
            print(format_report(per_run[0]))
            continue
        for i, scores in enumerate(per_run):
            print(f"run {i + 1}: " + ", ".join(f"{s.name} {s.score:.2f}" for s in scores))
        for j, s in enumerate(per_run[0]):
            values = [scores[j].score for scores in per_run]
            print(f"{s.name} = {statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} (mean ± std over "
                  f"{len(runs)} runs) ({s.signature})")
    if args.bootstrap and len(systems) > 1:
        # with --lc-tok the test is also run on BLEU (lc,tok): a system trained on lowercased text is
        # compared with a cased one on that score, not on cased BLEU, which its casing alone decides
        metrics = [("bleu", "BLEU")] + ([("bleu_lc_tok", "BLEU (lc,tok)")] if args.lc_tok else [])
        test = _seed_aware_lines if len(next(iter(systems.values()))) > 1 else _bootstrap_lines
        for metric, label in metrics:
            print("\n".join(test(systems, refs, metric, label, args)))


def _parser_score(sub) -> None:
    s = sub.add_parser("score", help="sacreBLEU BLEU/chrF with signatures; paired bootstrap or, with several "
                       "runs per system, the seed-aware test")
    s.add_argument("--hyp", action="append", nargs="+", required=True,
                   help="a system's translations: one file, or one file per seed (--hyp A1 A2 A3); repeatable, the "
                        "first system is the baseline")
    s.add_argument("--ref", required=True, nargs="+",
                   help="the reference translations, one per line (.gz ok); several test sets of one domain: one file "
                        "each (--ref test_2016_flickr.de test_2017_flickr.de), every --hyp file then comma-joined in "
                        "their order (--hyp A16.hyp,A17.hyp): the joined set is scored and tested first, then each set")
    s.add_argument("--lc-tok", action="store_true", help="also BLEU lowercased on Moses-tokenized text (fairseq Multi30k anchor); with --bootstrap "
                        "the paired test runs on it too")
    s.add_argument("--lang", default="en", help="target language for the Moses tokenizer")
    s.add_argument("--bootstrap", type=int, default=0,
                   help="bootstrap samples of the test (0 = off, at most 10,000): sacreBLEU's paired bootstrap with "
                        "one run per system; with several, the seed-aware test (docs/experiments.md)")
    s.add_argument("--unescape", action="store_true",
                   help="undo Moses' XML escapes (&apos; &quot; &amp; &#124; &lt; &gt; &#91; &#93;) in every hypothesis first, "
                        "as for translations made on Moses-tokenized data (../shared/data/anchors); read BLEU (lc,tok) then")
    _seed_test_option(s)
    s.set_defaults(func=cmd_score)


def _seed_test_option(s) -> None:
    s.add_argument("--seed-test", choices=["decomposed", "double-count"], default="decomposed",
                   help="the seed-aware test's form: decomposed (default; each noise counted once) or double-count (Clark et al.'s sum, the seed × sentence interaction counted twice; for comparison); docs/experiments.md")


def _bootstrap_lines(systems: dict, refs: list[str], metric: str, label: str, args) -> list[str]:
    from ..evaluate.score import paired_bootstrap

    names = list(systems)
    res = paired_bootstrap(systems[names[0]][0], {n: systems[n][0] for n in names[1:]}, refs, metric=metric,
                           n_samples=args.bootstrap, lang=args.lang)
    return ([f"paired bootstrap resampling ({args.bootstrap} samples, sacreBLEU, {label}), baseline {names[0]} "
             "(one run per system: test-set sampling only, not training variance):"]
            + [f"  {n}: {label} {r['score']:.2f} vs {r['baseline']:.2f}  delta {r['delta']:+.2f}  "
               f"p = {r['p_value']:.4f}" for n, r in res.items()])


def _seed_aware_lines(systems: dict, refs: list[str], metric: str, label: str, args) -> list[str]:
    from ..evaluate.seeds import describe_test, seed_aware_test

    names = list(systems)
    res = seed_aware_test(systems[names[0]], {n: systems[n] for n in names[1:]}, refs, metric=metric,
                          n_samples=args.bootstrap, lang=args.lang, method=args.seed_test)
    lines = [f"{label}, baseline {names[0]}: {describe_test(args.bootstrap, 12345, args.seed_test)}"]
    for n, t in res.items():
        lines.append(f"  {n}: {label} {t.mean:.2f} ± {t.std:.2f} vs {t.baseline_mean:.2f} ± {t.baseline_std:.2f}  "
                     f"delta {t.delta:+.2f}  p = {t.p_value:.4f}  ASO eps = {t.aso_better:.2f}  (s_dev "
                     f"{t.std:.2f}/{t.baseline_std:.2f}, s_sel {t.s_sel:.2f}/{t.baseline_s_sel:.2f})")
    return lines


def cmd_experiment(args) -> int:
    from ..experiment import run_grid

    overrides = list(args.overrides) + ([f"evaluate.seed_test={args.seed_test}"] if args.seed_test else [])
    report = run_grid(args.grid, out_dir=args.out, overrides=overrides, jobs_at_once=args.jobs,
                      report_only=args.report_only)
    print(f"experiment: results in {report}")
    return 0


def _parser_experiment(sub) -> None:
    s = sub.add_parser("experiment", help="train, decode and score a grid of configs; write a results table")
    s.add_argument("grid", help="grid YAML (see configs/grids/)")
    s.add_argument("--out", help="output directory (default: the grid's out_dir)")
    s.add_argument("--jobs", type=_at_least(1), default=1,
                   help="train this many runs at once (default 1: one after the other, each run's speed measured "
                        "alone), at most one per CPU and per run left to train; give each its share of the cores "
                        "with train.threads=N")
    s.add_argument("--report-only", action="store_true",
                   help="train and decode nothing: write the report from the runs that have results (a grid still "
                        "running, or runs trained on another machine and copied into the output directory)")
    s.add_argument("overrides", nargs="*", default=[],
                   help="grid keys (budget.max_updates=N, seeds=[1,2], evaluate.beam=4, grid.<key>=...) change the "
                        "grid; other section.key=value items apply to every run's config")
    s.add_argument("--seed-test", choices=["decomposed", "double-count"], default=None,
                   help="the seed-aware test's form (default: the grid's evaluate.seed_test, decomposed): decomposed "
                        "counts each noise once, double-count is Clark et al.'s sum (for comparison)")
    s.set_defaults(func=cmd_experiment)


def cmd_probe(args) -> int:
    from ..analysis.probe import load_probe_config, run_probe

    report = run_probe(load_probe_config(args.config, args.overrides))
    print(f"probe: results in {report}")
    return 0


def _parser_probe(sub) -> None:
    s = sub.add_parser("probe", help="probing tasks (MG-SA sec. 4.2): Voice, Tense, TSS, SPC, POS")
    s.add_argument("config", help="probe YAML (see configs/probe/)")
    s.add_argument("overrides", nargs="*", default=[], help="section.key=value overrides")
    s.set_defaults(func=cmd_probe)


def cmd_tag(args) -> int:
    from ..tasks.tagger import run_tag

    report = run_tag(args.config, args.overrides, report_only=args.report_only, only_rows=args.rows,
                     jobs=args.jobs)
    print(f"tag: results in {report}")
    return 0


def _parser_tag(sub) -> None:
    s = sub.add_parser("tag", help="POS tagging with an encoder-only Transformer (PhraseTransformer sec. 4.3, Table 2)")
    s.add_argument("config", help="tag YAML (see configs/tag/)")
    s.add_argument("--report-only", action="store_true",
                   help="train nothing: write tag.md from the rows that finished and name the others")
    s.add_argument("--row", dest="rows", action="append", metavar="NAME",
                   help="train only the row of this name (repeatable); the report lists every finished row")
    s.add_argument("--jobs", type=int, default=1,
                   help="train this many rows at once, each in its own process (with train.threads=1 on 2 cores)")
    s.add_argument("overrides", nargs="*", default=[], help="section.key=value overrides, e.g. train.epochs=5")
    s.set_defaults(func=cmd_tag)


def cmd_induce(args) -> int:
    from ..tasks.induce import run_induce

    written = run_induce(checkpoint=args.checkpoint, conllu=args.conllu, out_dir=args.out, scores=args.scores,
                         layer=args.layer, head=args.head, punct=args.punct, progress=not args.no_progress,
                         draw=args.draw, draw_max_words=args.draw_max_words)
    print(f"induce: wrote {', '.join(str(p) for p in written)}")
    return 0


def _parser_induce(sub) -> None:
    s = sub.add_parser("induce", help="induce dependency trees from a trained encoder and score them (SA-NMT sec. 6)")
    s.add_argument("--checkpoint", required=True, help="an SA-NMT or structured-attention checkpoint")
    s.add_argument("--conllu", required=True, help="CoNLL-U sentences (.gz ok); scored when it has gold heads")
    s.add_argument("--out", required=True, help="output directory (<stem>.induced.conllu, induce.md/json)")
    s.add_argument("--scores", default="phi", choices=["phi", "beta", "log_beta"],
                   help="what eq. 24 collapses: arc scores (default), marginals/weights, or their logs")
    s.add_argument("--layer", type=_at_least(0), default=0,
                   help="Transformer: the encoder layer whose attention is used (default: the first structured one)")
    s.add_argument("--head", type=_at_least(0), default=0, help="the (structured) head whose arcs are used")
    s.add_argument("--punct", default="reduce", choices=["reduce", "skip"],
                   help="reduce: gold-PUNCT words removed from the sentence before extraction and scoring (default; "
                        "the paper's baselines); skip: one tree over the whole sentence, PUNCT dependents not scored")
    s.add_argument("--draw", type=_at_least(0), default=0,
                   help="draw the first N sentences (Fig. 4: beta over head words; Fig. 5: the tree over the gold one)")
    s.add_argument("--draw-max-words", type=_at_least(1), default=25, help="only sentences of at most this many words are drawn")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_induce)


def cmd_induce_table(args) -> int:
    from ..tasks.induce import induce_table

    runs = []
    for item in args.runs:
        if "=" not in item:
            return _err(f"induce-table: {item!r} is not LABEL=DIR; write e.g. 'SA-NMT (shared)=runs/induce/sa'.")
        label, d = item.split("=", 1)
        if any(label == known for known, _ in runs):
            return _err(f"induce-table: the label {label!r} is given twice; give every run its own label.")
        runs.append((label, d))
    bleu = {}
    for item in args.bleu or []:
        label, _, value = item.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            label = ""
        if not label:
            return _err(f"induce-table: --bleu {item!r} is not LABEL=NUMBER; write e.g. --bleu 'SA-NMT (shared)=27.1'.")
        if not math.isfinite(number):
            return _err(f"induce-table: --bleu {item!r} is not a finite number; give the run's BLEU, e.g. "
                        f"--bleu '{label}=27.1' (leave a run without a score out of --bleu).")
        if label in bleu:
            return _err(f"induce-table: --bleu gives {label!r} twice; give every run's BLEU once.")
        bleu[label] = number
    print(f"induce-table: wrote {induce_table(runs, args.out, args.title, bleu=bleu)}")
    return 0


def _parser_induce_table(sub) -> None:
    s = sub.add_parser("induce-table", help="Tables 3 and 4 (DA/UA, productions) of several induce outputs")
    s.add_argument("runs", nargs="+", help="LABEL=DIR, DIR an `induce --out` directory (same gold file each)")
    s.add_argument("--out", required=True, help="the Markdown file to write")
    s.add_argument("--title", default="", help="title above the table and picture")
    s.add_argument("--bleu", action="append", metavar="LABEL=NUMBER",
                   help="a model's BLEU (repeatable): adds a BLEU column and the rank correlation of DA/UA with BLEU")
    s.set_defaults(func=cmd_induce_table)


def cmd_analyze(args) -> int:
    from ..analysis.heatmaps import run_analyze

    written = run_analyze(checkpoint=args.checkpoint, input_path=args.input, out_dir=args.out,
                          sentences=args.sentences, stats_sentences=args.stats_sentences,
                          parse_dependency=args.parse_dependency, parse_constituency=args.parse_constituency,
                          progress=not args.no_progress, log=lambda msg: print(msg, file=sys.stderr))
    print(f"analyze: wrote {len(written)} files to {args.out}")
    return 0


def _parser_analyze(sub) -> None:
    s = sub.add_parser("analyze", help="attention maps (PNG) and attention statistics of a checkpoint")
    s.add_argument("--checkpoint", required=True, help="the checkpoint whose attention is drawn")
    s.add_argument("--input", required=True, help="source sentences, one per line")
    s.add_argument("--out", required=True, help="output directory for the PNGs and statistics")
    s.add_argument("--sentences", type=_at_least(0), default=3, help="how many sentences to draw")
    s.add_argument("--stats-sentences", type=_at_least(0), default=0,
                   help="compute attention_stats.json / phrase_quadrants.md over this many sentences "
                        "(default: the drawn ones); pictures stay the first --sentences")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--parse-dependency", help="pre-parsed input (CoNLL-U) for models prepared with parser 'file'")
    s.add_argument("--parse-constituency", help="pre-parsed input (PTB) for models prepared with parser 'file'")
    s.set_defaults(func=cmd_analyze)


def cmd_gate(args) -> int:
    from ..analysis.gate import run_gate

    written = run_gate(checkpoint=args.checkpoint, input_path=args.input, reference_path=args.reference,
                       out_dir=args.out, beam=args.beam, pos=args.pos, word_rule=args.word_rule,
                       max_sentences=args.max_sentences, draw=args.draw, batch_size=args.batch_size,
                       progress=not args.no_progress)
    print(f"gate: wrote {', '.join(str(p) for p in written)}")
    return 0


def _parser_gate(sub) -> None:
    s = sub.add_parser("gate", help="SA-NMT's syntactic gate per target token and POS (sec. 5, eq. 23; PNG + tables)")
    s.add_argument("--checkpoint", required=True, help="an SA-NMT / FA-NMT checkpoint (RNN family)")
    s.add_argument("--input", required=True, help="source sentences, one per line (.gz ok)")
    s.add_argument("--reference", help="their reference translations: also forced-decoded and analysed")
    s.add_argument("--out", required=True, help="output directory (gate.md/json, gate_tokens.tsv, PNGs)")
    s.add_argument("--beam", type=_at_least(1), default=5, help="beam size of the translations analysed (default 5)")
    s.add_argument("--pos", default="hanta",
                   help="target POS: hanta (German, STTS mapped to UPOS; pip install hanta), spacy:<pipeline>, none")
    s.add_argument("--word-rule", default="max", choices=["max", "first"],
                   help="a token's z from its pieces' (default: the maximum)")
    s.add_argument("--max-sentences", type=_at_least(0), default=0, help="only the first N input lines (0: all)")
    s.add_argument("--draw", type=_at_least(0), default=6, help="sentences drawn in gate_sentences.png (Fig. 6)")
    s.add_argument("--batch-size", type=_at_least(1), default=64, help="sentences per forced-decoding batch")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_gate)


def _pairs(items: list[str] | None, option: str, form: str, example: str) -> dict[str, str]:
    """``KEY=VALUE`` options given several times -> a dict; a malformed one is a :class:`UserError`."""
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"{option} {item}: use {form}, e.g. {option} {example}.")
        pairs[key] = value
    return pairs


def cmd_sweep_plot(args) -> int:
    from ..analysis.sweep import plot_sweep

    where = _pairs(args.where, "--where", "COLUMN=VALUE", "split=attraction4")
    written = plot_sweep(args.results, args.pattern, args.out, references=args.reference or [], column=args.column,
                         xlabel=args.xlabel, title=args.title, where=where)
    print(f"sweep-plot: wrote {', '.join(str(p) for p in written)}")
    return 0


def _parser_sweep_plot(sub) -> None:
    s = sub.add_parser("sweep-plot", help="a score against a swept setting from an experiment's results.csv "
                                          "(RHE Fig. 4, Table 3)")
    s.add_argument("results", help="the runner's results.csv")
    s.add_argument("--pattern", required=True,
                   help="regular expression over row names with a named group x, e.g. 'fixed gate (?P<x>[0-9.]+)'")
    s.add_argument("--reference", action="append", help="a row drawn as a horizontal line (repeatable)")
    s.add_argument("--column", default="bleu", help="the csv column plotted (bleu_mean: with bleu_std error bars)")
    s.add_argument("--where", action="append", help="COLUMN=VALUE: keep only such rows (repeatable), e.g. "
                                                     "split=attraction4 in a generalization.csv")
    s.add_argument("--xlabel", default="x", help="the x axis' label")
    s.add_argument("--title", default="", help="title above the table and picture")
    s.add_argument("--out", required=True, help="PNG path; the numbers go to the same path with .md")
    s.set_defaults(func=cmd_sweep_plot)


def cmd_delta_plot(args) -> int:
    from ..analysis.deltas import plot_deltas

    names = _pairs(args.split_name, "--split-name", "SPLIT=NAME", "test1=test_2017_flickr")
    written = plot_deltas(args.results, args.out, title=args.title, split_names=names)
    print(f"delta-plot: wrote {', '.join(str(p) for p in written)}")
    return 0


def _parser_delta_plot(sub) -> None:
    s = sub.add_parser("delta-plot", help="each row's difference from the baseline, with the seed-aware test's "
                                          "95 %% interval, in several experiments' results.csv (e.g. two budgets)")
    s.add_argument("results", nargs="+", help="[LABEL=]results.csv of a grid with at least 2 seeds per row, e.g. "
                                              "'2,000 updates=runs/a/results.csv'")
    s.add_argument("--split-name", action="append", help="SPLIT=NAME: a split's name in the picture (repeatable), "
                                                          "e.g. test1=test_2017_flickr")
    s.add_argument("--title", default="", help="title above the table and picture")
    s.add_argument("--out", required=True, help="PNG path; the numbers go to the same path with .md")
    s.set_defaults(func=cmd_delta_plot)


def cmd_compare(args) -> int:
    from ..analysis.compare import CompareConfig
    from ..analysis.compare_report import run
    from ..evaluate.score import bootstrap_refusal
    from ..experiment.compare_inputs import inputs_from_benchmark, inputs_from_experiment

    too_many = bootstrap_refusal(args.bootstrap, f"--bootstrap {args.bootstrap}")
    if too_many:
        return _err(too_many)
    cfg = CompareConfig(metric=args.metric, lang=args.lang, min_bucket=args.min_bucket, n_samples=args.bootstrap,
                        seed_test=args.seed_test,
                        top=args.top, buckets=args.buckets.split(",") if args.buckets else None,
                        attention_sentences=args.attention_sentences,
                        attention_lines=[n - 1 for n in args.attention_lines] if args.attention_lines else None)
    checkpoints = _compare_checkpoints(args)
    if args.experiment:
        if args.hyp or args.src or args.ref:
            return _err("compare: give either --experiment DIR with --row, or --src, --ref and --hyp, not both.")
        if args.benchmark:
            if args.split or args.data:
                return _err("compare: --benchmark joins every split of the benchmark and reads its own sources; "
                            "drop --split and --data.")
            inputs = inputs_from_benchmark(args.experiment, args.row or [], args.benchmark)
        else:
            inputs = inputs_from_experiment(args.experiment, args.row or [], args.split or ["test"], data=args.data)
    elif args.benchmark:
        return _err("compare: --benchmark reads a synthetic-benchmark grid's runs; give it with --experiment DIR "
                    "--row BASELINE --row SYSTEM.")
    else:
        if not (args.src and args.ref and args.hyp):
            return _err("compare: give --src SOURCE --ref REFERENCE and --hyp A1 A2 ... once per system (the first "
                        "is the baseline), or --experiment DIR --row BASELINE --row SYSTEM.")
        names = args.name or [f"system {i + 1}" for i in range(len(args.hyp))]
        if len(names) != len(args.hyp):
            return _err(f"compare: {len(names)} --name for {len(args.hyp)} --hyp groups; give one name per system.")
        inputs = _compare_files(args, names)
    if checkpoints:
        unknown = [n for n in checkpoints if n not in [x.name for x in inputs.systems]]
        if unknown:
            return _err(f"compare: --checkpoint {unknown[0]}=...: no system is called {unknown[0]!r}; the systems are "
                        f"{', '.join(repr(x.name) for x in inputs.systems)}.")
    attention = None
    if checkpoints:
        from .compare_attention import attention_payload

        words = [t.words for t in inputs.parses] if inputs.parses is not None else None
        attention = lambda lines: attention_payload(checkpoints, inputs.sources, lines, words,  # noqa: E731
                                                    log=lambda m: print(m, file=sys.stderr))
    written = run(inputs, cfg, args.out, html=args.html, attention=attention)
    print(f"compare: wrote {', '.join(str(p) for p in written)}")
    return 0


def _compare_files(args, names: list[str]):
    """``compare --src --ref --hyp``'s inputs; several test sets (``--src A B --ref A B``, every --hyp file comma-joined
    in their order) are joined in order, each set also a bucket of its own. Misaligned files: one sentence."""
    from ..analysis.compare import System
    from ..analysis.compare_report import CompareInputs, parses_for, read_lines
    from ..evaluate.runs import check_runs

    n = len(args.ref)
    if len(args.src) != n:
        raise UserError(f"compare: {len(args.src)} --src file(s) for {n} --ref file(s); give each test set's source "
                        "and references in one order (--src A.en B.en --ref A.de B.de).")
    refs = [read_lines(r, "the reference") for r in args.ref]
    srcs = [read_lines(x, "the source") for x in args.src]
    for path, src, ref, ref_path in zip(args.src, srcs, refs, args.ref):
        if n > 1 and len(src) != len(ref):
            raise UserError(f"compare: {path} has {len(src)} lines, the reference {ref_path} {len(ref)}; give the "
                            "source of that test set, in the order of --ref.")
    systems = []
    for name, group in zip(names, args.hyp):
        runs = []
        for h in group:
            parts = h.split(",") if n > 1 else [h]
            if len(parts) != n or "" in parts:
                raise UserError(f"compare: --hyp {h}: {len(parts)} file(s) for the {n} test sets of --ref; give one "
                                "file per test set, comma-joined in the order of --ref (--hyp A1_SET1.hyp,A1_SET2.hyp "
                                "A2_SET1.hyp,A2_SET2.hyp ...).")
            lines = [read_lines(x, f"{name}'s translation") for x in parts]
            bad = next((i for i in range(n) if n > 1 and len(lines[i]) != len(refs[i])), None)
            if bad is not None:
                raise UserError(f"compare: {parts[bad]} has {len(lines[bad])} lines, the reference {args.ref[bad]} "
                                f"{len(refs[bad])}; give {name}'s translation of that test set, one line per "
                                "reference line, in the order of --ref.")
            runs.append([x for part in lines for x in part])
        systems.append(System(name, runs))
    check_runs([(name, [h.split(",") if n > 1 else [h] for h in group]) for name, group in zip(names, args.hyp)],
               prefix="compare: ", rename="give each system its own --name")
    labels = [Path(r).name.removesuffix(".gz") for r in args.ref]
    labels = labels if len(set(labels)) == n else list(args.ref)
    sources = [x for src in srcs for x in src]
    return CompareInputs(sources, [x for ref in refs for x in ref], systems,
                         parses_for(sources, args.data, args.parse_cache),
                         read_lines(args.train_ref, "the training targets") if args.train_ref else None,
                         test_sets=list(zip(labels, map(len, refs))) if n > 1 else None)


def _compare_checkpoints(args) -> dict[str, str]:
    """``--checkpoint NAME=PATH`` items as {system name: checkpoint}; a malformed item is one sentence."""
    out: dict[str, str] = {}
    for item in args.checkpoint or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"compare: --checkpoint {item!r}: write it as SYSTEM=CHECKPOINT, e.g. "
                            "--checkpoint 'Transformer=runs/transformer/seed1/average.pt'.")
        if not Path(path).is_file():
            raise UserError(f"compare: --checkpoint {name}={path}: no such file; give the checkpoint (e.g. "
                            "RUN_DIR/average.pt) of that system.")
        out[name] = path
    if out and not args.html:
        raise UserError("compare: --checkpoint draws attention maps in the HTML report; add --html.")
    return out


def _parser_compare(sub) -> None:
    s = sub.add_parser("compare", help="where systems of several seeds differ: seed-aware Δ by bucket (length, "
                                       "syntax, word frequency) and the sentences that differ most")
    s.add_argument("--src", nargs="+", help="the source lines the references translate (several test sets: one "
                                            "file each, in the order of --ref)")
    s.add_argument("--ref", nargs="+", help="the references; several test sets of one domain: one file each, joined in "
                                            "order (the all-sentences row is the joined set, each set a bucket)")
    s.add_argument("--hyp", nargs="+", action="append", metavar="RUN",
                   help="one system's translations, one file per seed (with several --ref files: each seed's files "
                        "comma-joined in the order of --ref); repeat per system, the baseline first")
    s.add_argument("--name", action="append", help="a system's name, once per --hyp (default: system 1, ...)")
    s.add_argument("--data", metavar="DATASET",
                   help="with --src: the dataset whose parser parses the source (syntax buckets); with --experiment: "
                        "where the runs' dataset is here (default: data.path of their resolved.yaml, relative to "
                        "this directory)")
    s.add_argument("--parse-cache", help="the source's parses made with `structnmt parse --data DATASET`")
    s.add_argument("--train-ref", help="the training targets (word-frequency buckets), plain or .gz")
    s.add_argument("--experiment", help="an experiment's output directory instead of files: its runs of --row")
    s.add_argument("--row", action="append", help="a row of --experiment (repeatable; the first is the baseline)")
    s.add_argument("--split", action="append", help="the split(s) of --experiment, joined in order (default test)")
    s.add_argument("--benchmark", metavar="BENCH_DIR",
                   help="with --experiment on the synthetic benchmark (structnmt synth --generalization --out "
                        "BENCH_DIR): every split joined, the gold trees as parses, and subject-verb agreement by "
                        "attractors and by construction")
    s.add_argument("--buckets", help="the groups of buckets, comma-separated, of length, syntax, frequency, agreement "
                                     "(default: every group the inputs allow)")
    s.add_argument("--metric", default="bleu_lc_tok", choices=["bleu_lc_tok", "bleu", "chrf"],
                   help="the sentence buckets' metric (default bleu_lc_tok, the Multi30k tables')")
    s.add_argument("--lang", default="de", help="the target language, for the Moses tokenizer (default de)")
    s.add_argument("--min-bucket", type=_at_least(1), default=50,
                   help="buckets with fewer sentences (words) are marked small (default 50)")
    s.add_argument("--bootstrap", type=_at_least(2), default=1000, help="bootstrap resamples per bucket (default 1000, at most 10,000)")
    s.add_argument("--top", type=_at_least(0), default=20, help="sentences shown per system (default 20)")
    s.add_argument("--html", action="store_true", help="also write report.html: one self-contained page with the "
                                                        "charts, the numbers, a sentence browser and the parse trees")
    s.add_argument("--checkpoint", action="append", metavar="SYSTEM=CKPT",
                   help="with --html: a system's checkpoint (one seed's, e.g. RUN_DIR/average.pt); the page then "
                        "shows its attention per layer and head for the chosen sentences, and the induced tree of a "
                        "tree-inducing model (repeat per system)")
    s.add_argument("--attention-sentences", type=_at_least(0), default=6,
                   help="attention maps for this many sentences where the systems differ most (default 6)")
    s.add_argument("--attention-lines", type=_at_least(1), nargs="+", metavar="LINE",
                   help="attention maps for these 1-based lines instead")
    s.add_argument("--out", required=True, help="output directory: compare.csv, compare_between.csv, compare.md, buckets.png, "
                   "sentences.md")
    _seed_test_option(s)
    s.set_defaults(func=cmd_compare)


def cmd_plan_seeds(args) -> int:
    from ..analysis.seed_plan import format_plan, plan_seeds

    metric, rows = plan_seeds(args.results, args.delta, alpha=args.alpha, target=args.power,
                              max_seeds=args.max_seeds, test_scale=args.test_scale, method=args.seed_test,
                              joint=args.joint)
    print(format_plan(metric, rows, args.delta, args.alpha, args.power, args.test_scale))
    return 0


def _parser_plan_seeds(sub) -> None:
    s = sub.add_parser("plan-seeds", help="each row's minimal detectable effect and the seeds per system that "
                                          "would resolve a given difference (seed-aware test)")
    s.add_argument("results", help="an experiment's results.csv, or its output directory")
    s.add_argument("--delta", type=float, required=True, help="the difference to resolve, in the tested metric's "
                                                              "points (e.g. 0.5 BLEU (lc,tok))")
    s.add_argument("--alpha", type=float, default=0.05, help="the test's level (default 0.05)")
    s.add_argument("--power", type=float, default=0.8, help="the probability of detecting --delta (default 0.8)")
    s.add_argument("--max-seeds", type=int, default=100000,
                   help="the most seeds per system considered (default 100000)")
    s.add_argument("--test-scale", type=float, default=1.0,
                   help="plan as if each test set were this many times as large (2: two such test sets joined)")
    s.add_argument("--joint", action="store_true",
                   help="also, per row, the MDE over seeds per system (3, 5, 10, 20, the row's) x test-set size "
                        "(1, 2, 4 times, and --test-scale), with the floor and the seeds for --delta at each size")
    s.add_argument("--seed-test", choices=["decomposed", "double-count"], default="decomposed",
                   help="the form of the seed-aware test planned for (default decomposed; docs/experiments.md)")
    s.set_defaults(func=cmd_plan_seeds)


def cmd_head_roles(args) -> int:
    from ..analysis.head_roles import compare_runs

    written = compare_runs(args.runs, args.labels, args.out)
    print(f"head-roles: wrote {', '.join(str(p) for p in written)}")
    return 0


def _parser_head_roles(sub) -> None:
    s = sub.add_parser("head-roles", help="redundant encoder heads (RHE) over training, compared across runs (PNG + table)")
    s.add_argument("runs", nargs="+", help="save_dirs of runs trained with train.head_roles=true")
    s.add_argument("--labels", nargs="*", help="one label per run (default: the directory names)")
    s.add_argument("--out", required=True, help="output directory for head_roles.png and head_roles.md")
    s.set_defaults(func=cmd_head_roles)


def cmd_demo(args) -> int:
    from .demo import run_demo

    if args.minutes is not None and not args.minutes > 0:
        return _err(f"--minutes {args.minutes}: give a training time above 0 minutes, e.g. --minutes 3.")
    return run_demo(args.workdir, updates=args.updates, minutes=args.minutes or 0.0, seed=args.seed,
                    overrides=args.overrides)


# --------------------------------------------------------------------------- parser


def _parser_demo(sub) -> None:
    s = sub.add_parser("demo", help="train a small model on the synthetic task and report BLEU")
    s.add_argument("--workdir", default="runs/demo", help="where the corpus, dataset and model go (default runs/demo)")
    s.add_argument("--updates", type=_at_least(1), default=None,
                   help="training updates (default: the demo recipe's train.max_updates, about 3 minutes on 2 "
                        "cores; the same model on every machine, however busy)")
    s.add_argument("--minutes", type=float, default=None,
                   help="also stop training after this many minutes, whichever comes first (the numbers then "
                        "depend on the machine's speed)")
    s.add_argument("--seed", type=int, default=1, help="seed of the corpus and the training (default 1)")
    s.add_argument("overrides", nargs="*", default=[], help="config overrides, e.g. model.encoder_layers=2")
    s.set_defaults(func=cmd_demo)


#: every command's parser, in the order of `structnmt -h` (each lives beside its command)
PARSERS = (
    _parser_synth, _parser_prepare, _parser_features, _parser_train, _parser_parse, _parser_translate, _parser_export,
    _parser_average, _parser_score, _parser_experiment, _parser_probe, _parser_tag, _parser_induce,
    _parser_induce_table, _parser_head_roles, _parser_sweep_plot, _parser_delta_plot, _parser_plan_seeds, _parser_compare,
    _parser_analyze, _parser_gate,
    _parser_demo,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="structnmt", description="Structure-aware neural machine translation.",
                                epilog="--debug (anywhere on the line) shows the traceback of an error.")
    help_user_dir = ("import mechanisms and structure features from DIR (a package, a folder of .py files but its "
                     "test_*.py, *_test.py and conftest.py, or one .py file) before running; may be repeated "
                     "(docs/extending.md)")
    # before the command's name too (fairseq's place): its own destination, since a subcommand's default would
    # overwrite the value of an option of the same destination given before it; _main joins the two
    p.add_argument("--user-dir", action="append", default=[], metavar="DIR", dest="user_dir_before",
                   help=help_user_dir)
    sub = p.add_subparsers(dest="command", required=True)
    for add_parser in PARSERS:
        add_parser(sub)
    for command in sub.choices.values():  # fairseq's --user-dir: mechanisms and features of your own
        command.add_argument("--user-dir", action="append", default=[], metavar="DIR", help=help_user_dir)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``structnmt`` command: one line, never a traceback, for an interrupt at any instant (Ctrl-C or
    SIGTERM while the arguments are read or while a finished command restores its signal handler too)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _err("interrupted")


def _passive_openmp_waits() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user set a policy: an OpenMP thread that finishes its share of a
    parallel region sleeps at once instead of spinning on a core (libgomp's default). On a machine busy
    with other jobs the spinning threads take turns with the ones that have work: training at 2 threads
    beside 2 busy processes ran 1.6-2.2x faster with PASSIVE, and level (1.04x) on an idle machine
    (benchmarks/README.md, ``bench_train.py --omp-wait-compare``). The OpenMP runtime reads the variable
    when torch is loaded, so this runs before anything imports torch; child processes inherit it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _main(argv: list[str] | None) -> int:
    _passive_openmp_waits()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # anywhere on the line: show tracebacks of user errors too
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse cannot put `key=value` overrides after an option that follows the positional
    # argument (`experiment GRID --jobs 2 budget.max_updates=800`); take them here
    if extra:
        takes_overrides = hasattr(args, "overrides")
        if takes_overrides and all("=" in x and not x.startswith("-") for x in extra):
            args.overrides = list(args.overrides or []) + extra
        elif takes_overrides and not any(x.startswith("-") for x in extra):
            word = next(x for x in extra if "=" not in x)
            parser.error(f"'{word}' is neither an option nor an override; write an override as section.key=value, "
                         "e.g. train.max_updates=1000.")
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    restore = _no_restore
    try:  # the SIGTERM handler is installed inside the try: a signal the moment it is installed is caught too
        restore = _terminate_as_interrupt()
        # freed tensor memory stays in the process (glibc); STRUCTNMT_MALLOC=system turns it off
        from ..machine.allocator import configure_allocator

        configure_allocator()
        args.user_dir = args.user_dir_before + args.user_dir  # `structnmt --user-dir A cmd --user-dir B`: A, B
        if args.user_dir:
            from ..plugins import add_user_dirs

            add_user_dirs(args.user_dir)  # kept in the environment: every process this command starts imports them
        return args.func(args) or 0
    except UserError as err:
        if debug:
            raise
        return _err(str(err))
    except BrokenPipeError:  # the reader went away (`structnmt translate ... | head`): end quietly, as Unix tools do
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a producer whose reader closed the pipe
    except OSError as err:  # a file-system fault: read-only, full disk, permissions, a path that is a file ...
        if debug:
            raise
        return _err(os_error_sentence(err))
    except KeyboardInterrupt:
        return _err("interrupted")
    finally:
        restore()


def _no_restore() -> None:
    """What restores the SIGTERM handler before one is installed: nothing."""


class Terminated(KeyboardInterrupt):
    """SIGTERM as an interrupt: every ``except KeyboardInterrupt`` cleans up for it as for Ctrl-C.

    Its own type matters: CPython marks a plain KeyboardInterrupt that leaves code run through ``PyRun_String``
    (as some extension modules run their Python code) as unhandled, even when a caller catches it later, and then
    ends ``python -m structnmt.cli`` by SIGINT instead of with its exit status; it checks the exact type only."""


def _terminate_as_interrupt():
    """SIGTERM (a scheduler, `kill`) ends a command like Ctrl-C: cleanup runs (temporary files removed, worker
    processes stopped) and one line is printed. Returns what restores the previous handler."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise Terminated

    old = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, old)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
