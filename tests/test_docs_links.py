"""Every relative link of the user docs (README, docs/, benchmarks/) points to a file that exists and,
with a ``#fragment`` into a Markdown file, to a heading there (GitHub's anchors): a renamed section
or a moved file must not leave readers at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text: links and code marks reduced to their text, lowercased,
    punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside code fences); repeats get -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if m:
            a = github_anchor(m.group(1))
            out.add(a if a not in seen else f"{a}-{seen[a]}")
            seen[a] = seen.get(a, 0) + 1
    return out


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "docs" / "results").glob("*.md")),
            ROOT / "docs" / "outputs" / "README.md"]


def broken_links(path: Path) -> list[str]:
    bad = []
    for link in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", link):  # https:, mailto:
            continue
        target, _, fragment = link.partition("#")
        dest = (path.parent / target) if target else path
        if not dest.exists():
            bad.append(f"{link} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{link} (no such heading)")
    return bad


def test_github_anchors_of_known_headings():
    assert github_anchor("At fairseq's budget: 5,500 updates, cased and lowercased") == \
        "at-fairseqs-budget-5500-updates-cased-and-lowercased"
    assert github_anchor("The cross-paper comparison (Multi30k en→de)") == "the-cross-paper-comparison-multi30k-ende"
    assert github_anchor("`structnmt demo`: the [embedded](x.md) default") == "structnmt-demo-the-embedded-default"


def test_repeated_headings_get_numbered_anchors(tmp_path):
    md = tmp_path / "a.md"
    md.write_text("# Runs\n\n## Runs\n\n```\n# not a heading\n```\n### Runs\n", encoding="utf-8")
    assert anchors(md) == {"runs", "runs-1", "runs-2"}
    (tmp_path / "b.md").write_text("[ok](a.md#runs-2) [gone](a.md#not-a-heading) [none](c.md)\n", encoding="utf-8")
    assert broken_links(tmp_path / "b.md") == ["a.md#not-a-heading (no such heading)", "c.md (no such file)"]


def test_every_relative_link_of_the_docs_resolves():
    files = doc_files()
    assert len(files) >= 10 and all(f.exists() for f in files)
    bad = {str(f.relative_to(ROOT)): b for f in files if (b := broken_links(f))}
    assert bad == {}


def test_the_front_pages_stay_short():
    """The README is a front page (set-up, demo, real data, the answer, speed, extending, data) in 150 lines at most;
    the results index reads as the answer in 200 at most; the details live on the pages they link to."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    index = (ROOT / "docs" / "results" / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 150 and len(index) <= 200
    assert "python3 -m pytest" in "\n".join(readme) and "structnmt demo" in "\n".join(readme)
    assert sum(line.startswith("| + Rel_Pos") for line in readme) == 2  # the answer's table: Rel_Pos and the combination
