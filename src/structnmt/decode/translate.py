"""Translate raw text with a trained checkpoint: encode, batch by length, search, detokenise."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import Config, DecodeConfig, from_dict
from ..data.dataset import encode_sources, pad_sources
from ..data.vocab import Vocab
from ..models import build_model
from .beam import beam_search, greedy_search


@dataclass
class Translation:
    text: str
    score: float
    tokens: list[int]


def decode_batch(model, src: torch.Tensor, src_mask: torch.Tensor, dcfg: DecodeConfig, max_positions: int,
                 structures: dict | None = None):
    """Beam search (or greedy when ``beam == 1`` and ``nbest == 1``) on one padded batch."""
    kw = dict(max_len_a=dcfg.max_len_a, max_len_b=dcfg.max_len_b, max_positions=max_positions,
              structures=structures, lenpen=dcfg.lenpen)
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
) -> list[list]:
    """Piece-id sources (with EOS) -> per sentence the n-best :class:`Hypothesis` list, in input order."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list] = [[] for _ in sources]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(sources), desc="translate", unit=" sent", mininterval=1.0)
    for start in range(0, len(order), dcfg.batch_size):
        idx = order[start : start + dcfg.batch_size]
        src, mask = pad_sources([sources[i] for i in idx])
        hyps = decode_batch(model, src.to(device), mask.to(device), dcfg, max_positions)
        for i, h in zip(idx, hyps):
            results[i] = h
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    return results


class Translator:
    """A checkpoint with its vocabularies, ready to translate raw lines."""

    def __init__(self, checkpoint: str | Path, *, data_dir: str | Path | None = None, device: str = "auto"):
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        self.cfg: Config = from_dict(state["config"], where=f"{checkpoint} (saved config)")
        root = Path(data_dir or self.cfg.data.path)
        vocab = state["vocab"]
        self.src_vocab = Vocab(root / vocab["src"])
        self.tgt_vocab = self.src_vocab if vocab["src"] == vocab["tgt"] else Vocab(root / vocab["tgt"])
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model = build_model(self.cfg.model, len(self.src_vocab), len(self.tgt_vocab))
        self.model.load_state_dict(state["model"])
        self.model.to(self.device).eval()

    def translate(self, lines: Iterable[str], dcfg: DecodeConfig | None = None, progress: bool = False) -> list[list[Translation]]:
        dcfg = dcfg or self.cfg.decode
        lines = list(lines)
        empty = {i for i, line in enumerate(lines) if not line.strip()}
        sources = encode_sources(self.src_vocab, lines)
        hyps = translate_ids(self.model, sources, dcfg, device=self.device,
                             max_positions=self.cfg.model.max_positions, progress=progress)
        out = []
        for i, hs in enumerate(hyps):
            if i in empty:  # an empty input line gives an empty output line, kept in place
                out.append([Translation("", 0.0, [])])
                continue
            out.append([Translation(self.tgt_vocab.decode(h.tokens), h.score, h.tokens) for h in hs])
        return out
