"""Checkpoints: reading them safely, the vocabularies they carry, the model they hold.

Beneath training and decoding alike (both read checkpoints; what a training resumes from is
:mod:`structnmt.train.resume`).

A checkpoint written by ``structnmt train`` (or ``average``) is a dict with the model's
parameters, its full config (``config``), the run's bookkeeping (``run``) and:

* ``vocab_models``: per side (``src``, ``tgt``) the SentencePiece model's bytes
  (``proto``), its SHA-256 and its size. A checkpoint therefore translates without the
  prepared dataset, and a dataset (``translate --data``, or the ``data.path`` of a
  resumed run) whose pieces differ from the checkpoint's is refused instead of
  producing wrong output silently;
* ``data_syntax``: the parser config the training data was prepared with and the
  constituent labels of its trees, so that new input is parsed the same way;
* ``plugins``: the ``--user-dir`` paths the training imported (:mod:`structnmt.plugins`),
  named when the checkpoint is loaded without the mechanism they register.

Checkpoints written before these entries existed still load: their vocabulary is read
from ``data.path`` (or, when that relative path does not exist from the current
directory, next to the checkpoint), and a size mismatch is a one-sentence error.

**Loading runs no code.** Every checkpoint is read with ``torch.load(weights_only=True)``: PyTorch's
restricted unpickler, which rebuilds tensors, numbers, strings, bytes, lists, tuples and dicts and
refuses any other global, so a crafted file (a pickle whose payload runs a command on load) is
refused with one sentence before anything of it runs. A checkpoint holds nothing else: the numpy
RNG state is stored as a tensor (:func:`structnmt.train.trainer.rng_state`). Checkpoints written before
that stored numpy's state as an ``ndarray``; :data:`LEGACY_GLOBALS` lets exactly numpy's array
reconstruction through (an array of plain numbers, no object), so they load without trusting
anything more. The choice against safetensors: a checkpoint also carries the optimizer state, the
config and the vocabulary models, which the restricted unpickler reads safely in one file.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import torch

from ..config import from_dict
from ..data.vocab import Vocab, entry_options, vocab_pair
from ..errors import CheckpointError
from ..nn.attention import UnknownMechanismError
from . import build_model


def _legacy_globals() -> list:
    """numpy's array reconstruction, the one global of checkpoints written before the numpy RNG state was a
    tensor (numpy 1 and 2 name its module differently)."""
    out: list = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    reconstruct = None
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            reconstruct = __import__(module, fromlist=["_reconstruct"])._reconstruct
            break
        except (ImportError, AttributeError):
            continue
    if reconstruct is not None:  # under both names: a checkpoint pickled under numpy 1 names numpy.core
        out += [(reconstruct, "numpy.core.multiarray._reconstruct"), (reconstruct, "numpy._core.multiarray._reconstruct")]
    return out


#: what the restricted unpickler lets through besides tensors and plain data (see the module docstring)
LEGACY_GLOBALS = _legacy_globals()


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint at ``path``; :class:`CheckpointError` naming the file when it is
    missing, a directory, empty, corrupt or not a structnmt checkpoint."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: checkpoint not found; check the path (training writes "
                              "<save_dir>/checkpoint_last.pt).")
    if p.is_dir():
        raise CheckpointError(f"{p}: is a directory, not a checkpoint; give a file in it such as "
                              f"{p / 'checkpoint_last.pt'}.")
    if p.stat().st_size == 0:
        raise CheckpointError(f"{p}: is empty (an interrupted save or copy); use another checkpoint.")
    try:
        with torch.serialization.safe_globals(LEGACY_GLOBALS):
            state = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL [\w.]+\.\w+", str(err))  # a global the file asks for: code, not damage
        if named is None or ("weights only" not in str(err).lower() and "weights_only" not in str(err).lower()):
            raise CheckpointError(f"{p}: not a readable checkpoint (UnpicklingError); it is truncated, corrupt or "
                                  "not a torch file: use another checkpoint.") from None
        found = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "global" in line), "")
        raise CheckpointError(f"{p}: refused: loading it would run code that is not part of a checkpoint "
                              f"({found[:160]}); structnmt checkpoints hold only tensors, numbers and text, so "
                              "this file was not written by structnmt or was altered. Nothing of it was run.") from None
    except Exception as err:  # noqa: BLE001 - torch.load raises many kinds on a file that is no checkpoint
        reason = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise CheckpointError(f"{p}: not a readable checkpoint ({type(err).__name__}{': ' + reason if reason else ''}); "
                              "it is truncated, corrupt or not a torch file: use another checkpoint.") from None
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or "model" not in state:
        raise CheckpointError(f"{p}: a torch file but not a structnmt checkpoint (it holds no model config); "
                              "give a checkpoint written by `structnmt train` or `structnmt average`.")
    return state


def vocab_entry(src: Vocab, tgt: Vocab) -> dict:
    """The ``vocab_models`` entry of a checkpoint (see the module docstring)."""
    return {side: {"sha256": v.sha256, "size": len(v), "proto": v.proto, "lowercase": v.lowercase, "moses": v.moses}
            for side, v in (("src", src), ("tgt", tgt))}


def check_same_vocab(state: dict, src: Vocab, tgt: Vocab, *, checkpoint: str | Path, data: str | Path) -> None:
    """Refuse vocabularies whose pieces differ from the checkpoint's (a different size
    included). Checkpoints without ``vocab_models`` are checked by size only."""
    saved = state.get("vocab_models")
    for side, v in (("src", src), ("tgt", tgt)):
        if saved:
            same = saved[side]["sha256"] == v.sha256
            have = f"{saved[side]['size']} pieces, sha256 {saved[side]['sha256'][:12]}"
        else:
            size = _embedding_rows(state["model"], side)
            same = size is None or size == len(v)
            have = f"{size} pieces"
        if not same:
            raise CheckpointError(
                f"{checkpoint}: its {'source' if side == 'src' else 'target'} vocabulary ({have}) is not the one "
                f"of {data} ({len(v)} pieces, sha256 {v.sha256[:12]}); use the dataset the checkpoint was trained "
                "on, or a new train.save_dir for this dataset.")


def _embedding_rows(model_state: dict, side: str) -> int | None:
    """Vocabulary size of an older checkpoint, read from its embedding matrix."""
    keys = ("src_embed.weight", "encoder.embed.weight") if side == "src" else ("tgt_embed.weight", "decoder.embed.weight")
    for key in keys:
        if key in model_state:
            return int(model_state[key].shape[0])
    return None


def checkpoint_vocabs(state: dict, checkpoint: str | Path, data_dir: str | Path | None = None) -> tuple[Vocab, Vocab]:
    """(source, target) vocabularies of a checkpoint.

    With ``data_dir`` the dataset's vocabularies are used, after checking that they are
    the checkpoint's. Without it, the vocabularies the checkpoint carries; for older
    checkpoints, the files named in it under ``data.path``, or next to the checkpoint.
    """
    if data_dir is not None:
        src, tgt = dataset_vocabs(Path(data_dir), state["vocab"])
        check_same_vocab(state, src, tgt, checkpoint=checkpoint, data=data_dir)
        return src, tgt
    saved = state.get("vocab_models")
    if saved:
        src = Vocab(proto=saved["src"]["proto"], **entry_options(saved["src"]))
        same = saved["src"]["sha256"] == saved["tgt"]["sha256"]
        return src, (src if same else Vocab(proto=saved["tgt"]["proto"], **entry_options(saved["tgt"])))
    data_path = Path(state["config"].get("data", {}).get("path", "") or ".")
    ckpt_dir = Path(checkpoint).resolve().parent
    for root in (data_path, ckpt_dir / data_path, ckpt_dir):
        if (root / state["vocab"]["src"]).is_file():
            return dataset_vocabs(root, state["vocab"])
    raise CheckpointError(
        f"{checkpoint}: its vocabulary {state['vocab']['src']} is neither in data.path={data_path} (from the current "
        "directory) nor next to the checkpoint; pass --data DIR, the prepared dataset it was trained on.")


def dataset_vocabs(root: Path, files: dict) -> tuple[Vocab, Vocab]:
    """The vocabularies named ``files`` (``{"src": ..., "tgt": ...}``) in directory ``root``."""
    for side in ("src", "tgt"):
        if not (root / files[side]).is_file():
            raise CheckpointError(f"{root}: has no {files[side]}; give the prepared dataset directory "
                                  "(the --destdir of `structnmt prepare`).")
    entries: dict = {}  # `prepare --lowercase` / `--moses` datasets say so in their manifest
    if (root / "manifest.json").is_file():
        entries = json.loads((root / "manifest.json").read_text()).get("vocab", {})
    return vocab_pair(root, files, entries)


def load_model_state(model: torch.nn.Module, state: dict, checkpoint: str | Path) -> None:
    """``model.load_state_dict`` with a one-sentence error when the shapes do not fit.

    Checkpoints written before the encoder became one ``EncoderStack`` (keys
    ``encoder_layers.*``, ``encoder_norm.*``) load under the new names.
    """
    weights = state["model"]
    if any(k.startswith(("encoder_layers.", "encoder_norm.")) for k in weights):
        weights = {("encoder.layers." + k[len("encoder_layers."):] if k.startswith("encoder_layers.")
                    else "encoder.norm." + k[len("encoder_norm."):] if k.startswith("encoder_norm.") else k): v
                   for k, v in weights.items()}
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        detail = next((line.strip() for line in first if "size mismatch" in line or "Missing" in line
                       or "Unexpected" in line), first[0] if first else "")
        raise CheckpointError(f"{checkpoint}: its parameters do not fit the model built from its config "
                              f"({detail[:160]}); the vocabulary or the model settings differ.") from None


def model_from_checkpoint(state: dict, checkpoint: str | Path, data_dir: str | Path | None = None):
    """(config, source vocabulary, target vocabulary, model in eval mode on the CPU) of a loaded checkpoint
    ``state`` (:func:`load_checkpoint`); ``data_dir``: a dataset whose vocabularies must be the checkpoint's."""

    cfg = from_dict(state["config"], where=f"{checkpoint} (saved config)", saved=True)
    src_vocab, tgt_vocab = checkpoint_vocabs(state, checkpoint, data_dir)
    try:
        model = build_model(cfg.model, len(src_vocab), len(tgt_vocab))
    except UnknownMechanismError as err:
        plugins = state.get("plugins") or []
        if not plugins:
            raise
        raise UnknownMechanismError(f"{checkpoint}: {err}; it was trained with --user-dir "
                                    f"{' --user-dir '.join(plugins)}: give the same.") from None
    load_model_state(model, state, checkpoint)
    return cfg, src_vocab, tgt_vocab, model.eval()
