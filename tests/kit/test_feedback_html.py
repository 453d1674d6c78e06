"""The feedback form as a web page (assignment/feedback_html.py): every question of feedback.toml is on it, it
needs nothing from the network, and in a real headless Chromium it saves a feedback.json that
assignment.feedback accepts with the values filled in, refuses to save an invalid form (saying why, next to
the question), loads a saved file back, keeps a draft across a reload, and checks a value as Question.check does.

The browser is Debian's chromium, driven through Debian's chromium-driver (the same version, so the WebDriver
protocol always matches) by Selenium; .ci/run installs all three. Without one of them the browser tests skip
and say which is missing."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime
from pathlib import Path

import pytest
from kit_browser import start_browser
from markupsafe import escape as html_escape

from assignment import feedback_html
from assignment.feedback import SCALE, load_answers, load_form, save_answers

pytestmark = pytest.mark.kit

DOWNLOAD_WAIT_S = 10
# How long to watch for a download that must not come: the page starts one at once or never.
NO_DOWNLOAD_WAIT_S = 1.0


@pytest.fixture(scope="module")
def form():
    return load_form()


@pytest.fixture(scope="module")
def page(form, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "feedback.html"
    assert feedback_html.main(["--out", str(path)]) == 0
    return path


def embedded_schema(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="form-schema">(.*?)</script>', html, re.DOTALL)
    assert found, "the page embeds no #form-schema"
    return json.loads(found.group(1))


def valid_answers(form) -> dict:
    """A valid answer to every question, different from question to question; the first optional one skipped."""
    answers = {}
    for i, q in enumerate(form.questions):
        if q.type == "choice":
            value = list(q.choices[:2]) if q.multiple else q.choices[i % len(q.choices)]
        elif q.type == "scale":
            value = q.not_attempted if q.task == "t4" else SCALE[0] + i % (SCALE[1] - SCALE[0] + 1)
        elif q.type == "number":
            value = min(max(12.5 + i, q.min), q.max)
        else:
            value = f"an answer to {q.id}: café – ✓ <b>not markup</b>"[: q.max_length]
        assert q.check(value) is None, (q.id, value)
        answers[q.id] = value
    optional = [q for q in form.questions if not q.required]
    if optional:
        answers[optional[0].id] = None
    return answers


# --------------------------------------------------------------------------- the page, without a browser


def test_every_question_is_on_the_page_with_its_control(form, page):
    html = page.read_text(encoding="utf-8")
    for q in form.questions:
        start = html.find(f'id="q-{q.id}"')
        assert start >= 0, f"{q.id} is not on the page"
        block = html[start : html.index(f'id="error-{q.id}"', start)]
        assert ('class="tag required"' in block) == q.required, f"{q.id}: required is not marked as it is"
        assert ("<legend>" in block) == (q.type in ("choice", "scale")), f"{q.id}: a group of controls has a legend"
        if q.type == "choice":
            kind = "checkbox" if q.multiple else "radio"
            assert block.count(f'<input type="{kind}" name="{q.id}"') == len(q.choices), q.id
        elif q.type == "scale":
            levels = SCALE[1] - SCALE[0] + 1
            assert block.count(f'<input type="radio" name="{q.id}"') == levels + bool(q.not_attempted), q.id
            assert html_escape(q.low) in block and html_escape(q.high) in block, q.id
            if q.not_attempted:  # a task the tester never got to is an answer of its own, not a rating
                assert f'value="{feedback_html.NOT_ATTEMPTED_VALUE}"' in block and q.not_attempted in block, q.id
        elif q.type == "number":
            assert (
                f'<input type="number" id="input-{q.id}"' in block
                and f'<label class="prompt" for="input-{q.id}"' in block
            ), q.id
            assert all(
                f'{name}="{bound:g}"' in block
                for name, bound in (("min", q.min), ("max", q.max))
                if math.isfinite(bound)
            ), q.id
        else:
            assert f'<textarea id="input-{q.id}"' in block and f'maxlength="{q.max_length}"' in block, q.id
            assert f'id="count-{q.id}"' in block, f"{q.id}: no character counter"


def test_the_page_needs_nothing_from_outside(page):
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert not re.search(r"<(link|iframe|img|object|embed)\b", html, re.IGNORECASE)
    assert not re.search(r"<script[^>]*\bsrc=", html, re.IGNORECASE)
    styles = " ".join(re.findall(r"<style>(.*?)</style>", html, re.DOTALL))
    assert not re.search(r"@import|url\(", styles, re.IGNORECASE)
    scripts = " ".join(re.findall(r"<script>(.*?)</script>", html, re.DOTALL))
    assert not re.search(r"\b(fetch|XMLHttpRequest|WebSocket|EventSource|sendBeacon|import)\s*\(", scripts)
    assert "http://" not in html and "https://" not in html


def test_the_embedded_schema_is_the_forms(form, page):
    schema = embedded_schema(page.read_text(encoding="utf-8"))
    assert schema["schema_version"] == form.schema_version
    assert [q["id"] for q in schema["questions"]] == [q.id for q in form.questions]
    assert schema == json.loads(json.dumps(feedback_html.form_schema(form)))


def test_the_page_is_written_atomically_and_says_where(tmp_path, capsys):
    out = tmp_path / "deep" / "feedback.html"
    assert feedback_html.main(["--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert [p.name for p in out.parent.iterdir()] == ["feedback.html"], "a temporary file was left behind"


# --------------------------------------------------------------------------- the page in a real browser


@pytest.fixture(scope="module")
def browser():
    driver = start_browser("the feedback page")
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


@pytest.fixture
def downloads(browser, tmp_path) -> Path:
    """A fresh, empty download folder for this test."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})
    return folder


@pytest.fixture
def opened(browser, page, downloads):
    """The page, freshly opened with no draft kept from an earlier test."""
    browser.get(page.as_uri())
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    return browser


def by_css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def fill(driver, form, answers: dict) -> None:
    """Answer through the controls, as a tester would; a None (or absent) answer is left empty."""
    for q in form.questions:
        value = answers.get(q.id)
        if value is None:
            continue
        if q.type in ("choice", "scale"):
            scale_pick = feedback_html.NOT_ATTEMPTED_VALUE if value == q.not_attempted else value
            picks = (
                [scale_pick] if q.type == "scale" else [q.choices.index(v) for v in (value if q.multiple else [value])]
            )
            for pick in picks:
                by_css(driver, f'input[name="{q.id}"][value="{pick}"]').click()
        else:
            field = by_css(driver, f"#input-{q.id}")
            field.clear()
            field.send_keys(str(value))


def save(driver) -> None:
    by_css(driver, "#save").click()


def wait_for_download(folder: Path) -> Path:
    deadline = time.monotonic() + DOWNLOAD_WAIT_S
    path = folder / "feedback.json"
    while time.monotonic() < deadline:
        if path.is_file() and not list(folder.glob("*.crdownload")):
            return path
        time.sleep(0.05)
    raise AssertionError(
        f"no feedback.json downloaded within {DOWNLOAD_WAIT_S} s; the folder has "
        f"{sorted(p.name for p in folder.iterdir())}"
    )


def status_text(driver, selector: str) -> str:
    """The text of a status line that the page fills in asynchronously (a file is read in the background)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 5).until(lambda d: by_css(d, selector).text.strip())


def error_of(driver, qid: str) -> str:
    return by_css(driver, f"#error-{qid}").text.strip()


def test_a_filled_form_saves_the_feedback_json_the_terminal_form_writes(opened, form, downloads):
    answers = valid_answers(form)
    fill(opened, form, answers)
    save(opened)
    path = wait_for_download(downloads)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) == {"schema_version", "answers", "updated"}
    assert data["schema_version"] == form.schema_version
    assert datetime.fromisoformat(data["updated"]).utcoffset() is not None
    saved = load_answers(path, form)
    assert form.problems(saved) == []
    assert saved == answers
    assert list(saved) == [q.id for q in form.questions], "answers are saved in the form's order"
    assert "Saved feedback.json" in by_css(opened, "#save-status").text


def test_an_invalid_form_says_why_next_to_the_question_and_saves_nothing(opened, form, downloads):
    answers = valid_answers(form)
    required = [q for q in form.questions if q.required]
    empty = required[0]
    bounded = next(q for q in form.questions if q.type == "number" and math.isfinite(q.max))
    answers[empty.id] = None
    answers[bounded.id] = bounded.max + 1
    fill(opened, form, answers)
    save(opened)
    assert "needs an answer" in error_of(opened, empty.id)
    assert f"from {bounded.min:g} to {bounded.max:g}" in error_of(opened, bounded.id)
    flagged = [q.id for q in form.questions if error_of(opened, q.id)]
    assert flagged == [empty.id, bounded.id]
    assert "nothing was saved" in by_css(opened, "#save-status").text
    first_in_view = opened.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight "
        "&& document.activeElement.closest('.question').id === arguments[0];",
        f"q-{empty.id}",
    )
    assert first_in_view, "the first question with a problem is scrolled into view and focused"
    time.sleep(NO_DOWNLOAD_WAIT_S)
    assert list(downloads.iterdir()) == [], "an invalid form was saved"

    fill(opened, form, {empty.id: valid_answers(form)[empty.id], bounded.id: bounded.max})
    assert error_of(opened, empty.id) == "" and error_of(opened, bounded.id) == "", "fixed problems are cleared"
    save(opened)
    assert form.problems(load_answers(wait_for_download(downloads), form)) == []


def test_a_saved_file_loads_back_into_the_controls(opened, form, downloads, tmp_path):
    answers = valid_answers(form)
    saved = tmp_path / "earlier" / "feedback.json"
    save_answers(saved, form, answers)  # as the terminal form writes it
    by_css(opened, "#load-file").send_keys(str(saved))
    assert "Loaded feedback.json" in status_text(opened, "#load-status")
    first = form.questions[0]
    assert by_css(opened, f'input[name="{first.id}"][value="{first.choices.index(answers[first.id])}"]').is_selected()
    save(opened)
    assert load_answers(wait_for_download(downloads), form) == answers


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"schema_version": 1, "answers": {"finished": "yes"', "not a readable answer file"),
        ("[1, 2]", 'has no "answers"'),
        (None, "form version 999"),
    ],
)
def test_a_file_that_cannot_be_loaded_is_reported_and_changes_nothing(opened, form, tmp_path, content, message):
    path = tmp_path / "feedback.json"
    if content is None:
        content = json.dumps({"schema_version": 999, "answers": valid_answers(form)})
    path.write_text(content, encoding="utf-8")
    by_css(opened, "#load-file").send_keys(str(path))
    status = status_text(opened, "#load-status")
    assert message in status and "nothing was changed" in status
    assert by_css(opened, "#load-status").get_attribute("role") == "alert"
    assert opened.execute_script("return document.querySelectorAll('input:checked').length") == 0


def test_a_draft_survives_closing_the_tab(opened, form, page):
    from selenium.webdriver.common.keys import Keys

    scale = next(q for q in form.questions if q.type == "scale")
    text = next(q for q in form.questions if q.type == "text")
    by_css(opened, f'input[name="{scale.id}"][value="1"]').send_keys(Keys.SPACE)  # no mouse needed
    by_css(opened, f'input[name="{scale.id}"][value="1"]').send_keys(Keys.ARROW_RIGHT)
    by_css(opened, f"#input-{text.id}").send_keys("half an answer")
    opened.get("about:blank")
    opened.get(page.as_uri())
    assert by_css(opened, f'input[name="{scale.id}"][value="2"]').is_selected()
    assert by_css(opened, f"#input-{text.id}").get_attribute("value") == "half an answer"
    assert f"{len('half an answer')} / {text.max_length}" in by_css(opened, f"#count-{text.id}").text
    assert "Restored 2 answer(s)" in by_css(opened, "#draft-status").text


def test_the_page_checks_a_value_as_question_check_does(opened, form):
    schema = feedback_html.form_schema(form)["questions"]
    samples = [
        None,
        True,
        0,
        1,
        3,
        5,
        6,
        -1,
        2.5,
        200,
        201,
        "",
        "   ",
        "\u3000",
        "\x1c",
        "\ufeff",
        "x",
        "no",
        [],
        ["x"],
        "a" * 4001,
        "did not attempt",
        "Did not attempt",
    ]
    for q in form.questions:
        samples += list(q.choices) + [list(q.choices[:1]), list(q.choices[:2]), [q.choices[0]] * 2] if q.choices else []
    verdicts = opened.execute_script(
        "return arguments[0].map(q => arguments[1].map(v => window.feedbackForm.checkValue(q, v) === null));",
        schema,
        samples,
    )
    for q, row in zip(form.questions, verdicts):
        for value, page_accepts in zip(samples, row):
            assert page_accepts == (q.check(value) is None), (q.id, value)
