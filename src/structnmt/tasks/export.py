"""Export a plain Transformer checkpoint to CTranslate2, and translate with the export.

``structnmt export --format ctranslate2 --checkpoint run/average.pt --out run/ct2`` writes
a CTranslate2 model directory (``model.bin``, ``config.json``, the vocabularies as
CTranslate2 reads them) plus what structnmt needs to translate raw text with it: the
vocabulary models of the checkpoint (``source.spm.model``, ``target.spm.model``: SentencePiece's; for a
``prepare --subword subword-nmt`` dataset ``source.bpe.model``, ``target.bpe.model``, structnmt's
subword-nmt model with its codes) and
``structnmt_export.json`` (the checkpoint it came from, the vocabularies' SHA-256, the
model's decode settings). ``structnmt translate --checkpoint run/ct2`` then translates
with CTranslate2 instead of PyTorch, with the same options.

What can be exported: the Transformer family with plain multi-head attention in every
role (a mechanism that reads structures or changes the attention has no CTranslate2
counterpart), pre- or post-norm, ReLU or GELU. Refused otherwise, with the reason.

Mapping (``src/structnmt/models/transformer.py`` -> CTranslate2's ``TransformerSpec``):

* embeddings are scaled by sqrt(d) (``scale_embeddings``); the position table is our
  sinusoidal table (sin on even, cos on odd dimensions) from position 0, written as is;
* self-attention: ``q_proj`` and ``kv_proj`` (keys then values) fused into one
  (3d, d) projection; cross-attention: ``q_proj`` and ``kv_proj`` as they are;
* each sublayer's LayerNorm is the norm of its attention or feed-forward block; the
  encoder's and decoder's final norms (pre-norm) are the stacks' ``layer_norm``;
* LayerNorm epsilon 1e-5 (``torch.nn.LayerNorm``'s default), recorded in the config.

Decoding differences, measured by ``benchmarks/bench_decode.py`` (docs/results/): the
maximum output length is ``a * source length + b`` per sentence in structnmt and one
``max_decoding_length`` per batch in CTranslate2 (we pass the batch's largest), and the
two beam searches stop and break ties in their own ways, so a few translations may
differ; PAD and BOS are suppressed in both.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import Config, DecodeConfig, first_mechanism, from_dict
from ..data.dataset import encode_sources
from ..data.vocab import Vocab
from ..errors import UserError
from ..fileio.corpus import file_digest
from ..fileio.files import errors_name, temp_dir_beside
from ..models import build_model
from ..models.checkpoint import checkpoint_vocabs, dataset_vocabs, load_checkpoint, load_model_state

MARKER = "structnmt_export.json"


class ExportError(UserError):
    """The checkpoint cannot be exported, or the output directory cannot be written."""


def _require_ctranslate2():
    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        raise ExportError("CTranslate2 is not installed; install it with: pip install ctranslate2") from e
    import ctranslate2

    return ctranslate2


def exportable(cfg: Config) -> str | None:
    """Why a model with this config cannot be exported, or None when it can."""
    m = cfg.model
    if m.family != "transformer":
        return f"model.family is {m.family}; only the Transformer family has a CTranslate2 counterpart"
    other = first_mechanism(m.attention)
    if other:
        return f"model.attention {other[0]} is {other[1]}; only plain multi-head attention (mha) can be exported"
    if cfg.data.structures:
        return "the model reads structure tensors (data.structures)"
    if m.activation not in ("relu", "gelu"):
        return f"model.activation {m.activation} has no CTranslate2 counterpart"
    return None


def _np(t: torch.Tensor):
    return t.detach().float().cpu().numpy()


def _set_linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _np(weight)
    if bias is not None:
        spec.bias = _np(bias)


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _set_self_attention(spec, attn, norm: torch.nn.LayerNorm) -> None:
    """Self-attention: q_proj and kv_proj (keys, then values) fused into one (3d, d) projection."""
    _set_linear(spec.linear[0], torch.cat([attn.q_proj.weight, attn.kv_proj.weight]),
                torch.cat([attn.q_proj.bias, attn.kv_proj.bias]))
    _set_linear(spec.linear[1], attn.out_proj.weight, attn.out_proj.bias)
    _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, layer) -> None:
    _set_linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
    _set_linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)
    _set_norm(spec.layer_norm, layer.ffn_sub.norm)


def build_spec(model, cfg: Config, src_vocab: Vocab, tgt_vocab: Vocab):
    """A CTranslate2 ``TransformerSpec`` holding the weights of ``model`` (a TransformerModel)."""
    _require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    m = cfg.model
    act = common_spec.Activation.GELU if m.activation == "gelu" else common_spec.Activation.RELU
    enc_spec = transformer_spec.TransformerEncoderSpec(m.encoder_layers, m.heads, pre_norm=m.pre_norm,
                                                       no_final_norm=not m.pre_norm, activation=act)
    dec_spec = transformer_spec.TransformerDecoderSpec(m.decoder_layers, m.heads, pre_norm=m.pre_norm,
                                                       no_final_norm=not m.pre_norm, activation=act)
    positions = _np(model.positions)
    scale = math.sqrt(m.d_model)
    for spec_, emb in ((enc_spec, model.src_embed), (dec_spec, model.tgt_embed)):
        (spec_.embeddings[0] if isinstance(spec_.embeddings, list) else spec_.embeddings).weight = _np(emb.weight)
        spec_.scale_embeddings = scale
        spec_.position_encodings.encodings = positions
    for ls, layer in zip(enc_spec.layer, model.encoder.layers):
        _set_self_attention(ls.self_attention, layer.self_attn, layer.attn_sub.norm)
        _set_ffn(ls.ffn, layer)
    for ls, layer in zip(dec_spec.layer, model.decoder_layers):
        _set_self_attention(ls.self_attention, layer.self_attn, layer.self_sub.norm)
        c = layer.cross_attn
        _set_linear(ls.attention.linear[0], c.q_proj.weight, c.q_proj.bias)
        _set_linear(ls.attention.linear[1], c.kv_proj.weight, c.kv_proj.bias)
        _set_linear(ls.attention.linear[2], c.out_proj.weight, c.out_proj.bias)
        _set_norm(ls.attention.layer_norm, layer.cross_sub.norm)
        _set_ffn(ls.ffn, layer)
    if m.pre_norm:
        _set_norm(enc_spec.layer_norm, model.encoder.norm)
        _set_norm(dec_spec.layer_norm, model.decoder_norm)
    _set_linear(dec_spec.projection, model.output_proj.weight, None)
    spec = transformer_spec.TransformerSpec(enc_spec, dec_spec)
    spec.config.layer_norm_epsilon = 1e-5
    spec.register_source_vocabulary([src_vocab.sp.id_to_piece(i) for i in range(len(src_vocab))])
    spec.register_target_vocabulary([tgt_vocab.sp.id_to_piece(i) for i in range(len(tgt_vocab))])
    return spec


def export_ctranslate2(checkpoint: str | Path, out_dir: str | Path, *, quantization: str | None = None) -> Path:
    """Write the CTranslate2 export of ``checkpoint`` to ``out_dir``; returns ``out_dir``.

    ``out_dir`` must be new, empty, or an earlier export (it holds ``structnmt_export.json``):
    a directory with other files is refused, so nothing this command did not write is replaced.
    """

    _require_ctranslate2()
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise ExportError(f"{out}: exists and is not an earlier structnmt export (no {MARKER}); "
                          "choose a new directory for --out.")
    state = load_checkpoint(checkpoint)
    cfg = from_dict(state["config"], where=f"{checkpoint} (saved config)", saved=True)
    why = exportable(cfg)
    if why:
        raise ExportError(f"{checkpoint}: cannot be exported to CTranslate2: {why}.")
    src_vocab, tgt_vocab = checkpoint_vocabs(state, checkpoint)
    model = build_model(cfg.model, len(src_vocab), len(tgt_vocab))
    load_model_state(model, state, checkpoint)
    spec = build_spec(model.eval(), cfg, src_vocab, tgt_vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    meta = {"checkpoint": str(Path(checkpoint).resolve()), "quantization": quantization or "none",
            "source_sha256": src_vocab.sha256, "target_sha256": tgt_vocab.sha256,
            "lowercase": {"source": src_vocab.lowercase, "target": tgt_vocab.lowercase},
            "moses": {"source": src_vocab.moses, "target": tgt_vocab.moses},
            "decode": {k: getattr(cfg.decode, k) for k in ("beam", "lenpen", "max_len_a", "max_len_b", "nbest",
                                                            "batch_size")},
            "max_positions": cfg.model.max_positions, "vocab_files": state["vocab"]}
    _write_swapped(out, lambda d: _write_export(d, spec, src_vocab, tgt_vocab, meta))
    return out


def _model_file(side: str, vocab: Vocab) -> str:
    """The export's file of one side's vocabulary model: ``{side}.spm.model``, or ``{side}.bpe.model`` for subword-nmt."""
    return f"{side}.{'bpe' if vocab.bpe is not None else 'spm'}.model"


def _write_export(d: Path, spec, src_vocab: Vocab, tgt_vocab: Vocab, meta: dict) -> None:
    spec.save(str(d))
    (d / _model_file("source", src_vocab)).write_bytes(src_vocab.proto)
    (d / _model_file("target", tgt_vocab)).write_bytes(tgt_vocab.proto)
    files = sorted(p.name for p in d.iterdir() if p.is_file())
    # every file the export wrote, hashed: translate refuses an export one of whose files was edited or swapped
    meta = {**meta, "files": files, "sha256": {f: _file_sha256(d / f) for f in files}}
    (d / MARKER).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _file_sha256(path: Path) -> str:
    return file_digest(path)["sha256"]


def _check_export_files(d: Path, meta: dict) -> None:
    """Every file an export recorded (exports written before the hashes: none checked) has its recorded SHA-256."""
    for name, digest in (meta.get("sha256") or {}).items():
        path = d / name
        if not path.is_file():
            raise ExportError(f"{path}: missing from the export; export the checkpoint again.")
        if _file_sha256(path) != digest:
            raise ExportError(f"{path}: not the file {d} was exported with (its SHA-256 differs from the one recorded "
                              "in the export); the translations would change. Restore it or export the checkpoint "
                              "again.")


def _not_written_by_export(out: Path) -> list[Path]:
    """The entries of an earlier export directory that its export did not write (the user's own files)."""
    if not (out / MARKER).is_file():
        return []
    try:
        written = set(json.loads((out / MARKER).read_text(encoding="utf-8")).get("files", []))
    except (OSError, ValueError, AttributeError):
        written = set()
    return [p for p in out.iterdir() if p.name not in written | {MARKER}]


def _write_swapped(out: Path, write) -> None:
    """Build the export in a new directory beside ``out`` and swap it in only when complete: a failure (a
    full disk) leaves the earlier export whole, and no half-written directory behind."""


    if out.is_symlink():  # a link to an earlier export: the export it points to is replaced, the link stays
        out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    new = temp_dir_beside(out, ".", ".new")
    try:
        with errors_name(out, new):
            write(new)
        for p in _not_written_by_export(out):  # a file the user put in the earlier export moves with it (a copy,
            if p.is_symlink():  # so that a failure leaves the original); a link stays a link
                os.symlink(os.readlink(p), new / p.name)
            elif p.is_dir():
                shutil.copytree(p, new / p.name, symlinks=True)
            else:
                shutil.copy2(p, new / p.name)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(new, out)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def is_export(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / MARKER).is_file()


@dataclass
class CT2Translation:
    text: str
    score: float
    tokens: list[str]


class CT2Translator:
    """Raw lines -> translations with a CTranslate2 export (same batching and length limit as structnmt)."""

    def __init__(self, export_dir: str | Path, *, device: str = "cpu", threads: int = 0, data_dir=None):
        """``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (a GPU when CTranslate2 sees one)."""
        ctranslate2 = _require_ctranslate2()
        d = Path(export_dir)
        kind, _, index = device.partition(":")
        if kind == "auto":
            kind = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
            raise ExportError(f"--device {device}: not a device; use cpu, cuda, cuda:N or auto.")
        if kind == "cuda" and ctranslate2.get_cuda_device_count() <= int(index or 0):
            raise ExportError(f"--device {device}: CTranslate2 sees {ctranslate2.get_cuda_device_count()} CUDA "
                              "device(s); use --device cpu.")
        try:
            self.meta = json.loads((d / MARKER).read_text(encoding="utf-8"))
        except ValueError:
            self.meta = None
        needed = ("source_sha256", "target_sha256", "decode", "max_positions", "vocab_files")
        if not isinstance(self.meta, dict) or any(k not in self.meta for k in needed):
            raise ExportError(f"{d / MARKER}: not a readable structnmt export description (truncated or edited); "
                              "export the checkpoint again with structnmt export.")
        lowercase = self.meta.get("lowercase", {})  # exports of `prepare --lowercase` / `--moses` models
        moses = self.meta.get("moses", {})
        files = {side: next((f for f in (f"{side}.spm.model", f"{side}.bpe.model") if (d / f).is_file()),
                            f"{side}.spm.model") for side in ("source", "target")}
        self.src_vocab = Vocab(d / files["source"], lowercase=lowercase.get("source", False), moses=moses.get("source"))
        self.tgt_vocab = Vocab(d / files["target"], lowercase=lowercase.get("target", False), moses=moses.get("target"))
        for side, vocab in (("source", self.src_vocab), ("target", self.tgt_vocab)):
            if vocab.sha256 != self.meta[f"{side}_sha256"]:
                raise ExportError(f"{d / files[side]}: not the vocabulary model {d} was exported with "
                                  "(its SHA-256 differs from the one recorded); the translations would be wrong. "
                                  "Restore the file or export the checkpoint again.")
        _check_export_files(d, self.meta)  # every other file too (shared_vocabulary.json, model.bin, config.json)
        if data_dir is not None:

            src, tgt = dataset_vocabs(Path(data_dir), self.meta["vocab_files"])
            if (src.sha256, tgt.sha256) != (self.meta["source_sha256"], self.meta["target_sha256"]):
                raise ExportError(f"{data_dir}: its vocabularies are not the ones {d} was exported with; "
                                  "translate without --data (the export carries its own).")
        self.decode = DecodeConfig(**self.meta["decode"])
        self.max_positions = int(self.meta["max_positions"])
        self.too_long: list[int] = []
        try:
            self.translator = ctranslate2.Translator(str(d), device=kind, device_index=int(index or 0),
                                                     intra_threads=threads or 0)
        except RuntimeError as err:  # a truncated or corrupt model.bin
            raise ExportError(f"{d}: CTranslate2 cannot load this export ({err}); export the checkpoint again.") from None

    def translate(self, lines: list[str], dcfg: DecodeConfig | None = None) -> list[list[CT2Translation]]:
        dcfg = dcfg or self.decode
        lines = list(lines)
        keep = [i for i, line in enumerate(lines) if line.strip()]
        ids = encode_sources(self.src_vocab, [lines[i].strip() for i in keep])  # pieces + EOS, as structnmt reads
        self.too_long = [keep[j] + 1 for j, s in enumerate(ids) if len(s) > self.max_positions]
        todo = sorted((j for j in range(len(ids)) if len(ids[j]) <= self.max_positions), key=lambda j: len(ids[j]))
        kept = set(keep)
        out = [[CT2Translation("", float("-inf") if i in kept else 0.0, [])] for i in range(len(lines))]
        piece, to_id = self.src_vocab.sp.id_to_piece, self.tgt_vocab.sp.piece_to_id
        for start in range(0, len(todo), dcfg.batch_size):
            batch = todo[start : start + dcfg.batch_size]
            src = [[piece(t) for t in ids[j]] for j in batch]
            # structnmt: at most a * |source with EOS| + b target tokens (at least 1), EOS included and forced at
            # the last one; CTranslate2's max_decoding_length counts the tokens before EOS, and EOS may come first
            max_len = max(min(max(int(math.floor(dcfg.max_len_a * len(ids[j]) + dcfg.max_len_b)), 1),
                              self.max_positions - 1) for j in batch) - 1
            if max_len == 0:  # every sentence's limit is EOS at the first step: empty, scored by log p(EOS)
                scored = self.translator.score_batch(src, [[] for _ in src], max_input_length=0)
                for j, r in zip(batch, scored):
                    out[keep[j]] = [CT2Translation("", float(sum(r.log_probs)), [])]
                continue
            res = self.translator.translate_batch(
                src, beam_size=dcfg.beam, length_penalty=dcfg.lenpen, num_hypotheses=dcfg.nbest,
                max_decoding_length=max_len, min_decoding_length=0, suppress_sequences=[["<pad>"], ["<s>"]],
                return_scores=True, max_input_length=0)
            for j, r in zip(batch, res):
                out[keep[j]] = [CT2Translation(self.tgt_vocab.decode([to_id(p) for p in h]), s, h)
                                for h, s in zip(r.hypotheses, r.scores)]
        return out
