"""`structnmt compare --html` in a real browser: Debian's headless Chromium driven by Selenium (.ci/run installs
chromium and chromium-driver with apt; the README's install line does too)."""

from __future__ import annotations

import csv
import math
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import Select
from test_compare import corpus, systems

from structnmt.analysis.compare import CompareConfig, System
from structnmt.analysis.compare_report import CompareInputs, run
from structnmt.syntax.trees import DependencyTree


def chain(sentence: str) -> DependencyTree:
    """A parse where every word hangs on the next one and the last is the root."""
    words = sentence.split()
    n = len(words)
    return DependencyTree(words=words, heads=[i + 2 for i in range(n - 1)] + [0], deprels=["dep"] * (n - 1) + ["root"],
                          upos=["NOUN"] * n)


@pytest.fixture(scope="module")
def browser():
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, ("Debian's chromium and chromium-driver are needed for this test: "
                               "apt-get install chromium chromium-driver (the README's install line)")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1800"):
        options.add_argument(arg)
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=options)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    sources, refs = corpus()
    inputs = CompareInputs(sources, refs, systems(refs), [chain(s) for s in sources], None)
    run(inputs, CompareConfig(metric="bleu", n_samples=50, length_cutoffs=[10], min_bucket=5), out, html=True)
    return out


def rows_shown(d) -> list[int]:
    return [int(tr.get_attribute("data-line")) for tr in d.find_elements("css selector", "#sentence-table tbody tr")]


def test_the_page_loads_filters_and_draws_the_chosen_sentence(browser, report, tmp_path):
    d = browser
    d.get((report / "report.html").as_uri())
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    assert sorted(rows_shown(d)) == list(range(40))  # all sentences
    Select(d.find_element("id", "kind-select")).select_by_value("source length (words)")
    Select(d.find_element("id", "bucket-select")).select_by_value(">=10")
    long_ = rows_shown(d)
    assert sorted(long_) == list(range(20, 40))  # the filter changed the rows shown
    Select(d.find_element("id", "bucket-select")).select_by_value("<10")
    assert sorted(rows_shown(d)) == list(range(20))
    # sorted by Δ chrF: the long sentences (where the system is the reference) first
    Select(d.find_element("id", "kind-select")).select_by_value("all sentences")
    assert set(rows_shown(d)[:20]) == set(range(20, 40))
    # choosing a sentence draws its translations and its parse: one arc per word but the root
    first = d.find_elements("css selector", "#sentence-table tbody tr")[0]
    line = int(first.get_attribute("data-line"))
    first.click()
    arcs = d.find_elements("css selector", "#tree path.arc")
    assert len(arcs) == len(corpus()[0][line].split()) - 1
    assert len(d.find_elements("css selector", "#translations tr")) == 1 + 2 + 2  # header, 2 systems x 2 seeds
    png = tmp_path / "page.png"
    d.save_screenshot(str(png))
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.std() > 0.05  # not a blank page
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []


def test_the_numbers_shown_equal_the_csv(browser, report):
    d = browser
    d.get((report / "report.html").as_uri())
    with open(report / "compare.csv", encoding="utf-8") as f:
        want = list(csv.DictReader(f))
    shown = d.find_elements("css selector", "#bucket-table tbody tr")
    assert len(shown) == len(want)
    for tr, row in zip(shown, want):
        assert (tr.get_attribute("data-kind"), tr.get_attribute("data-bucket"), tr.get_attribute("data-system")) == (
            row["kind"], row["bucket"], row["system"])
        for col in ("delta", "low", "high"):
            text = tr.find_element("css selector", f"td.{col}").text
            assert float(text) == pytest.approx(float(row[col]), abs=0.006), (col, row)
        for col in ("p_value", "p_holm_kind", "p_holm_report", "p_bh_kind", "p_bh_report"):
            text = tr.find_element("css selector", "td." + ("p" if col == "p_value" else col)).text
            assert text == ("—" if row[col] == "" else "< 0.001" if float(row[col]) < 0.001 else f"{float(row[col]):.3f}")
        mark = row["p_holm_report"] != "" and float(row["p_holm_report"]) < 0.05
        assert tr.find_element("css selector", "td.mark").text == ("*" if mark else "")
    # the between-bucket tests: one line per line of compare_between.csv
    with open(report / "compare_between.csv", encoding="utf-8") as f:
        between = list(csv.DictReader(f))
    shown = d.find_elements("css selector", "#between-table tbody tr")
    assert len(shown) == len(between) > 0
    for tr, row in zip(shown, between):
        assert (tr.get_attribute("data-test"), tr.get_attribute("data-contrast")) == (row["test"], row["contrast"])
        for col in ("low", "high"):
            text = tr.find_element("css selector", f"td.{col}").text
            assert text == "—" if row[col] == "" else float(text) == pytest.approx(float(row[col]), abs=0.006)
    # every bucket with a Δ is a point of its chart
    points = d.find_elements("css selector", "svg.chart circle.point")
    assert len(points) == sum(1 for r in want if r["delta"] != "")


def chart_page(tmp_path) -> str:
    """A page whose rows are made by hand: in "tree depth" a small bucket's interval (-3.39 to +7.20, p 0.43)
    five times wider than the others', in "verbs" one only a little wider; the rest of the page as ``run``
    makes it."""
    from structnmt.analysis.compare import BucketRow, sentence_buckets, sentence_chrf
    from structnmt.analysis.compare_html import chart_data, html_page, page_data

    def row(kind, bucket, delta, low, high, p, holm, small=False):
        return BucketRow(kind, bucket, 8 if small else 400, "long-better", 30.0, 30.0 + delta, delta, low, high, p,
                         small, holm, holm, holm, holm)

    nan = float("nan")
    rows = [row("tree depth", "<3", 0.5, -0.2, 1.2, 0.16, 0.32), row("tree depth", "[3,4)", 1.0, 0.3, 1.7, 0.004, 0.012),
            row("tree depth", "[4,5)", 1.9, -3.39, 7.20, 0.43, nan, small=True),
            row("verbs", "<1", 0.2, -0.5, 0.9, 0.57, 0.57), row("verbs", "1", 0.4, -1.0, 1.9, 0.6, nan, small=True)]
    sources, refs = corpus()
    cfg = CompareConfig(metric="bleu", n_samples=50, length_cutoffs=[10], min_bucket=5)
    inputs = CompareInputs(sources, refs, systems(refs), None, None)
    data = page_data(rows, inputs, sentence_buckets(sources, None, cfg), sentence_chrf(inputs.systems, refs), cfg)
    data.update(chart_data(rows, "BLEU"), between=[], attention=None)
    page = tmp_path / "chart.html"
    page.write_text(html_page(data), encoding="utf-8")
    return page.as_uri()


def test_an_interval_beyond_the_panel_is_marked_and_the_axes_are_rounded_and_labelled(browser, tmp_path):
    d = browser
    d.get(chart_page(tmp_path))
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    charts = {c.get_attribute("data-kind"): c for c in d.find_elements("css selector", "svg.chart")}
    for chart in charts.values():
        lo, hi = float(chart.get_attribute("data-lo")), float(chart.get_attribute("data-hi"))
        top, bottom = float(chart.get_attribute("data-top")), float(chart.get_attribute("data-bottom"))
        assert chart.find_element("css selector", "text.unit").text == "Δ BLEU"
        # ticks: rounded, evenly spaced by 1, 2 or 5 times a power of ten, from the axis' low end to its high end
        ticks = [t.text for t in chart.find_elements("css selector", "text.tick")]
        values = [float(t) for t in ticks]
        steps = {round(b - a, 9) for a, b in zip(values, values[1:])}
        assert len(steps) == 1 and (values[0], values[-1]) == (lo, hi), ticks
        step = steps.pop()
        assert round(step / 10 ** math.floor(math.log10(step)), 6) in (1, 2, 5)
        assert all(len(t.split(".")[1]) <= max(0, -math.floor(math.log10(step))) for t in ticks if "." in t), ticks
        for g in chart.find_elements("css selector", "g.bucket"):
            line = g.find_element("css selector", "line.interval")
            low, high = float(line.get_attribute("data-low")), float(line.get_attribute("data-high"))
            clipped = line.get_attribute("data-clipped").split()
            ends = {c.get_attribute("data-end") for c in g.find_elements("css selector", "path.clip")}
            assert set(clipped) == ends
            assert ("low" in clipped) == (low < lo) and ("high" in clipped) == (high > hi)  # inside, or marked
            for y in (float(line.get_attribute("y1")), float(line.get_attribute("y2"))):
                assert top - 0.01 <= y <= bottom + 0.01
    depth = charts["tree depth"]
    small = depth.find_element("css selector", 'g.bucket[data-bucket="[4,5)"]')
    assert small.find_element("css selector", "line.interval").get_attribute("data-clipped") == "low high"
    assert sorted(t.text for t in small.find_elements("css selector", "text.clip-label")) == ["+7.20", "-3.39"]
    title = small.find_element("css selector", "title").get_attribute("textContent")
    assert "[-3.39, +7.20]" in title and "p 0.430" in title and "not read" in title
    # the verbs' small interval is only a little wider: the axis takes it whole
    assert charts["verbs"].find_elements("css selector", "path.clip") == []
    assert float(charts["verbs"].get_attribute("data-lo")) <= -1.0
    # compare-mt's labels in words; the mark (Holm over the report < 0.05) on [3,4) alone
    assert [t.text for t in charts["verbs"].find_elements("css selector", "text.xlabel")] == ["no verb", "1 verb"]
    assert [t.text for t in depth.find_elements("css selector", "text.xlabel")] == ["depth under 3", "depth 3", "depth 4"]
    marks = d.find_elements("css selector", "svg.chart text.mark")
    assert [m.find_element("xpath", "..").get_attribute("data-bucket") for m in marks] == ["[3,4)"]


#: lines that end or change a script element, or would be markup if read as HTML
HOSTILE = "<!--<script> a </script> <img src=x onerror=document.title='owned'> & &amp; |"
HOSTILE_NAME = "long <b>better</b> | <!--<script>"


def hostile_inputs() -> CompareInputs:
    """The corpus with a hostile source (line 4), reference (line 26) and translation (line 26 of every seed
    of the second system), and a hostile system name; the buckets stay as in :func:`report`'s page."""
    sources, refs = corpus()
    sources[3] = HOSTILE.split(" a ")[0] + " s s s s"  # still 5 words: the short bucket
    refs[25] = HOSTILE
    base, better = systems(refs)
    runs = [[(HOSTILE if i == 25 else h) for i, h in enumerate(run)] for run in better.runs]
    return CompareInputs(sources, refs, [base, System(HOSTILE_NAME, runs)], [chain(s) for s in sources], None)


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    run(hostile_inputs(), CompareConfig(metric="bleu", n_samples=50, length_cutoffs=[10], min_bucket=5), out, html=True)
    return out


def test_hostile_lines_are_shown_as_text_and_the_page_still_renders(browser, hostile_report):
    """`<!--<script>` in a sentence once left report.html blank (the embedded JSON escaped only `</`): the page
    draws its charts, table and sentences, and shows every hostile line and name as text, running none of it."""
    d = browser
    d.get((hostile_report / "report.html").as_uri())
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    assert sorted(rows_shown(d)) == list(range(40))  # the sentence browser is there, every line listed
    assert d.find_elements("css selector", "svg.chart circle.point")  # the charts were drawn
    assert len(d.find_elements("css selector", "#bucket-table tbody tr")) > 0
    assert HOSTILE_NAME in d.find_element("id", "legend").text
    row = d.find_element("css selector", "#sentence-table tbody tr[data-line='3']")
    assert row.find_elements("css selector", "td")[3].text == hostile_inputs().sources[3]
    d.find_element("css selector", "#sentence-table tbody tr[data-line='25']").click()
    detail = d.find_element("id", "detail").text
    assert f"reference: {HOSTILE}" in detail and f"seed 1: {HOSTILE}" in detail
    assert d.find_elements("css selector", "#detail img, #detail b, #legend b") == []  # no markup made of the text
    assert d.title == "structnmt compare"  # the onerror handler never ran


def test_embedded_json_and_markdown_escape_what_html_would_read(hostile_report):
    """The unit of the escaping: the page's JSON holds no `<`, `>` or `&` and reads back as the data; the
    Markdown reports show names and sentences as text (`&lt;`, `\\|` in a table cell)."""
    import json

    from structnmt.analysis.compare_html import html_page, script_json
    from structnmt.analysis.compare_report import md_text

    data = {"sources": [HOSTILE], "systems": [HOSTILE_NAME], "n": 1}
    payload = script_json(data)
    assert not set("<>&") & set(payload) and json.loads(payload) == data
    assert "\\u003c!--\\u003cscript\\u003e" in payload and "\\u0026amp;" in payload
    page = html_page(data)
    assert page.count("<script") == 2 and page.count("</script>") == 2 and "<!--" not in page
    assert md_text("a <b>|</b> & c") == "a &lt;b&gt;|&lt;/b&gt; &amp; c"
    assert md_text("a | b\nc", cell=True) == "a \\| b c"
    for name in ("compare.md", "sentences.md"):
        text = (hostile_report / name).read_text(encoding="utf-8")
        assert "<b>" not in text and "<!--" not in text and "<script" not in text and "<img" not in text, name
    table = (hostile_report / "compare.md").read_text(encoding="utf-8")
    assert "long &lt;b&gt;better&lt;/b&gt; \\| &lt;!--&lt;script&gt;: Δ [95 %], p" in table
    sentences = (hostile_report / "sentences.md").read_text(encoding="utf-8")
    assert "- reference: &lt;!--&lt;script&gt; a &lt;/script&gt;" in sentences
