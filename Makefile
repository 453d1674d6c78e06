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

.PHONY: help test demo starter check-starter selfcheck grade preflight handout release feedback-summary corpus train-tiny clean

help:
	@echo "Students:"
	@$(MAKE) --no-print-directory student-help
	@echo "Instructors:"
	@echo "  make demo                 grade the reference solutions, render the handout"
	@echo "  make starter              regenerate starter/ from solutions/"
	@echo "  make check-starter        fail when starter/ is out of sync"
	@echo "  make selfcheck            solutions score full marks, starter scores zero"
	@echo "  make grade SUBMISSION=dir|zip OUT=dir [TASKS=\"t1 t2\"] [GRADE_FLAGS=--allow-weak-isolation]"
	@echo "  make preflight            is this host fit to grade (GPU, tools, sandbox, the reference's speed)?"
	@echo "  make release              dist/student/ and dist/student.zip: the student bundle, checked (no solutions, hidden tests, reasoning)"
	@echo "  make feedback-summary SUBMISSIONS=dir [GRADES=dir]  the beta testers' feedback in one page (build/feedback-summary)"
	@echo "  make handout [AUDIENCE=instructor]  build/handout/handout.html and .pdf (instructor: with the rubric's reasoning)"
	@echo "  make corpus               build/corpus: the shipped model's training text, from Debian packages"
	@echo "  make train-tiny           retrain the shipped model (assignment/model/checkpoints/kit-tiny) on a GPU"

# The test command CI runs: generated files in sync, every .cu compiles, then pytest.
test: $(SETUP) check-starter $(if $(HAVE_NVCC),check-cuda,)
	$(PY) -m pytest tests $(if $(HAVE_HIDDEN),grader/hidden,) $(PYTEST_TASK)

starter: $(SETUP)
	$(PY) -m assignment.starter

check-starter: $(SETUP)
	$(PY) -m assignment.starter --check

selfcheck: $(SETUP)
	$(PY) -m grader.selfcheck

grade: $(SETUP)
	$(PY) -m grader.grade "$(SUBMISSION)" --out "$(OUT)" $(foreach t,$(TASKS),--task $(t)) $(GRADE_FLAGS)

preflight: $(SETUP)
	$(PY) -m grader.preflight $(foreach t,$(TASKS),--task $(t))

# The shipped model: its corpus (Debian packages, licences recorded) and its training run (a GPU, minutes).
CORPUS     ?= build/corpus
CHECKPOINT ?= assignment/model/checkpoints/kit-tiny
MINUTES    ?= 5
corpus: $(SETUP)
	$(PY) -m assignment.model.corpus --out $(CORPUS)

$(CORPUS)/train.txt: | $(SETUP)
	$(PY) -m assignment.model.corpus --out $(CORPUS)

train-tiny: $(SETUP) $(CORPUS)/train.txt
	$(PY) -m assignment.model.train --corpus $(CORPUS) --out $(CHECKPOINT) --minutes $(MINUTES)

AUDIENCE ?= student
handout: $(SETUP)
	$(PY) -m handout.render --audience $(AUDIENCE)

feedback-summary: $(SETUP)
	@test -n "$(SUBMISSIONS)" || { echo 'make feedback-summary: give SUBMISSIONS=dir (one folder or .zip per student)'; exit 2; }
	$(PY) -m grader.feedback_summary "$(SUBMISSIONS)" $(if $(GRADES),--grades "$(GRADES)") --out build/feedback-summary

release: $(SETUP)
	$(PY) -m grader.release --out dist

demo: $(SETUP)
	$(PY) -m grader.demo

clean:
	rm -rf build .kit_cache .pytest_cache
