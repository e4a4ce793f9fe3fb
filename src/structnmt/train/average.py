"""``structnmt average``: average the parameters of the last N checkpoints (Vaswani et al. 2017)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CheckpointError
from ..fileio.files import atomic_save
from ..models.checkpoint import load_checkpoint


def last_checkpoints(save_dir: str | Path, n: int) -> list[Path]:
    """The ``n`` numbered checkpoints with the highest update counts, oldest first."""
    if not Path(save_dir).is_dir():
        raise CheckpointError(f"--inputs {save_dir}: not a directory; give a training save_dir.")
    found = sorted(Path(save_dir).glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not found:
        raise CheckpointError(f"{save_dir}: no checkpoint_<update>.pt files to average; train first.")
    return found[-n:]


def is_average(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint ``average`` wrote (its ``averaged_from`` record), read safely
    (:func:`structnmt.models.checkpoint.load_checkpoint`); a user's other zip file or checkpoint is not."""

    try:
        return "averaged_from" in load_checkpoint(path)
    except CheckpointError:
        return False


def average_checkpoints(paths: list[Path], output: str | Path) -> dict:
    """Write a checkpoint whose model parameters are the mean over ``paths``.

    The config, vocabulary and bookkeeping are taken from the newest checkpoint; the
    optimiser state is dropped (an averaged model is for decoding).
    """
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given.")
    if any(Path(output).resolve() == Path(p).resolve() for p in paths):
        raise CheckpointError(f"--output {output} is one of the checkpoints being averaged; write the average to "
                              "another file.")
    total: dict[str, torch.Tensor] = {}
    newest = None
    for p in paths:
        st = load_checkpoint(p)
        if newest is None:
            first = st
        else:
            _check_compatible(first, paths[0], st, p)
        for k, v in st["model"].items():
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double().clone()
            else:
                total[k] = v
        newest = st
    assert newest is not None
    model = {k: (v / len(paths)).to(newest["model"][k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    out = {k: v for k, v in newest.items() if k != "optimizer"}
    out["model"] = model
    out["averaged_from"] = [str(p) for p in paths]

    atomic_save(out, output)  # a full disk leaves neither a partial average nor a temporary file: one sentence
    return out


def _check_compatible(a: dict, path_a: Path, b: dict, path_b: Path) -> None:
    """Checkpoints averaged together must share the model config and the vocabulary."""
    if a["config"].get("model") != b["config"].get("model"):
        raise CheckpointError(f"{path_b}: its model config differs from {path_a}'s; average checkpoints of one run.")
    va, vb = a.get("vocab_models"), b.get("vocab_models")
    if va and vb and any(va[s]["sha256"] != vb[s]["sha256"] for s in ("src", "tgt")):
        raise CheckpointError(f"{path_b}: its vocabulary differs from {path_a}'s; average checkpoints of one run.")
