"""The handout renders every registry task, its math, its points and its stubs.

Everything renders into pytest's tmp_path, never into the repository.
"""

from __future__ import annotations

import ast
import re
import shutil
import time
from pathlib import Path

import pytest
from markupsafe import escape

from assignment.registry import load_registry
from handout import render, texts
from handout.api import file_api
from handout.mathml import MathError, markdown_to_html
from handout.pdf import count_pages, find_chromium, html_to_pdf
from handout.texts import TEXT_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kit


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def handout_html(tmp_path_factory) -> Path:
    return render.write_html(tmp_path_factory.mktemp("handout"))


@pytest.fixture(scope="module")
def html(handout_html) -> str:
    return handout_html.read_text(encoding="utf-8")


def test_one_section_per_task_in_registry_order(html, registry):
    section_ids = re.findall(r'<section class="task[^"]*" id="(t\d+)"', html)
    assert section_ids == list(registry.ids) and len(section_ids) == 7
    for task in registry.tasks:
        heading = re.search(rf'id="{task.id}">\s*<h2>(.*?)</h2>', html, re.DOTALL)
        assert heading, f"no heading for {task.id}"
        assert task.id in heading.group(1) and str(escape(task.title)) in heading.group(1)


def test_title_and_contents(html, registry):
    assert str(escape(registry.title)) in html and str(escape(registry.subtitle)) in html
    for task in registry.tasks:
        assert f'href="#{task.id}"' in html


def test_math_is_mathml(html):
    assert "<math" in html and 'display="block"' in html
    # No formula may leak through as raw LaTeX or as a placeholder.
    assert "KITMATH" not in html
    assert "$$" not in html


def test_points_table_matches_registry(html, registry):
    table = re.search(r'<table class="points" id="points-table">(.*?)</table>', html, re.DOTALL).group(1)
    total = re.search(r'id="points-total">([\d.]+)<', table).group(1)
    assert float(total) == registry.total_points
    per_task = dict(re.findall(r'data-task-total="(t\d+)">([\d.]+)<', table))
    assert {k: float(v) for k, v in per_task.items()} == {t.id: t.points.total for t in registry.tasks}
    assert sum(float(v) for v in per_task.values()) == registry.total_points


def _t1_section(html: str) -> str:
    return re.search(r'<section class="task[^"]*" id="t1">(.*?)</section>', html, re.DOTALL).group(1)


def test_t1_shows_starter_plan_and_solution_docstring(html):
    section = _t1_section(html)
    starter = (REPO_ROOT / "starter" / "t1_attention.py").read_text(encoding="utf-8")
    plan_lines = re.findall(r"^\s*# PLAN:\s?(.*?)\s*$", starter, re.MULTILINE)
    assert plan_lines, "the starter has no PLAN lines to show"
    for line in plan_lines:
        assert str(escape(line)) in section, f"PLAN line missing from the t1 section: {line}"
    tree = ast.parse((REPO_ROOT / "solutions" / "t1_attention.py").read_text(encoding="utf-8"))
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "flash_attention_forward")
    assert str(escape(ast.get_docstring(function))) in section
    assert "def flash_attention_forward(" in section


def test_t1_tolerances_and_commands_come_from_registry(html, registry):
    section = _t1_section(html)
    assert "make test T=t1" in section
    assert "make bench T=t1" not in section  # t1 runs anywhere; bench/profile are for GPU tasks
    atol = render.format_number(registry.task("t1").tolerance["float32"]["atol"])
    assert atol in section


def test_unavailable_tasks_say_coming(html, registry):
    for task in registry.tasks:
        if not task.available:
            section = re.search(rf'id="{task.id}">(.*?)</section>', html, re.DOTALL).group(1)
            assert "Coming in a later release" in section


def _chapter(html: str, anchor: str) -> str:
    return re.search(rf'<section id="{anchor}" class="chapter[^"]*">(.*?)</section>', html, re.DOTALL).group(1)


def test_model_chapter_comes_just_before_t6_with_its_figure(html):
    contents = re.search(r'<nav class="toc".*?</nav>', html, re.DOTALL).group(0)
    listed = re.findall(r'href="#([\w-]+)"', contents)
    sections = re.findall(r'<section[^>]* id="([\w-]+)"', html)
    for order in (listed, sections):
        assert order.index("model") == order.index("t6") - 1, order
        assert order.index("getting-started") == order.index("t1") - 1, order
    chapter = _chapter(html, "model")
    assert "<h2>The model</h2>" in chapter and "<math" in chapter
    figure = re.search(r"<figure>(.*?)</figure>", chapter, re.DOTALL)
    assert figure, "the model chapter has no figure"
    assert "<svg" in figure.group(1) and "</svg>" in figure.group(1) and "<figcaption>" in figure.group(1)


def test_model_chapter_quotes_the_model_code(html):
    from assignment.model import attention, config

    facts = texts.model_facts()
    assert facts.kernel_head_dims == attention.KERNEL_HEAD_DIMS
    assert facts.attention_impls == attention.IMPLEMENTATIONS
    chapter = _chapter(html, "model")
    for name in (*config.SUPPORTED_ARCHITECTURES, *attention.IMPLEMENTATIONS):
        assert name in chapter, f"the model chapter does not mention {name}"


def test_model_chapter_reads_the_shipped_checkpoint_when_there_is_one(tmp_path, monkeypatch, registry):
    import torch

    from assignment.model.checkpoint import save_checkpoint
    from assignment.model.config import ModelConfig
    from assignment.model.llama import Transformer

    config = ModelConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
    model = Transformer(config)
    save_checkpoint(model, tmp_path / "kit-tiny", dtype=torch.float32)
    monkeypatch.setattr(texts, "KIT_TINY", tmp_path / "kit-tiny")
    assert texts.model_facts().kit_tiny_parameters == sum(p.numel() for p in model.parameters())
    chapter = _chapter(render.render_html(registry), "model")
    assert "<th>kit-tiny</th>" in chapter and "<td>97</td>" in chapter and "million parameters" in chapter
    monkeypatch.setattr(texts, "KIT_TINY", tmp_path / "absent")
    assert "<th>kit-tiny</th>" not in _chapter(render.render_html(registry), "model")


def test_a_chapter_must_precede_a_task(registry):
    stray = render.Chapter("stray", "Stray", "intro.md", before="t99")
    with pytest.raises(ValueError, match="t99"):
        render.chapter_views(registry, chapters=(stray,))


def test_missing_file_is_coming_not_an_error(tmp_path, registry):
    api = file_api("t4_flash_attention.cu", registry.task("t4"), registry, root=tmp_path)
    assert not api.present
    html = render.render_html(registry, root=tmp_path)  # a repository with no solution files at all
    assert "is not in this release yet" in html


def test_broken_formula_names_the_file(tmp_path, registry):
    texts = tmp_path / "text"
    shutil.copytree(TEXT_DIR, texts)
    broken = texts / registry.task("t2").text
    broken.write_text(broken.read_text(encoding="utf-8") + "\nA broken formula: $\\frac{a}{$.\n", encoding="utf-8")
    with pytest.raises(MathError, match=re.escape(str(broken))) as error:
        render.render_html(registry, text_dir=texts)
    assert "\\frac{a}{" in str(error.value)


def test_unknown_latex_command_is_an_error():
    with pytest.raises(MathError, match=r"x\.md.*\\notacommand"):
        markdown_to_html("see $\\notacommand x$", "x.md")


def test_dollars_in_code_are_not_math():
    html = markdown_to_html("Run `echo $HOME $PATH`.\n\n```bash\nexport A=$B$C\n```\n", "x.md")
    assert "<math" not in html and "$HOME $PATH" in html and "$B$C" in html


def test_missing_pdf_is_an_error_unless_optional(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    monkeypatch.delenv("HANDOUT_PDF", raising=False)
    assert render.main(["--out", str(tmp_path / "a")]) == 1
    assert (tmp_path / "a" / "handout.html").is_file()
    assert "PDF not written" in capsys.readouterr().err
    monkeypatch.setenv("HANDOUT_PDF", "optional")
    assert render.main(["--out", str(tmp_path / "b")]) == 0
    monkeypatch.delenv("HANDOUT_PDF")
    assert render.main(["--out", str(tmp_path / "c"), "--no-pdf"]) == 0


def test_pdf_has_a_page_per_task(handout_html, tmp_path):
    browser = find_chromium()
    if browser is None:
        pytest.skip("no Chromium found ($CHROMIUM, chromium, chromium-browser, google-chrome): PDF not tested")
    started = time.monotonic()
    pdf = html_to_pdf(handout_html, tmp_path / "handout.pdf", browser=browser)
    assert pdf.read_bytes().startswith(b"%PDF")
    assert count_pages(pdf) >= 7  # each task section starts a new page
    assert b"/Outlines" in pdf.read_bytes(), "the PDF has no bookmarks (Chromium's document outline)"
    assert time.monotonic() - started < 60


def test_the_student_handout_states_the_targets_a_student_can_measure_and_not_the_reasoning(html, registry):
    assert "Why these thresholds" not in html
    for task in registry.available:
        for rule in task.timing:
            assert rule.reasoning[:60] not in html, f"{task.id}: the rubric's reasoning is in the student handout"
            full = max(rule.thresholds, key=lambda t: t.points)
            assert str(escape(render.describe_student_target(rule, full.at))) in html, (task.id, rule.name)
    assert "The course grades on an NVIDIA H100 80GB HBM3" in html


def test_the_instructor_handout_keeps_the_reasoning(tmp_path, registry):
    html = render.write_html(tmp_path, audience="instructor").read_text(encoding="utf-8")
    rule = registry.task("t3").timing[0]
    assert "Why these thresholds" in html and str(escape(rule.reasoning[:60])) in html
    with pytest.raises(ValueError, match="audience"):
        render.render_html(audience="everyone")


def test_t4_states_one_lse_formula_the_base2_one_the_kernel_needs(registry):
    """Q comes in pre-scaled by scale*log2(e), so m is in base-2 units: LSE = m ln 2 + ln l, never m + log l."""
    t4 = registry.task("t4")
    starter = (REPO_ROOT / "starter" / "t4_flash_attention.cu").read_text()
    text = (TEXT_DIR / "t4.md").read_text()
    assert "m * ln(2) + ln(l)" in t4.hint and "LSE = m + log(l)" not in t4.hint
    todo_titles = [line for line in starter.splitlines() if "TODO(t4):" in line and "LSE" in line]
    assert todo_titles and all("m * ln(2) + ln(l)" in line for line in todo_titles), todo_titles
    assert r"\mathrm{LSE} = m \ln 2 + \ln \ell" in text and r"\mathrm{LSE} = m + \log \ell$ (" not in text
    assert "use `expf` throughout" not in text and "You may use `expf`" not in text


def test_figures_quoted_in_the_task_texts_are_right():
    t1, t5 = (TEXT_DIR / "t1.md").read_text(), (TEXT_DIR / "t5.md").read_text()
    assert "7 bits of mantissa" in t1 and "8 bits of mantissa" not in t1
    assert "pre-filled with a sentinel" not in t1  # t1's functions allocate their own outputs
    assert "by 7% on an H100 (from 0.554×" in t5 and round(1 - 0.515 / 0.554, 2) == 0.07


def test_figure_labels_use_real_subscripts_as_the_text_does(html):
    figures = re.findall(r"<figure.*?</figure>", html, re.DOTALL)
    assert figures
    for figure in figures:
        text = re.sub(r"<[^>]+>", " ", figure)
        ascii_subscript = re.search(r"\b([A-Z]|Õ)_[a-z]{1,2}\b", text)
        assert not ascii_subscript, f"a figure label writes {ascii_subscript.group(0)!r} in ASCII"
