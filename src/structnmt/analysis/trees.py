"""Pictures of induced dependency structure (SA-NMT Figs. 4 and 5), written by
``structnmt induce --draw N``.

* :func:`draw_head_weights` — Fig. 4: the attention over head words, beta collapsed to
  words (eq. 24 applied to the marginals; each dependent's column averaged over its
  pieces, so it sums to 1), rows = heads with ROOT first, columns = dependents. Under
  eq. 24 a word's own block holds its root marginal and the arcs among its own pieces;
  the picture puts that diagonal entry in the ROOT row (labelled so).
* :func:`draw_tree` — Fig. 5: the induced tree as arcs above the words (head -> dependent,
  green where the gold tree has the same arc, red where not; the root marked by a vertical
  arrow) and, when a gold tree is given, the gold arcs below the words in grey.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def draw_head_weights(words: list[str], weights: np.ndarray, path: str | Path, title: str = "") -> Path:
    """weights (W, W) [head, dependent] word-level marginals (columns sum to 1, the diagonal
    the root / within-word mass) -> a heatmap with a ROOT row; returns the path."""
    W = len(words)
    mat = np.zeros((W + 1, W))
    mat[0] = np.diag(weights)
    mat[1:] = weights - np.diag(np.diag(weights))
    fig = _figure(max(4.0, 0.42 * W + 2.0), max(3.6, 0.38 * (W + 1) + 1.6))
    ax = fig.subplots()
    im = ax.imshow(mat, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(W))
    ax.set_xticklabels(words, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(W + 1))
    ax.set_yticklabels(["ROOT (or itself)"] + words, fontsize=8)
    ax.set_xlabel("dependent")
    ax.set_ylabel("head")
    ax.set_title(title or "attention over head words (beta)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)


def _arcs(ax, heads: list[int], sign: float, colours: list[str], lw: float = 1.3) -> float:
    from matplotlib.patches import Arc

    top = 0.0
    for d, h in enumerate(heads):
        if h <= 0:
            continue
        h0 = h - 1
        span = abs(h0 - d)
        height = 0.6 + 0.45 * span
        top = max(top, height / 2)
        theta = (0, 180) if sign > 0 else (180, 360)
        ax.add_patch(Arc(((h0 + d) / 2, 0.25 * sign), span, height, theta1=theta[0], theta2=theta[1],
                         color=colours[d], lw=lw))
        ax.annotate("", xy=(d, 0.25 * sign), xytext=(d, 0.25 * sign + 0.18 * sign),
                    arrowprops={"arrowstyle": "->", "color": colours[d], "lw": lw})
    return top


def draw_tree(words: list[str], heads: list[int], path: str | Path, gold: list[int] | None = None,
              title: str = "") -> Path:
    """heads: 1-based heads of ``words`` (0 = root); ``gold`` the same for the gold tree
    (drawn below, the induced arcs coloured by agreement with it); returns the path."""
    n = len(words)
    colours = ["C2" if gold is not None and gold[d] == heads[d] else ("C3" if gold is not None else "C0")
               for d in range(n)]
    fig = _figure(max(5.0, 0.75 * n + 1.0), 4.2 if gold is not None else 2.8)
    ax = fig.subplots()
    up = _arcs(ax, heads, 1.0, colours)
    down = _arcs(ax, gold, -1.0, ["0.55"] * n, lw=1.0) if gold is not None else 0.0
    for i, w in enumerate(words):
        ax.text(i, 0, w, ha="center", va="center", fontsize=9)
    for d, h in enumerate(heads):
        if h == 0:
            ax.annotate("ROOT", xy=(d, 0.3), xytext=(d, up + 0.9), ha="center", fontsize=7,
                        arrowprops={"arrowstyle": "->", "color": colours[d]})
    if gold is not None:
        for d, h in enumerate(gold):
            if h == 0:
                ax.annotate("ROOT", xy=(d, -0.3), xytext=(d, -down - 0.9), ha="center", fontsize=7, color="0.4",
                            arrowprops={"arrowstyle": "->", "color": "0.55"})
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-(down + 1.3) if gold is not None else -0.6, up + 1.3)
    ax.set_axis_off()
    note = " (above: induced, green = as gold, red = not; below: gold)" if gold is not None else ""
    ax.set_title((title or "induced tree") + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return Path(path)
