"""The student handout in a real headless Chromium: every internal link lands on an element, the contents list
every task and each task's section carries the task id as its anchor, every image loads, no formula is left
as TeX, the maths is MathML that the browser lays out, and nothing runs past the text column, on screen (a
1000 px window) or in the print layout the PDF is made from (A4's text width, print styles).

The browser is Debian's chromium driven through chromium-driver by Selenium (tests/kit/kit_browser.py); the
tests skip with the reason when one of them is missing."""

from __future__ import annotations

import pytest
from kit_browser import start_browser

from assignment.registry import load_registry
from handout import render

pytestmark = pytest.mark.kit

SCREEN_WIDTH = 1000
# The PDF's text column: A4 (210 mm) less the 15 mm side margins of style.css's @page, in CSS px (96 per inch).
PRINT_WIDTH = round((210 - 2 * 15) / 25.4 * 96)
# Rendering differences under a pixel are not overflow.
SLACK_PX = 1

# Every a[href^="#"] whose target id does not exist.
BROKEN_ANCHORS_JS = """
return [...document.querySelectorAll('a[href^="#"]')]
  .map(a => decodeURIComponent(a.getAttribute('href').slice(1)))
  .filter(id => !document.getElementById(id));
"""

IMAGES_JS = """
return [...document.images].map(img => ({src: img.src.slice(0, 80), ok: img.complete && img.naturalWidth > 0}));
"""

# Text outside code, maths and scripts that still looks like TeX: $...$, $$, a \\command, or the renderer's
# placeholder. Returns [text, the element that holds it].
UNRENDERED_MATH_JS = """
const skip = 'code, pre, script, style, math, kbd, samp';
const tex = /\\$\\$|\\$[^\\s$][^$]*\\$|\\\\[A-Za-z]{2,}|KITMATH/;
const found = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (node.parentElement.closest(skip)) continue;
  if (tex.test(node.textContent)) found.push([node.textContent.trim().slice(0, 120), node.parentElement.tagName]);
}
return found;
"""

MATH_JS = """
const maths = [...document.querySelectorAll('math')];
return {
  count: maths.length,
  display: maths.filter(m => m.getAttribute('display') === 'block').length,
  collapsed: maths.filter(m => m.getBoundingClientRect().width < 1).length,
  errors: document.querySelectorAll('merror').length,
};
"""

# Elements that run past the text column (the body's content box), and boxes whose content is wider than the
# box itself (a pre or a cell that would scroll or clip). Hidden elements (display: none) have no box.
OVERFLOW_JS = """
const body = document.body.getBoundingClientRect();
const style = getComputedStyle(document.body);
const left = body.left + parseFloat(style.paddingLeft), right = body.right - parseFloat(style.paddingRight);
const slack = arguments[0];
const out = [];
const describe = el => {
  const section = el.closest('section[id], header');
  return `${el.tagName.toLowerCase()}${el.className ? '.' + el.className : ''} in #${section ? section.id || 'title' : '?'}: `
    + (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 70);
};
for (const el of document.body.querySelectorAll('p, li, pre, table, figure, svg, math, h1, h2, h3, h4, .todo, .callout, img')) {
  const box = el.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;
  if (box.right > right + slack || box.left < left - slack) {
    out.push(`${describe(el)} spans ${Math.round(box.left)}..${Math.round(box.right)} px, the column ${Math.round(left)}..${Math.round(right)}`);
  }
}
for (const el of document.body.querySelectorAll('pre, td, th, p, li')) {
  if (el.scrollWidth > el.clientWidth + slack && getComputedStyle(el).display !== 'inline') {
    out.push(`${describe(el)} holds ${el.scrollWidth} px of content in ${el.clientWidth} px`);
  }
}
return out;
"""


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return render.write_html(tmp_path_factory.mktemp("handout"), audience="student")


@pytest.fixture(scope="module")
def browser(page):
    driver = start_browser("the handout", width=SCREEN_WIDTH)
    driver.set_script_timeout(20)
    driver.get(page.as_uri())
    yield driver
    driver.quit()


def test_every_internal_link_lands_on_an_element(browser):
    links = browser.execute_script("return document.querySelectorAll('a[href^=\"#\"]').length")
    assert links > 20, "the handout has almost no internal links: did the contents render?"
    assert browser.execute_script(BROKEN_ANCHORS_JS) == []


def test_the_contents_list_every_task_and_each_section_is_anchored_by_its_id(browser, registry):
    listed = browser.execute_script(
        "return [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href').slice(1))"
    )
    sections = browser.execute_script("return [...document.querySelectorAll('section.task')].map(s => s.id)")
    assert sections == list(registry.ids)
    assert [anchor for anchor in listed if anchor in registry.ids] == list(registry.ids)
    for anchor in listed:  # every chapter of the contents is a section of the page
        assert browser.execute_script("return document.getElementById(arguments[0]).tagName", anchor) == "SECTION"


def test_every_image_loads(browser):
    images = browser.execute_script(IMAGES_JS)
    assert [image["src"] for image in images if not image["ok"]] == []
    figures = browser.execute_script(
        "return [...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)"
    )
    assert figures and min(figures) > 100, f"an inline figure is not laid out: widths {figures}"


def test_no_formula_is_left_as_tex_and_the_maths_is_laid_out(browser):
    assert browser.execute_script(UNRENDERED_MATH_JS) == []
    math = browser.execute_script(MATH_JS)
    assert math["count"] > 200 and math["display"] > 20, math
    assert math["collapsed"] == 0 and math["errors"] == 0, math


@pytest.mark.parametrize("layout", ["screen", "print"])
def test_nothing_runs_past_the_text_column(browser, layout):
    try:
        if layout == "print":
            # The PDF's layout: print styles, and a window as wide as A4's text column.
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
            browser.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": PRINT_WIDTH, "height": 1100, "deviceScaleFactor": 1, "mobile": False},
            )
        problems = browser.execute_script(OVERFLOW_JS, SLACK_PX)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert problems == [], "\n".join(problems)
