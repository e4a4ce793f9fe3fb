"""scripts/slim_pngs.py and scripts/html_screenshot.py: what they do, and one sentence on bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_slim_pngs_keeps_the_picture_and_refuses_what_is_no_picture(tmp_path, capsys):
    slim = _script("slim_pngs")
    # a matplotlib-like picture: few colours, anti-aliased edges, stored as RGBA
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    fig.subplots().plot(np.arange(50), np.sin(np.arange(50) / 5))
    png = tmp_path / "plot.png"
    fig.savefig(png, dpi=100)
    before_size = png.stat().st_size
    before = np.asarray(Image.open(png).convert("RGB"), dtype=float)
    assert slim.main([str(png)]) == 0
    after = np.asarray(Image.open(png).convert("RGB"), dtype=float)
    assert png.stat().st_size < before_size and Image.open(png).mode == "P"
    assert after.shape == before.shape and np.abs(after - before).mean() < 2.0  # the same picture to the eye
    assert slim.main([str(png)]) == 0 and Image.open(png).mode == "P"  # a palette already: left as it is
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(SystemExit, match="notes.png: not a readable picture"):
        slim.main([str(tmp_path / "notes.png")])
    with pytest.raises(SystemExit, match="missing.png: no such file"):
        slim.main([str(tmp_path / "missing.png")])


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from test_compare import corpus, systems

    from structnmt.analysis.compare import CompareConfig
    from structnmt.analysis.compare_report import CompareInputs, run

    out = tmp_path_factory.mktemp("shot")
    sources, refs = corpus()
    run(CompareInputs(sources, refs, systems(refs)), CompareConfig(metric="bleu", n_samples=30, length_cutoffs=[10],
                                                                   min_bucket=5), out, html=True)
    return out / "report.html"


def test_html_screenshot_writes_a_picture_and_names_a_bad_choice(page, tmp_path):
    shot = _script("html_screenshot")
    png = tmp_path / "s.png"
    assert shot.main([str(page), str(png), "--kind", "source length (words)", "--bucket", ">=10", "--line", "21",
                      "--size", "1000,900"]) == 0
    assert Image.open(png).size[0] == 1000 and np.asarray(Image.open(png).convert("L")).std() > 5
    for args, message in ((["--kind", "nope"], "--kind 'nope' is not in the page; it has 'all sentences'"),
                          (["--line", "3", "--kind", "source length (words)", "--bucket", ">=10"],
                           "no sentence is listed there as line 3"),
                          (["--scroll-to", "nowhere"], "--scroll-to 'nowhere': no such element")):
        with pytest.raises(SystemExit, match=message):
            shot.main([str(page), str(tmp_path / "x.png"), *args])
    with pytest.raises(SystemExit, match="no such page"):
        shot.main([str(tmp_path / "missing.html"), str(tmp_path / "x.png")])
    assert not (tmp_path / "x.png").exists()
