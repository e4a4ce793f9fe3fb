"""RNN translator (SA-NMT §2, eqs. 1-5): the paper's "NMT" baseline, ``model.family: rnn``.

* Encoder (eq. 1): source embeddings -> ``encoder_layers`` bidirectional LSTM layers;
  the annotations S = [s_1; ...; s_n] (B, n, d) concatenate the two directions (d/2 each).
* Decoder: ``decoder_layers`` stacked LSTMs (d) with input feeding: at step t the input
  is [embedding of y_{t-1}; u_{t-1}] and the state h_{t-1}; then
  alpha_t = softmax(h_t^T W_a S) (eq. 3, "general" bilinear attention, padding masked),
  c_t = S alpha_t (eq. 4), u_t = g(h_t, c_t) = tanh(W_g [h_t; c_t]) (eq. 2, a one-layer
  feed-forward), and y_t ~ softmax(f(u_t)) (eq. 5), f tied to the target embedding
  (``tie_output``). u_0 = 0.
* Initial decoder state: the encoder's final states, both directions concatenated, layer by
  layer (as OpenNMT-py, which the SA-NMT authors used), when the encoder and decoder have
  as many layers; zeros otherwise.
* ``model.rnn.init_range`` > 0 draws every parameter from U(-r, r) (the paper's 0.04).

The decoding protocol is the Transformer's (``encode`` / ``decode_step`` /
``EncoderOutput.reorder`` / ``IncrementalCache.reorder``): the cache entry ``"rnn.dec"``
holds ``h``, ``c`` (B, layers, d) and ``u`` (B, d), batch first so beam search reorders it
like any other. Teacher-forced training runs the same step function over the target.
Shapes: B batch, n source length, T target length, d = ``model.d_model``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, ModelConfig
from ..data.vocab import PAD
from ..nn.attention import IncrementalCache
from .transformer import EncoderOutput, ModelOutput

CACHE_KEY = "rnn.dec"


@dataclass
class RNNEncoderOutput(EncoderOutput):
    """EncoderOutput plus the decoder's initial state (h0, c0), each (B, layers, d)."""

    init: tuple[Tensor, Tensor] | None = None

    def reorder(self, index: Tensor) -> RNNEncoderOutput:
        base = super().reorder(index)
        init = None if self.init is None else tuple(t.index_select(0, index) for t in self.init)
        return RNNEncoderOutput(base.memory, base.mask, base.structures, init=init)


class RNNModel(nn.Module):
    """BiLSTM encoder, input-feeding LSTM decoder with bilinear attention (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        d = cfg.d_model
        if d % 2:
            raise ConfigError(f"model.d_model={d}: the RNN family needs an even size (two directions of d/2).")
        if cfg.share_all_embeddings and src_vocab_size != tgt_vocab_size:
            raise ConfigError(f"model.share_all_embeddings needs one joint vocabulary, but the source has "
                              f"{src_vocab_size} pieces and the target {tgt_vocab_size}.")
        self.cfg = cfg
        self.src_embed = nn.Embedding(src_vocab_size, d, padding_idx=PAD)
        self.tgt_embed = self.src_embed if cfg.share_all_embeddings else nn.Embedding(tgt_vocab_size, d,
                                                                                     padding_idx=PAD)
        self.encoder = nn.LSTM(d, d // 2, num_layers=cfg.encoder_layers, batch_first=True, bidirectional=True,
                               dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0)
        self.decoder = nn.LSTM(2 * d, d, num_layers=cfg.decoder_layers, batch_first=True,
                               dropout=cfg.dropout if cfg.decoder_layers > 1 else 0.0)
        self.w_a = nn.Linear(d, d, bias=False)  # eq. 3
        self.w_g = nn.Linear(2 * d, d, bias=False)  # eq. 2: g(h, c) = tanh(W_g [h; c])
        self.output_proj = nn.Linear(d, tgt_vocab_size, bias=False)  # eq. 5: f
        if cfg.rnn.init_range > 0:
            for p in self.parameters():
                nn.init.uniform_(p, -cfg.rnn.init_range, cfg.rnn.init_range)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            with torch.no_grad():
                emb.weight[PAD].zero_()
        if cfg.tie_output or cfg.share_all_embeddings:
            self.output_proj.weight = self.tgt_embed.weight

    def required_structures(self) -> dict:
        return {}

    def encode(self, src: Tensor, src_mask: Tensor, structures: dict[str, Tensor] | None = None,
               need_weights: bool = False) -> RNNEncoderOutput:
        """src (B, n), src_mask (B, n) -> annotations S (B, n, d) and the decoder's initial state."""
        x = F.dropout(self.src_embed(src), self.cfg.dropout, self.training)
        lengths = src_mask.sum(-1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        memory = F.dropout(memory, self.cfg.dropout, self.training)
        B, d = src.shape[0], self.cfg.d_model
        init = None
        if self.cfg.encoder_layers == self.cfg.decoder_layers:  # (layers * 2, B, d/2) -> (B, layers, d)
            def join(t: Tensor) -> Tensor:
                t = t.view(self.cfg.encoder_layers, 2, B, d // 2)
                return torch.cat([t[:, 0], t[:, 1]], dim=-1).transpose(0, 1).contiguous()
            init = (join(h), join(c))
        return RNNEncoderOutput(memory, src_mask, dict(structures or {}), init=init)

    def _state(self, enc: RNNEncoderOutput, cache: IncrementalCache | None, B: int, like: Tensor):
        entry = cache.get(CACHE_KEY) if cache is not None else None
        if entry is not None:
            return entry["h"], entry["c"], entry["u"]
        layers, d = self.cfg.decoder_layers, self.cfg.d_model
        if enc.init is not None:
            h, c = enc.init
        else:
            h = c = like.new_zeros(B, layers, d)
        return h, c, like.new_zeros(B, d)

    def step(self, y_prev: Tensor, h: Tensor, c: Tensor, u: Tensor, enc: RNNEncoderOutput):
        """One decoder step: y_prev (B,) -> u_t (B, d), new (h, c) (B, layers, d), alpha_t (B, n)."""
        emb = F.dropout(self.tgt_embed(y_prev), self.cfg.dropout, self.training)
        inp = torch.cat([emb, u], dim=-1)[:, None]  # input feeding
        out, (h2, c2) = self.decoder(inp, (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()))
        top = out[:, 0]  # h_t of the top layer (B, d)
        scores = torch.einsum("bd,bnd->bn", self.w_a(top), enc.memory)  # eq. 3: h_t^T W_a S
        alpha = torch.softmax(scores.float().masked_fill(~enc.mask, float("-inf")), -1).to(top.dtype)
        ctx = torch.einsum("bn,bnd->bd", alpha, enc.memory)  # eq. 4
        u_t = torch.tanh(self.w_g(torch.cat([top, ctx], dim=-1)))  # eq. 2
        u_t = F.dropout(u_t, self.cfg.dropout, self.training)
        return u_t, h2.transpose(0, 1), c2.transpose(0, 1), alpha

    def decode(self, tgt_in: Tensor, enc: RNNEncoderOutput, *, cache: IncrementalCache | None = None,
               offset: int = 0, need_weights: bool = False) -> ModelOutput:
        """tgt_in (B, T) -> logits (B, T, V); with a cache, ``tgt_in`` holds only new steps."""
        B, T = tgt_in.shape
        h, c, u = self._state(enc, cache, B, enc.memory)
        outs, alphas = [], []
        for t in range(T):
            u, h, c, alpha = self.step(tgt_in[:, t], h, c, u, enc)
            outs.append(u)
            alphas.append(alpha)
        if cache is not None:
            cache.set(CACHE_KEY, {"h": h, "c": c, "u": u})
        logits = self.output_proj(torch.stack(outs, dim=1))  # eq. 5
        attn = {"cross": [torch.stack(alphas, dim=1)[:, None]]} if need_weights else {}  # (B, 1, T, n)
        return ModelOutput(logits, {}, attn)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, structures: dict[str, Tensor] | None = None,
                need_weights: bool = False) -> ModelOutput:
        enc = self.encode(src, src_mask, structures, need_weights)
        return self.decode(tgt_in, enc, need_weights=need_weights)

    @torch.no_grad()
    def decode_step(self, prev_tokens: Tensor, enc: RNNEncoderOutput, cache: IncrementalCache) -> Tensor:
        """prev_tokens (N, t): all tokens so far; returns log-probs (N, V) of the next one."""
        out = self.decode(prev_tokens[:, -1:], enc, cache=cache, offset=prev_tokens.shape[1] - 1)
        return torch.log_softmax(out.logits[:, -1].float(), dim=-1)
