# Every entry point of the kit, for students and instructors. `make help` lists them.
# PY defaults to the kit's own .venv, created on first use by assignment/bootstrap.sh.
# On a host whose python already has everything (e.g. a GPU node without network),
# pass PY=python3 to skip the bootstrap.

SHELL     := /bin/bash
VENV      := .venv
PY        ?= $(VENV)/bin/python
T         ?=
IMPL      ?=
SUBMISSION ?= solutions
OUT       ?= build/grade
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
ifneq ($(IMPL),)
export IMPL
endif

ifeq ($(PY),$(VENV)/bin/python)
SETUP := $(VENV)/.kit-installed
else
SETUP :=
endif

PYTEST_TASK := $(if $(T),-m $(T),)
HAVE_HIDDEN := $(wildcard grader/hidden)
HAVE_NVCC := $(shell command -v nvcc 2>/dev/null)

TASKS     ?=
GRADE_FLAGS ?=

.PHONY: help test test-public demo starter check-starter check-cuda selfcheck grade preflight handout bench profile feedback \
        sanitize generate corpus train-tiny clean

help:
	@echo "Students:"
	@echo "  make test [T=t1]          public tests (all tasks, or one)"
	@echo "  make bench T=t2           time your kernel against the reference and PyTorch"
	@echo "  make profile T=t4         Nsight Compute metrics of one launch"
	@echo "  make sanitize T=t4        compute-sanitizer memcheck and racecheck, as the grader runs them"
	@echo "  make generate PROMPT=\"The history of\" [CKPT=dir] [MAX_TOKENS=100] [TEMPERATURE=0.8 (0: greedy)]"
	@echo "                [TOP_P=] [TOP_K=] [SEED=0] [DEVICE=cpu|cuda] [DTYPE=bfloat16] [ATTN=reference|t1|t5|t6] [CHAT=1]"
	@echo "  make feedback             the beta-tester feedback form in the terminal (feedback.json; resumes)"
	@echo "Instructors:"
	@echo "  make demo                 grade the reference solutions, render the handout"
	@echo "  make starter              regenerate starter/ from solutions/"
	@echo "  make check-starter        fail when starter/ is out of sync"
	@echo "  make check-cuda           compile every .cu (sm_80 and sm_90)"
	@echo "  make selfcheck            solutions score full marks, starter scores zero"
	@echo "  make grade SUBMISSION=dir|zip OUT=dir [TASKS=\"t1 t2\"] [GRADE_FLAGS=--allow-weak-isolation]"
	@echo "  make preflight            is this host fit to grade (GPU, tools, sandbox, the reference's speed)?"
	@echo "  make handout [AUDIENCE=instructor]  build/handout/handout.html and .pdf (instructor: with the rubric's reasoning)"
	@echo "  make corpus               build/corpus: the shipped model's training text, from Debian packages"
	@echo "  make train-tiny           retrain the shipped model (assignment/model/checkpoints/kit-tiny) on a GPU"

$(VENV)/.kit-installed: pyproject.toml assignment/bootstrap.sh
	@bash assignment/bootstrap.sh 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# The test command CI runs: generated files in sync, every .cu compiles, then pytest.
test: $(SETUP) check-starter $(if $(HAVE_NVCC),check-cuda,)
	$(PY) -m pytest tests $(if $(HAVE_HIDDEN),grader/hidden,) $(PYTEST_TASK)

test-public: $(SETUP)
	$(PY) -m pytest tests --ignore=tests/kit $(PYTEST_TASK)

starter: $(SETUP)
	$(PY) -m assignment.starter

check-starter: $(SETUP)
	$(PY) -m assignment.starter --check

check-cuda: $(SETUP)
	$(PY) -m assignment.cuda.compiler --check-all

selfcheck: $(SETUP)
	$(PY) -m grader.selfcheck

grade: $(SETUP)
	$(PY) -m grader.grade "$(SUBMISSION)" --out "$(OUT)" $(foreach t,$(TASKS),--task $(t)) $(GRADE_FLAGS)

preflight: $(SETUP)
	$(PY) -m grader.preflight $(foreach t,$(TASKS),--task $(t))

# Stream text with your t7 sampling loop (IMPL picks it), on the shipped model unless CKPT names another.
PROMPT ?=
generate: $(SETUP)
	@test -n "$(PROMPT)" || { echo 'make generate: give a prompt, e.g. make generate PROMPT="The history of"'; exit 2; }
	$(PY) -m assignment.model.generate --prompt "$(PROMPT)" $(if $(CKPT),--ckpt "$(CKPT)") \
	  $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	  $(if $(TOP_P),--top-p $(TOP_P)) $(if $(TOP_K),--top-k $(TOP_K)) $(if $(SEED),--seed $(SEED)) \
	  $(if $(DEVICE),--device $(DEVICE)) $(if $(DTYPE),--dtype $(DTYPE)) $(if $(ATTN),--attention $(ATTN)) \
	  $(if $(CHAT),--chat)

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

feedback: $(SETUP)
	$(PY) -m assignment.feedback --file feedback.json

AUDIENCE ?= student
handout: $(SETUP)
	$(PY) -m handout.render --audience $(AUDIENCE)

bench: $(SETUP)
	$(PY) -m assignment.perf.bench $(if $(T),--task $(T),)
	$(if $(filter t4 t5,$(T)),$(PY) -m assignment.perf.scaling --task $(T),)

profile: $(SETUP)
	$(PY) -m assignment.perf.profile $(if $(T),--task $(T),)

sanitize: $(SETUP)
	$(PY) -m assignment.cuda.sanitize --task $(or $(T),$(error make sanitize needs T=t2|t3|t4|t5|t6))

demo: $(SETUP)
	$(PY) -m grader.demo

clean:
	rm -rf build .kit_cache .pytest_cache
