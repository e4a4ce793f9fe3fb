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

Syntactic attention (``model.rnn.syntax``; §3, Table 2's rows):

* head word selection (eqs. 6-8): S_q, S_k, S_v = W_q S, W_k S, W_v S; arc scores
  phi = S_q^T S_k, ``phi[b, i, j]`` = q_i . k_j the score of word i heading word j; the root
  score of j is phi_jj = q_j . k_j (``root: self``, the paper) or r . k_j with a learned
  root query (``root: learned``); ``scale`` divides by sqrt(d); ``score_cap`` c > 0 bounds
  every score softly, phi <- c tanh(phi / c) (beyond the paper: its unbounded scores grow to
  hundreds of nats at a high learning rate and the marginals collapse to one tree, see
  docs/sa_nmt.md; ``arc_lr_scale`` is the other remedy, a smaller learning rate for W_q,
  W_k and the root query only, through :meth:`RNNModel.optimizer_groups`). beta = sattn(phi) is
  ``sa``: the matrix-tree marginals (:func:`structnmt.nn.matrix_tree.marginals`, eqs.
  10-15: each column sums to 1 over heads and root), or ``fa`` (flat attention, §4.2):
  a softmax over the heads of each column (self included). ``hard`` (eq. 21): each
  column's argmax (root entry included) as a one-hot, straight-through (forward the
  one-hot, backward beta's gradient). M = S_v beta (eq. 8): in batch-first code
  ``M[b, j] = sum_i beta[b, i, j] v[b, i]``, the expected value of j's head.
* ``annotations: shared`` (eqs. 16-18): d_t = M alpha_t with the content attention's
  weights, gated d^_t = d_t * sigmoid(W_gate h_t), u_t = tanh(W_u [h_t; c_t; d^_t]);
  ``separate`` (eqs. 19-20): d_t = M gamma_t with gamma_t = softmax(h_t^T W_m M), then
  the same gate and u_t; ``one_set`` (eq. 22, "SA-NMT-1set"): one set of annotations
  s-bar_i = s_i + sigmoid(W_s s_i) * M_i and the baseline decoder.

``encode(..., need_weights=True)`` returns beta and phi under ``attentions["arcs"]`` and
``attentions["arc_scores"]`` (B, n, n) for tree induction.

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
from ..nn import dropout as drop
from ..nn.attention import IncrementalCache, collect_structures
from ..nn.matrix_tree import marginals
from .transformer import EncoderOutput, ModelOutput, padded_batch_rows

CACHE_KEY = "rnn.dec"


@dataclass
class RNNEncoderOutput(EncoderOutput):
    """EncoderOutput plus the decoder's initial state (h0, c0), each (B, layers, d), and the
    syntactic annotations M (B, n, d) of the two-set variants."""

    init: tuple[Tensor, Tensor] | None = None
    syntax: Tensor | None = None

    def reorder(self, index: Tensor) -> RNNEncoderOutput:
        base = super().reorder(index)
        init = None if self.init is None else tuple(t.index_select(0, index) for t in self.init)
        syntax = None if self.syntax is None else self.syntax.index_select(0, index)
        return RNNEncoderOutput(base.memory, base.mask, base.structures, init=init, syntax=syntax)

    def padded(self, rows: int, length: int) -> RNNEncoderOutput | None:
        """:meth:`EncoderOutput.padded`, the initial state and M (B, n, d) padded alike."""
        base = super().padded(rows, length)
        if base is None:
            return None
        index = padded_batch_rows(self.memory.shape[0], rows, self.memory.device)
        init = None if self.init is None else tuple(t.index_select(0, index) for t in self.init)
        syntax = None if self.syntax is None else F.pad(self.syntax.index_select(0, index),
                                                        (0, 0, 0, length - self.syntax.shape[1]))
        return RNNEncoderOutput(base.memory, base.mask, base.structures, init=init, syntax=syntax)


@dataclass
class _StepInputs:
    """What every decoder step reads, prepared once per :meth:`RNNModel.decode` call: the annotations S
    (B, n, d), the padding positions (B, n) bool, M (B, n, d) or None, and ``joint``: S and M side by side
    (B, n, 2d), for shared attention over several steps (teacher forcing), read with one product a step; None
    otherwise (a decoding step reads S and M apart rather than copy both for one step)."""

    memory: Tensor
    pad: Tensor
    syntax: Tensor | None
    joint: Tensor | None


SYNTAX = ("none", "sa", "fa")
ANNOTATIONS = ("shared", "separate", "one_set")
ROOTS = ("self", "learned")


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
        r = cfg.rnn
        for name, allowed in (("syntax", SYNTAX), ("annotations", ANNOTATIONS), ("root", ROOTS)):
            if getattr(r, name) not in allowed:
                raise ConfigError(f"model.rnn.{name}: unknown value '{getattr(r, name)}'; use one of {', '.join(allowed)}.")
        if r.score_cap < 0 or r.arc_lr_scale <= 0:
            raise ConfigError(f"model.rnn: score_cap={r.score_cap} must be >= 0 (0 = no cap) and "
                              f"arc_lr_scale={r.arc_lr_scale} > 0.")
        self.cfg = cfg
        self.two_sets = r.syntax != "none" and r.annotations != "one_set"
        self.src_embed = nn.Embedding(src_vocab_size, d, padding_idx=PAD)
        self.tgt_embed = self.src_embed if cfg.share_all_embeddings else nn.Embedding(tgt_vocab_size, d,
                                                                                     padding_idx=PAD)
        self.encoder = nn.LSTM(d, d // 2, num_layers=cfg.encoder_layers, batch_first=True, bidirectional=True,
                               dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0)
        self.decoder = nn.LSTM(2 * d, d, num_layers=cfg.decoder_layers, batch_first=True,
                               dropout=cfg.dropout if cfg.decoder_layers > 1 else 0.0)
        self.w_a = nn.Linear(d, d, bias=False)  # eq. 3
        self.w_g = nn.Linear((3 if self.two_sets else 2) * d, d, bias=False)  # eq. 2 / 18: g(h, c[, d^])
        if r.syntax != "none":
            self.w_q, self.w_k, self.w_v = (nn.Linear(d, d, bias=False) for _ in range(3))  # eq. 6
            self.root_query = nn.Parameter(torch.randn(d) * d**-0.5) if r.root == "learned" else None
            if r.annotations == "one_set":
                self.w_s = nn.Linear(d, d, bias=False)  # eq. 22
            else:
                self.w_gate = nn.Linear(d, d, bias=False)  # eq. 17
                self.w_m = nn.Linear(d, d, bias=False) if r.annotations == "separate" else None  # eq. 19
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
        """None: the RNN's structured attention induces its trees from the words."""
        return collect_structures(self)

    def optimizer_groups(self) -> list[dict]:
        """Parameter groups for the optimizer, each with an ``lr_scale`` (times the schedule's
        lr): one group, or two with ``rnn.arc_lr_scale`` != 1 (the arc scorer W_Q, W_K and the
        root query in the second)."""
        scale = self.cfg.rnn.arc_lr_scale
        if self.cfg.rnn.syntax == "none" or scale == 1.0:
            return [{"params": list(self.parameters()), "lr_scale": 1.0}]
        arc = [*self.w_q.parameters(), *self.w_k.parameters(), *([self.root_query] if self.root_query is not None
                                                                  else [])]
        ids = {id(p) for p in arc}
        return [{"params": [p for p in self.parameters() if id(p) not in ids], "lr_scale": 1.0},
                {"params": arc, "lr_scale": scale}]

    def encode(self, src: Tensor, src_mask: Tensor, structures: dict[str, Tensor] | None = None,
               need_weights: bool = False) -> RNNEncoderOutput:
        """src (B, n), src_mask (B, n) -> annotations S (B, n, d) and the decoder's initial state."""
        x = drop.dropout(self.src_embed(src), self.cfg.dropout, self.training)
        lengths = src_mask.sum(-1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        memory = drop.dropout(memory, self.cfg.dropout, self.training)
        B, d = src.shape[0], self.cfg.d_model
        syntax, arcs = None, {}
        if self.cfg.rnn.syntax != "none":
            m, beta, phi = self.head_selection(memory, src_mask)
            if need_weights:
                arcs = {"arcs": [beta], "arc_scores": [phi]}
            if self.cfg.rnn.annotations == "one_set":
                memory = memory + torch.sigmoid(self.w_s(memory)) * m  # eq. 22
            else:
                syntax = m
        init = None
        if self.cfg.encoder_layers == self.cfg.decoder_layers:  # (layers * 2, B, d/2) -> (B, layers, d)
            def join(t: Tensor) -> Tensor:
                t = t.view(self.cfg.encoder_layers, 2, B, d // 2)
                return torch.cat([t[:, 0], t[:, 1]], dim=-1).transpose(0, 1).contiguous()
            init = (join(h), join(c))
        return RNNEncoderOutput(memory, src_mask, dict(structures or {}), attentions=arcs, init=init, syntax=syntax)

    def head_selection(self, S: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Eqs. 6-8 (and 21): annotations S (B, n, d) -> M (B, n, d), beta and phi (B, n, n)
        in the [head, dependent] layout (root on the diagonal)."""
        r = self.cfg.rnn
        q, k, v = self.w_q(S), self.w_k(S), self.w_v(S)  # eq. 6
        phi = torch.matmul(q, k.transpose(1, 2))  # eq. 7: phi[b, i, j] = q_i . k_j (i heads j)
        if self.root_query is not None:
            phi = phi.diagonal_scatter(k @ self.root_query, dim1=1, dim2=2)  # learned root scores
        if r.scale:
            phi = phi / S.shape[-1] ** 0.5
        if r.score_cap > 0:  # a soft bound: no arc can win by more than 2 cap nats
            phi = r.score_cap * torch.tanh(phi / r.score_cap)
        lengths = mask.sum(-1)
        if r.syntax == "sa":
            beta = marginals(phi, lengths)  # eqs. 10-15
        else:  # flat attention: each dependent's distribution over heads (itself included)
            allowed = mask[:, :, None] & mask[:, None, :]
            beta = torch.softmax(phi.float().masked_fill(~allowed, float("-inf")), dim=1)
            beta = beta.nan_to_num(0.0).masked_fill(~allowed, 0.0).to(phi.dtype)
        if r.hard:  # eq. 21, straight-through: forward the one-hot, backward beta's gradient
            one_hot = torch.zeros_like(beta).scatter_(1, beta.argmax(dim=1, keepdim=True), 1.0)
            one_hot = one_hot * (mask[:, None, :]).to(beta.dtype)
            beta = (beta - beta.detach()) + one_hot  # the bracket is exactly 0: forward values exactly one-hot
        m = torch.matmul(beta.transpose(1, 2), v)  # eq. 8: M[b, j] = sum_i beta[b, i, j] v[b, i]
        return m, beta, phi

    def _state(self, enc: RNNEncoderOutput, cache: IncrementalCache | None, B: int, like: Tensor):
        """The decoder's state before the first new step: h, c (layers, B, d), the LSTM's own layout, and u (B, d)."""
        entry = cache.get(CACHE_KEY) if cache is not None else None
        if entry is not None:
            h, c, u = entry["h"], entry["c"], entry["u"]
        else:
            layers, d = self.cfg.decoder_layers, self.cfg.d_model
            h, c = enc.init if enc.init is not None else (like.new_zeros(B, layers, d),) * 2
            u = like.new_zeros(B, d)
        return h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous(), u

    def step(self, emb: Tensor, h: Tensor, c: Tensor, u: Tensor, enc: _StepInputs):
        """One decoder step: the embedding of y_{t-1} (B, d) (before dropout), h, c (layers, B, d) -> u_t (B, d),
        the new h, c (layers, B, d), alpha_t (B, n) and the syntactic gate sigma(W_gate h_t) (B, d) of eq. 17
        (None without a syntactic annotation)."""
        emb = drop.dropout(emb, self.cfg.dropout, self.training)
        inp = torch.cat([emb, u], dim=-1).unsqueeze(1)  # input feeding
        out, (h2, c2) = self.decoder(inp, (h, c))
        top = out.squeeze(1)  # h_t of the top layer (B, d)
        scores = torch.bmm(enc.memory, self.w_a(top).unsqueeze(2)).squeeze(2)  # eq. 3: h_t^T W_a S (B, n)
        alpha = torch.softmax(scores.float().masked_fill(enc.pad, float("-inf")), -1).to(top.dtype)
        # eq. 4 (c_t = S alpha_t); with ``joint``, eq. 16's d_t = M alpha_t beside it, in one product
        ctx = torch.bmm(alpha.unsqueeze(1), enc.memory if enc.joint is None else enc.joint).squeeze(1)
        gate = None
        if enc.syntax is None:
            u_t = torch.tanh(self.w_g(torch.cat([top, ctx], dim=-1)))  # eq. 2
        else:
            if self.w_m is None:  # shared attention, eq. 16
                if enc.joint is None:
                    d_t = torch.bmm(alpha.unsqueeze(1), enc.syntax).squeeze(1)
                else:
                    ctx, d_t = ctx.chunk(2, dim=-1)
            else:  # separate attention, eqs. 19-20
                g = torch.bmm(enc.syntax, self.w_m(top).unsqueeze(2)).squeeze(2)
                gamma = torch.softmax(g.float().masked_fill(enc.pad, float("-inf")), -1).to(top.dtype)
                d_t = torch.bmm(gamma.unsqueeze(1), enc.syntax).squeeze(1)
            gate = torch.sigmoid(self.w_gate(top))
            d_hat = d_t * gate  # eq. 17
            u_t = torch.tanh(self.w_g(torch.cat([top, ctx, d_hat], dim=-1)))  # eq. 18
        u_t = drop.dropout(u_t, self.cfg.dropout, self.training)
        return u_t, h2, c2, alpha, gate

    def decode(self, tgt_in: Tensor, enc: RNNEncoderOutput, *, cache: IncrementalCache | None = None,
               offset: int = 0, need_weights: bool = False) -> ModelOutput:
        """tgt_in (B, T) -> logits (B, T, V); with a cache, ``tgt_in`` holds only new steps.

        ``need_weights``: ``attentions["cross"]`` = [alpha (B, 1, T, n)] and, for SA/FA models,
        ``attentions["syntax_gate"]`` (B, T) = z_t = ||sigma(W_gate h_t)||_2 (eq. 23), the norm of
        the gate that lets the syntactic context into the prediction of target position t. The
        paper writes h_{t-1} for the state that predicts y_t; here that state is called h_t
        (computed from y_{t-1}), the one eq. 17's gate reads, so z_t is the gate of the
        prediction of y_t in both readings.

        The loop over the target runs :meth:`step` once per position (input feeding makes every step need
        the one before); what does not depend on the step is done once before it: the embeddings of the
        whole target, the padding mask, and (shared attention, several steps) the annotations S and M side by
        side, read with one product a step."""
        h, c, u = self._state(enc, cache, tgt_in.shape[0], enc.memory)
        joint = enc.syntax is not None and self.w_m is None and tgt_in.shape[1] > 1
        inputs = _StepInputs(memory=enc.memory, pad=~enc.mask, syntax=enc.syntax,
                             joint=torch.cat([enc.memory, enc.syntax], dim=-1) if joint else None)
        outs, alphas, gates = [], [], []
        for emb in self.tgt_embed(tgt_in).unbind(1):  # (B, d) each: one lookup, one unbind (one stack backward)
            u, h, c, alpha, gate = self.step(emb, h, c, u, inputs)
            outs.append(u)
            alphas.append(alpha)
            if need_weights and gate is not None:
                gates.append(gate.float().norm(dim=-1))
        if cache is not None:
            cache.set(CACHE_KEY, {"h": h.transpose(0, 1), "c": c.transpose(0, 1), "u": u})
        logits = self.output_proj(torch.stack(outs, dim=1))  # eq. 5
        attn = {"cross": [torch.stack(alphas, dim=1)[:, None]]} if need_weights else {}  # (B, 1, T, n)
        if gates:
            attn["syntax_gate"] = torch.stack(gates, dim=1)  # (B, T), eq. 23
        return ModelOutput(logits, {}, attn)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, structures: dict[str, Tensor] | None = None,
                need_weights: bool = False) -> ModelOutput:
        enc = self.encode(src, src_mask, structures, need_weights)
        return self.decode(tgt_in, enc, need_weights=need_weights)

    def static_decoding_refusal(self) -> str | None:
        """None: the decoder's state (h, c, u) has a fixed size, so every step has the same shapes."""
        return None

    @torch.no_grad()
    def decode_static(self, last_tokens: Tensor, enc: RNNEncoderOutput, cache: IncrementalCache) -> Tensor:
        """One decoding step in fixed shapes (:mod:`structnmt.decode.cuda_graphs`): last_tokens (N, 1) ->
        logits (N, V); the state is read from and written back into the cache's tensors in place."""
        return self.decode(last_tokens, enc, cache=cache).logits[:, -1]

    @torch.no_grad()
    def decode_step(self, prev_tokens: Tensor, enc: RNNEncoderOutput, cache: IncrementalCache,
                    log_probs: bool = True) -> Tensor:
        """prev_tokens (N, t): all tokens so far; returns log-probs (N, V) of the next one
        (``log_probs=False``: the logits)."""
        out = self.decode(prev_tokens[:, -1:], enc, cache=cache, offset=prev_tokens.shape[1] - 1)
        logits = out.logits[:, -1].float()
        return torch.log_softmax(logits, dim=-1) if log_probs else logits
