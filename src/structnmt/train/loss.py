"""Label-smoothed cross entropy (Szegedy et al. 2016), summed over non-padding tokens.

The gradient is written out (:class:`_LabelSmoothedCE`) instead of left to autograd:
autograd's backward of ``log_softmax`` + ``gather`` + ``mean`` writes three
(tokens x vocabulary) tensors (a zero-filled scatter target, the mean's expanded
gradient, their sum) before ``log_softmax``'s own backward; the closed form below writes
none: it turns the saved log-probabilities into the gradient in place. On the 2-core CPU the loss's forward and backward over 4,096 tokens x 10,000 types
take about half the time (benchmarks/README.md), the same numbers to float rounding
(tests/test_trainer.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.vocab import PAD


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, nll sum), PAD ignored.

    loss = (1 - eps) * nll + eps * mean_v(-log p_v): the smoothing mass is spread
    uniformly over the vocabulary. Both sums are differentiable with respect to the logits.
    """
    V = logits.shape[-1]
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # half/bfloat16 logits (autocast): the loss in float32
    return _LabelSmoothedCE.apply(logits.reshape(-1, V), target.reshape(-1), float(epsilon))


class _LabelSmoothedCE(torch.autograd.Function):
    """(N, V) logits, (N,) targets -> (loss sum, nll sum) with the closed-form gradient.

    With p = softmax(z) and keep_i = [target_i != PAD], for upstream gradients g (loss) and
    h (nll):  d/dz_iv = keep_i * ((g + h) * p_iv - g * eps / V - (g * (1 - eps) + h) * [v = target_i]).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        keep = (target != PAD).to(logits.dtype)
        lprobs = torch.log_softmax(logits, dim=-1)
        nll = -lprobs.gather(1, target[:, None]).squeeze(1)
        smooth = -lprobs.mean(dim=-1)
        loss = ((1.0 - eps) * nll + eps * smooth).mul(keep).sum()
        ctx.save_for_backward(lprobs, target, keep)
        ctx.eps = eps
        return loss, nll.mul(keep).sum()

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor):  # type: ignore[override]
        if getattr(ctx, "consumed", False):
            raise RuntimeError("label_smoothed_nll's backward reuses its saved log-probabilities in place "
                               "and runs once per forward (retain_graph is not supported).")
        ctx.consumed = True
        lprobs, target, keep = ctx.saved_tensors
        eps, V = ctx.eps, lprobs.shape[1]
        c_target = (g_loss * (1.0 - eps) + g_nll) * keep  # (N,)
        c_uniform = g_loss * eps * keep  # (N,)
        grad = lprobs.exp_().mul_((c_target + c_uniform)[:, None]).sub_((c_uniform / V)[:, None])
        grad.scatter_add_(1, target[:, None], -c_target[:, None])
        return grad, None, None
