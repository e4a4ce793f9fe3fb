"""``structnmt compare --html``: one self-contained page to explore a comparison in a browser.

No server, no network, no CDN: the data (every bucket's numbers, every sentence's source, reference,
each seed's translation, sentence chrF and bucket, and the source's dependency parse where given) is
embedded as JSON in the page, and the page's own script draws the bucket charts (SVG), the table of
numbers (the same as ``compare.csv``), a sentence browser (filter by bucket, sort by Δ sentence chrF,
every seed's translation side by side) and the chosen sentence's dependency tree. The template is
``templates/compare.html``; tests/test_compare_html.py opens the page in headless Chromium.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from importlib import resources

import numpy as np

from .compare import BucketRow, CompareConfig, delta_unit, plain_label
from .compare_between import MARK_ALPHA


def _clean(value):
    """JSON-safe: NaN -> None (the page shows "—")."""
    return None if isinstance(value, float) and math.isnan(value) else value


def chart_data(rows: list[BucketRow], metric: str) -> dict:
    """What the charts need beyond the rows: each panel's unit (``Δ BLEU (lc,tok)``, ``Δ word F-measure``, ...)
    and every bucket's label in plain words (compare-mt's ``<1`` of the verbs is "no verb").

    The charts stay hand-drawn SVG (the page's own script, no charting library): what they draw is a point
    and an interval per bucket and system on a linear axis, which a few lines do; a library would have to be
    inlined whole (the page is self-contained, no network) and would still need the same care for what the
    page must do, which is to draw an interval beyond the axis with a visible mark and its numbers, not cut
    silently. The axis takes rounded ("nice") ticks (1, 2 or 5 times a power of ten) and covers every
    interval unless a small bucket's would squash the others (more than 3 times their span); then the small
    bucket's interval ends at the edge in an arrow labelled with its end, its numbers in the tooltip."""
    return {"units": {k: delta_unit(k, metric) for k in dict.fromkeys(r.kind for r in rows)},
            "plain": {k: {r.bucket: plain_label(k, r.bucket) for r in rows if r.kind == k}
                      for k in dict.fromkeys(r.kind for r in rows)},
            "mark_alpha": MARK_ALPHA}


def page_data(rows: list[BucketRow], inputs, buckets: dict[str, list[str]], chrf: dict[str, np.ndarray],
              cfg: CompareConfig) -> dict:
    """What the page shows, as one JSON-able dict (``inputs``: a :class:`.compare_report.CompareInputs`)."""
    names = [s.name for s in inputs.systems]
    parses = None
    if inputs.parses is not None:
        parses = [{"words": t.words, "heads": t.heads, "deprels": t.deprels} for t in inputs.parses]
    return {
        "metric": {"bleu_lc_tok": "BLEU (lc,tok)", "bleu": "BLEU", "chrf": "chrF"}.get(cfg.metric, cfg.metric),
        "min_bucket": cfg.min_bucket, "n": len(inputs.refs), "systems": names,
        "rows": [{k: _clean(v) for k, v in asdict(r).items()} for r in rows],
        "buckets": buckets, "sources": inputs.sources, "refs": inputs.refs,
        "hyps": {s.name: s.runs for s in inputs.systems},
        "chrf": {n: [round(float(x), 2) for x in chrf[n]] for n in names},
        "parses": parses,
    }


#: ``<``, ``>`` and ``&`` as JSON escapes (as Django's ``json_script`` and Jinja's ``tojson`` write them): the
#: embedded JSON then holds none of the characters the HTML parser reads inside a script element, so no text
#: (``</script>``, ``<!--<script>``, which would leave the page blank) ends it or changes how it is parsed
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data) -> str:
    """``data`` as JSON that can stand inside an HTML ``<script>`` element: ``<``, ``>`` and ``&`` written as
    ``\\u003c``, ``\\u003e``, ``\\u0026`` (the same string to ``JSON.parse``)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_SCRIPT_SAFE)


def html_page(data: dict) -> str:
    """The template with ``data`` embedded (:func:`script_json`: no text of the data is read as HTML)."""
    template = resources.files("structnmt.analysis").joinpath("templates/compare.html").read_text(encoding="utf-8")
    return template.replace("__DATA__", script_json(data))
