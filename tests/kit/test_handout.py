"""The handout renders every registry task, its math, its points and its stubs.

Everything renders into pytest's tmp_path, never into the repository.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from markupsafe import escape

from assignment import tasks
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
    assert section_ids == list(registry.ids) and len(section_ids) >= 7
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
    cells = re.findall(r'data-task-total="(t\d+)"( data-bonus="true")?>([\d.]+)<', table)
    assert {k: float(v) for k, _, v in cells} == {t.id: t.points.total for t in registry.tasks}
    assert {k for k, bonus, _ in cells if bonus} == {t.id for t in registry.tasks if t.bonus}
    # The theory part's rows: the course's own questions, then each task's (bonus with a bonus task).
    parts = re.findall(r'data-part-total="([\w-]+)"( data-bonus="true")?>([\d.]+)<', table)
    theory = registry.theory
    expected = [("theory", "", theory.own_points)] if theory else []
    expected += [
        (f"theory-{t}", ' data-bonus="true"' if registry.task(t).bonus else "", theory.task_points(t))
        for t in (theory.task_ids if theory else ())
    ]
    assert [(k, bonus, float(v)) for k, bonus, v in parts] == expected
    # bonus tasks' points, and their theory questions', come on top of the total
    regular = [float(v) for _, bonus, v in cells + parts if not bonus]
    assert sum(regular) == registry.total_points


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
    from assignment.model import config

    facts = texts.model_facts()
    assert facts.attention_impls == tasks.attention_choices()
    chapter = _chapter(html, "model")
    for name in (*config.SUPPORTED_ARCHITECTURES, *tasks.attention_choices()):
        assert name in chapter, f"the model chapter does not mention {name}"
    # A row per task whose code runs the model's attention, with what its ModelAttention says it takes.
    for task_id, spec in facts.task_attentions:
        row = re.search(
            rf"<tr>\s*<td><code>{task_id}</code></td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", chapter, re.DOTALL
        )
        assert row, f"the model chapter's table has no row for {task_id}"
        assert row.group(2) == ("GPU" if spec.cuda else "CPU or GPU")
        for dim in spec.head_dims or ():
            assert f"<mn>{dim}</mn>" in row.group(1)
        for dtype in spec.dtypes or ():
            assert dtype in row.group(1)


def test_the_handout_renders_without_torch():
    """The handout's facts come from the registry, assignment/model/'s literals and the task modules, all of which
    load without torch (a machine that renders the handout may have none)."""
    script = "import sys\nfrom handout.render import render_html\nrender_html()\nassert 'torch' not in sys.modules\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_model_chapter_reads_the_shipped_checkpoint_when_there_is_one(tmp_path, monkeypatch, registry):
    import torch

    from assignment.model.checkpoint import save_checkpoint
    from assignment.model.config import ModelConfig
    from assignment.model.llama import Transformer

    config = ModelConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    model = Transformer(config)
    save_checkpoint(model, tmp_path / "kit-tiny", dtype=torch.float32)
    monkeypatch.setattr(texts, "KIT_TINY", tmp_path / "kit-tiny")
    assert texts.model_facts().kit_tiny_parameters == sum(p.numel() for p in model.parameters())
    chapter = _chapter(render.render_html(registry), "model")
    assert "<th>kit-tiny</th>" in chapter and "<td>97</td>" in chapter and "million parameters" in chapter
    monkeypatch.setattr(texts, "KIT_TINY", tmp_path / "absent")
    assert "<th>kit-tiny</th>" not in _chapter(render.render_html(registry), "model")


def test_the_registrys_chapters_sit_before_their_task_or_after_the_last(registry):
    placed = render.chapter_views(registry)
    for chapter in registry.chapters:
        key = chapter.before or render.AFTER_TASKS
        assert chapter.anchor in [view.chapter.anchor for view in placed[key]], chapter


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


@pytest.fixture(scope="module")
def printed(handout_html, tmp_path_factory) -> tuple[Path, float]:
    """The handout printed to PDF (contents page numbers included), and how long that took."""
    browser = find_chromium()
    if browser is None:
        pytest.skip("no Chromium found ($CHROMIUM, chromium, chromium-browser, google-chrome): PDF not tested")
    started = time.monotonic()
    pdf = html_to_pdf(handout_html, tmp_path_factory.mktemp("pdf") / "handout.pdf", browser=browser)
    return pdf, time.monotonic() - started


def test_pdf_has_a_page_per_task(printed):
    pdf, seconds = printed
    assert pdf.read_bytes().startswith(b"%PDF")
    assert count_pages(pdf) >= 7  # each task section starts a new page
    assert b"/Outlines" in pdf.read_bytes(), "the PDF has no bookmarks (Chromium's document outline)"
    assert seconds < 60


def test_the_student_handout_states_the_targets_a_student_can_measure_and_not_the_reasoning(html, registry):
    assert "Why these thresholds" not in html
    for task in registry.available:
        for rule in task.timing:
            assert rule.reasoning[:60] not in html, f"{task.id}: the rubric's reasoning is in the student handout"
            full = max(rule.thresholds, key=lambda t: t.points)
            assert str(escape(render.describe_student_target(rule, full.at))) in html, (task.id, rule.name)
    assert "The course grades on an NVIDIA H100 80GB HBM3" in html
    assert "Why these limits" not in html and "instructor's copy" not in html
    for task in registry.available:
        assert task.grading.reasoning[:60] not in html, (
            f"{task.id}: the time limits' reasoning is in the student handout"
        )


def test_the_instructor_handout_keeps_the_reasoning(tmp_path, registry):
    html = render.write_html(tmp_path, audience="instructor").read_text(encoding="utf-8")
    rule = registry.task("t3").timing[0]
    assert "Why these thresholds" in html and str(escape(rule.reasoning[:60])) in html
    assert "Why these limits" in html and str(escape(registry.task("t3").grading.reasoning[:60])) in html
    assert "instructor's copy" in html
    with pytest.raises(ValueError, match="audience"):
        render.render_html(audience="everyone")


def test_the_two_audiences_write_to_separate_files(tmp_path, monkeypatch):
    """make handout AUDIENCE=instructor once overwrote the student's build/handout/handout.html and .pdf with the copy
    that holds the rubric's reasoning: each audience has files of its own, in the same folder or not."""

    def print_to_pdf(html: Path, pdf: Path) -> Path:  # Chromium's part: what matters here is where it writes
        pdf.write_bytes(b"%PDF " + html.read_bytes())
        return pdf

    monkeypatch.setattr(render, "html_to_pdf", print_to_pdf)
    assert render.main(["--out", str(tmp_path)]) == 0
    assert render.main(["--out", str(tmp_path), "--audience", "instructor"]) == 0
    student, instructor = render.output_paths(tmp_path, "student"), render.output_paths(tmp_path, "instructor")
    assert student == (tmp_path / "handout.html", tmp_path / "handout.pdf")
    assert len(set(student + instructor)) == 4 and all(p.is_file() for p in student + instructor)
    assert "Why these thresholds" not in student[0].read_text(encoding="utf-8")
    assert "Why these thresholds" in instructor[0].read_text(encoding="utf-8")
    assert b"Why these thresholds" not in student[1].read_bytes()
    assert render.DEFAULT_OUT.relative_to(REPO_ROOT).as_posix() == "build/handout"
    docs = (REPO_ROOT / "README.md").read_text() + (REPO_ROOT / "Makefile").read_text()
    assert instructor[0].name in docs and instructor[1].name in docs, "README and make help name the instructor's copy"


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


# --------------------------------------------------------------------------- the course document


def _task_section(html: str, task_id: str) -> str:
    return re.search(rf'<section class="task[^"]*" id="{task_id}">(.*?)\n</section>', html, re.DOTALL).group(1)


def test_every_available_task_has_objectives_common_mistakes_rules_limits_and_a_time(html, registry):
    from handout import hours

    for task in registry.available:
        section = _task_section(html, task.id)
        objectives = re.search(rf'id="{task.id}-objectives">(.*?)</div>', section, re.DOTALL)
        assert objectives, f"{task.id}: no learning objectives"
        for objective in task.objectives:
            assert str(escape(objective)) in objectives.group(1), (task.id, objective)
        mistakes = re.search(rf'<h3 id="{task.id}-common-mistakes">.*?</h3>\s*<ul>(.*?)</ul>', section, re.DOTALL)
        assert mistakes and mistakes.group(1).count("<li>") >= 4, f"{task.id}: no list of common mistakes"
        assert f'id="{task.id}-rules"' in section and "The grader enforces these rules" in section, task.id
        limits = re.search(rf'id="{task.id}-time-limits">.*?<p class="time-limits">(.*?)</p>', section, re.DOTALL)
        assert limits, f"{task.id}: no time limits"
        assert f"{render.format_number(task.grading.timeout_s)}&nbsp;s" in limits.group(1)
        assert f"{render.format_number(task.grading.test_deadline_s)}&nbsp;s" in limits.group(1)
        estimate = hours.describe(hours.TimeEstimate(*task.estimated_hours))
        assert f'<span class="time-estimate">time: {escape(estimate)}</span>' in section, task.id


def test_the_rules_section_lists_what_the_grader_checks(html, registry):
    from assignment import policy
    from assignment.cuda import rules as region_rules

    for task in registry.available:
        rules = re.search(rf'id="{task.id}-rules">(.*?)<h3>How to test', _task_section(html, task.id), re.DOTALL)
        text = rules.group(1)
        for name in task.files:
            assert f"<code>{name}</code>" in text, (task.id, name)
        if any(name.endswith(".py") for name in task.files):
            for name in (*task.rules.imports, *task.rules.forbidden, *policy.KIT_FORBIDDEN_ATTRIBUTES):
                assert f"<code>{escape(name)}</code>" in text, (task.id, name)
        if any(name.endswith(".cu") for name in task.files):
            for name in (*region_rules.FORBIDDEN_IDENTIFIERS, *(p + "…" for p in region_rules.FORBIDDEN_PREFIXES)):
                assert f"<code>{escape(name)}</code>" in text, (task.id, name)
    # A public test is named only where the task has one: t6's Python file is checked by make submit alone.
    t6 = re.search(r'id="t6-rules">(.*?)<h3>How to test', _task_section(html, "t6"), re.DOTALL).group(1)
    assert "test_file_uses_only_allowed_operations" not in t6 and "test_todo_regions_are_device_code_only" in t6


def test_the_course_chapters_are_in_place_and_in_the_contents(html):
    contents = re.search(r'<nav class="toc".*?</nav>', html, re.DOTALL).group(0)
    listed = re.findall(r'href="#([\w-]+)"', contents)
    sections = re.findall(r'<section[^>]* id="([\w-]+)"', html)
    front = ["points", "integrity", "prerequisites", "getting-started", "t1"]
    back = [load_registry().ids[-1], "theory", "submitting", "debugging", "references"]
    for order in (listed, sections):
        assert order[: len(front)] == front and order[-len(back) :] == back, order
    assert listed == sections


def test_the_integrity_policy_is_the_registrys_rendered_as_markdown(registry, tmp_path):
    html = render.render_html(registry)
    section = _chapter_or_front(html, "integrity")
    assert "<strong>AI tools.</strong>" in section and "**" not in section
    edited = dataclasses.replace(registry, integrity_policy="## Our own rules\n\nNo *AI* at all.")
    section = _chapter_or_front(render.render_html(edited), "integrity")
    assert '<h3 id="integrity-our-own-rules">Our own rules</h3>' in section and "<em>AI</em>" in section
    without = render.render_html(dataclasses.replace(registry, integrity_policy=""))
    assert 'id="integrity"' not in without and 'href="#integrity"' not in without


def _chapter_or_front(html: str, anchor: str) -> str:
    return re.search(rf'<section id="{anchor}" class="[^"]*">(.*?)</section>', html, re.DOTALL).group(1)


def test_the_references_are_the_four_papers(html):
    references = _chapter(html, "references")
    for cited in ("arXiv:2205.14135", "arXiv:2307.08691", "arXiv:1805.02867", "10.1145/1498765.1498785"):
        assert cited in references
    assert "Milakov" in references and "Williams" in references and "52(4)" in references


def test_the_course_chapters_quote_the_kit_not_a_copy_of_it(html, registry):
    from assignment.cuda import compiler
    from handout.facts import kit_facts

    facts = kit_facts(registry)
    assert facts.check_archs == compiler.CHECK_ARCHS and facts.nvcc_flags == compiler.NVCC_FLAGS
    assert facts.toolkit_majors == compiler.TOOLKIT_MAJORS
    prerequisites = _chapter(html, "prerequisites")
    for arch in compiler.CHECK_ARCHS:
        assert arch in prerequisites
    assert f"≥ {facts.python}" in prerequisites and facts.toolkits in prerequisites
    assert all(gpu in prerequisites for gpu in facts.course_gpus) and facts.course_gpus
    debugging = _chapter(html, "debugging")
    for tool in ("compute-sanitizer", "memcheck", "racecheck", "printf", "cuda-gdb", "-Xptxas -v", "spill"):
        assert tool in debugging, tool
    assert " ".join(compiler.NVCC_FLAGS) in debugging  # the kit's own flags, and no invented debug switch
    submitting = _chapter(html, "submitting")
    for task in registry.available:
        for name in task.files:
            assert f"<code>{name}</code>" in submitting, name
    for name in registry.submit_files:
        assert f"<code>{name}</code>" in submitting, name
    # The note the integrity policy asks for is a deliverable with its own row, saying what goes in it.
    note_row = re.search(
        rf"<tr>\s*<td><code>{re.escape(registry.notes_file)}</code></td>\s*<td>(.*?)</td>", submitting, re.S
    )
    assert note_row and "AI" in note_row.group(1) and "see the section" not in note_row.group(1), submitting
    assert "make submit" in submitting and "MANIFEST.json" in submitting


def test_hours_come_from_the_feedback_summary_once_enough_testers_answered(tmp_path, registry, capsys):
    import json

    from handout import hours

    summary = {
        "questions": {
            "hours_t1": {"n": 5, "median": 6.5, "min": 2.0, "max": 14.0},
            "hours_t2": {"n": hours.MIN_ANSWERS - 1, "median": 30.0, "min": 1.0, "max": 40.0},
        }
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    questions = hours.read_summary(tmp_path)  # the folder make feedback-summary writes, or the file itself
    assert questions == hours.read_summary(tmp_path / "summary.json")
    estimates = hours.time_estimates(registry, questions)
    assert estimates["t1"] == hours.TimeEstimate(2.0, 14.0, median=6.5, answers=5)
    assert estimates["t2"] == hours.TimeEstimate(*registry.task("t2").estimated_hours)  # too few answers
    assert hours.describe(estimates["t1"]) == "median 6.5 h (5 beta-tester answers, 2–14 h)"
    assert hours.total(estimates, registry).from_feedback

    assert render.main(["--out", str(tmp_path / "out"), "--no-pdf", "--hours", str(tmp_path)]) == 0
    page = (tmp_path / "out" / "handout.html").read_text(encoding="utf-8")
    assert "median 6.5 h (5 beta-tester answers, 2–14 h)" in _task_section(page, "t1")
    assert "instructor&#39;s estimate" in _task_section(page, "t2")
    assert re.search(r'data-task-hours="t1">6.5 h<', page)
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert render.main(["--out", str(tmp_path / "out"), "--no-pdf", "--hours", str(tmp_path / "bad.json")]) == 2
    assert "not the summary.json of make feedback-summary" in capsys.readouterr().err


def test_the_form_asks_the_hours_question_the_handout_reads():
    from assignment.feedback import load_form
    from handout import hours

    asked = {q.id for q in load_form().questions if q.type == "number" and q.task}
    assert {f"{hours.HOURS_QUESTION}_{task.id}" for task in load_registry().tasks} <= asked


def test_contents_page_slots_are_filled_from_the_pdfs_named_destinations(tmp_path):
    from handout import toc_pages

    page = render.render_html()
    targets = toc_pages.toc_targets(page)
    assert targets[:2] == ["points", "integrity"] and len(targets) == len(set(targets)) >= 14
    filled = toc_pages.fill_toc_pages(page, {"points": 2, "t4": 26})
    assert '<span class="toc-page" data-target="t4">26</span>' in filled
    assert '<span class="toc-page" data-target="t5"></span>' in filled  # unknown: left empty
    (tmp_path / "x.pdf").write_bytes(b"%PDF-1.4 not a real one")
    assert toc_pages.named_destinations(tmp_path / "x.pdf") == {}


def test_the_pdf_contents_show_the_page_each_entry_starts_on(printed, handout_html):
    from handout import toc_pages

    pdftotext = shutil.which("pdftotext")
    if pdftotext is None:
        pytest.skip("needs poppler's pdftotext to read the PDF's first page (apt-get install poppler-utils)")
    pdf = printed[0]
    pages = toc_pages.named_destinations(pdf)
    assert pages["t1"] > pages["points"] >= 2 and pages["references"] == count_pages(pdf)
    first = subprocess.run(
        [pdftotext, "-layout", "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    lines = [line.split() for line in first.splitlines() if line.strip()]
    printed = {}
    for anchor in toc_pages.toc_targets(handout_html.read_text(encoding="utf-8")):
        # The entry's line ends with its page: "8. t4 CUDA FlashAttention ..... 26"
        title = {"points": "Points", "integrity": "Academic", "references": "References"}.get(anchor, anchor)
        line = next((words for words in lines if title in words or title in " ".join(words)), None)
        if line is not None and line[-1].isdigit():
            printed[anchor] = int(line[-1])
    for anchor in ("points", "integrity", "t1", "t4", "t7", "references"):
        assert printed.get(anchor) == pages[anchor], (anchor, printed, pages)


def test_an_unavailable_task_lists_no_rules_or_limits_it_cannot_be_graded_by(registry):
    tasks = tuple(dataclasses.replace(t, available=False) if t.id == "t7" else t for t in registry.tasks)
    html = render.render_html(dataclasses.replace(registry, tasks=tasks))
    section = _task_section(html, "t7")
    assert "Coming in a later release" in section and 'id="t7-objectives"' in section
    assert 'id="t7-rules"' not in section and 'id="t7-time-limits"' not in section
