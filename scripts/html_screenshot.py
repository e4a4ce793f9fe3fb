"""A PNG of a `structnmt compare --html` page as a reader sees it, in Debian's headless Chromium (the browser and
driver the tests use): a bucket chosen in the sentence browser and its first sentence opened.

    python scripts/html_screenshot.py cmp/report.html shot.png --kind "longest dependency arc (words)" --bucket ">=8"
"""
from __future__ import annotations

import argparse
import os
import shutil
import time

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import Select


def _choose(d, element_id: str, value: str, option: str) -> None:
    """Select ``value`` in the page's ``<select id=element_id>``, or one sentence naming the values there are."""
    select = Select(d.find_element("id", element_id))
    try:
        select.select_by_value(value)
    except NoSuchElementException:
        values = ", ".join(repr(o.get_attribute("value")) for o in select.options)
        raise SystemExit(f"html_screenshot: {option} {value!r} is not in the page; it has {values}.") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("html")
    ap.add_argument("png")
    ap.add_argument("--kind", default="all sentences", help="the sentence browser's bucket kind")
    ap.add_argument("--bucket", default=None, help="the bucket of that kind")
    ap.add_argument("--size", default="1300,2600", help="window size W,H in pixels")
    ap.add_argument("--scroll-to", default="kind-select",
                    help="the element (id) at the top of the picture: kind-select (the sentence browser, default), "
                         "summary (the legend and the bucket charts) or attention (the chosen sentence's heat maps)")
    ap.add_argument("--line", type=int, default=None,
                    help="open this 1-based line instead of the first one listed")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.html):
        raise SystemExit(f"html_screenshot: {args.html}: no such page; give the report.html `structnmt compare --html` "
                         "wrote.")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        raise SystemExit("html_screenshot: needs Debian's chromium and chromium-driver (apt-get install chromium "
                         "chromium-driver).")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={args.size}"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium")
    d = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        d.get(f"file://{os.path.abspath(args.html)}")
        if not d.find_elements("id", "kind-select"):
            raise SystemExit(f"html_screenshot: {args.html} is not a page of `structnmt compare --html`.")
        _choose(d, "kind-select", args.kind, "--kind")
        if args.bucket is not None:
            _choose(d, "bucket-select", args.bucket, "--bucket")
        rows = d.find_elements("css selector", "#sentence-table tbody tr")
        if args.line is not None:
            rows = [r for r in rows if r.get_attribute("data-line") == str(args.line - 1)]
        if not rows:
            raise SystemExit("html_screenshot: no sentence is listed there" + (f" as line {args.line}" if args.line
                                                                               else "") + "; choose another bucket.")
        rows[0].click()
        if not d.find_elements("id", args.scroll_to):
            raise SystemExit(f"html_screenshot: --scroll-to {args.scroll_to!r}: no such element in the page; use "
                             "kind-select, summary or attention (the last after a sentence with attention maps).")
        d.execute_script(f"document.getElementById({args.scroll_to!r}).scrollIntoView();")
        time.sleep(0.3)
        d.save_screenshot(args.png)
    finally:
        d.quit()
    print(f"html_screenshot: wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
