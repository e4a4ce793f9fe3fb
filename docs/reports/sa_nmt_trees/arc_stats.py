"""Column statistics of SA-NMT's head selection (eqs. 7-15) quoted in docs/results.md:
the first N sentences of a CoNLL-U file through each checkpoint's encoder; per sentence the
mean over dependents of beta's column maximum, the column entropy divided by log(n), and
the range of the arc scores phi (pieces, EOS included); printed as means / medians.

    PYTHONPATH=src python docs/reports/sa_nmt_trees/arc_stats.py CONLLU N CKPT [CKPT ...]
"""

import sys

import numpy as np
import torch

from structnmt.data.dataset import encode_sources
from structnmt.decode.translate import Translator
from structnmt.tasks.induce import read_words

conllu, n_sent, checkpoints = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sents = read_words(conllu)[:n_sent]
for ck in checkpoints:
    tr = Translator(ck)
    model = tr.model.eval()
    ids = encode_sources(tr.src_vocab, [" ".join(s.words) for s in sents])
    colmax, ent, lo, hi = [], [], [], []
    with torch.no_grad():
        for x in ids:
            src = torch.tensor([x])
            enc = model.encode(src, src != 0, need_weights=True)
            beta, phi = enc.attentions["arcs"][0][0], enc.attentions["arc_scores"][0][0]
            p = beta.clamp_min(1e-12)
            colmax.append(beta.max(0).values.mean().item())
            ent.append((-(p * p.log()).sum(0)).mean().item() / np.log(beta.shape[0]))
            lo.append(phi.min().item())
            hi.append(phi.max().item())
    print(f"{ck}: mean column max of beta {np.mean(colmax):.3f}, normalised column entropy {np.mean(ent):.3f}, "
          f"scores median range {np.median(lo):.1f}..{np.median(hi):.1f} (extremes {min(lo):.1f}..{max(hi):.1f}), "
          f"{len(ids)} sentences")
