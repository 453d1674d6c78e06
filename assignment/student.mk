# The student's entry points, shared by this repository's Makefile and the student bundle's (both include
# this file, so a target is written once). PY defaults to the kit's own .venv, created on first use by
# assignment/bootstrap.sh; on a host whose python already has everything (a GPU node without network, say),
# pass PY=python3 to skip the bootstrap.

SHELL     := /bin/bash
VENV      := .venv
PY        ?= $(VENV)/bin/python
T         ?=
IMPL      ?=
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
HAVE_NVCC := $(shell command -v nvcc 2>/dev/null)

.PHONY: student-help test-public bench profile sanitize check-cuda generate feedback feedback-form report theory submit

student-help:
	@echo "  make test [T=t1]          public tests (all tasks, or one)"
	@echo "  make bench T=t2           time your kernel; ends with where you stand on the timing rubric"
	@echo "  make profile T=t4         Nsight Compute metrics of one launch"
	@echo "  make sanitize T=t4        compute-sanitizer memcheck and racecheck, as the grader runs them"
	@echo "  make check-cuda           every .cu file: its TODO regions by the grader's rules, then compiled (sm_80, sm_90)"
	@echo "  make generate PROMPT=\"The history of\" [CKPT=dir] [MAX_TOKENS=100] [TEMPERATURE=0.8 (0: greedy)]"
	@echo "                [TOP_P=] [TOP_K=] [SEED=0] [DEVICE=cpu|cuda] [DTYPE=bfloat16] [ATTN=reference|sdpa|<task id>] [CHAT=1]"
	@echo "                [THREADS=n (CPU; default: one per 25M parameters, at most the cores you may use)]"
	@echo "                (the attentions ATTN takes: python -m assignment.commands.generate --help)"
	@echo "  make report               REPORT.md and REPORT.html from your own runs (reuses results that are still valid)"
	@echo "  make feedback             the beta-tester feedback form in the terminal (feedback.json; resumes)"
	@echo "  make feedback-form        the same form as a web page: build/feedback/feedback.html"
	@echo "  make theory ID=<your id>  your theory questions; writes theory_answers.toml (keeps your answers)"
	@echo "  make submit               check your files and pack submission.zip"

$(VENV)/.kit-installed: pyproject.toml assignment/bootstrap.sh
	@bash assignment/bootstrap.sh 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

test-public: $(SETUP)
	$(PY) -m pytest tests --ignore=tests/kit $(PYTEST_TASK) $(PYTEST_ARGS)

bench: $(SETUP)
	$(PY) -m assignment.commands.bench $(if $(T),--task $(T),) --then-scaling

profile: $(SETUP)
	$(PY) -m assignment.commands.profile $(if $(T),--task $(T),)

sanitize: $(SETUP)
	$(PY) -m assignment.commands.sanitize $(if $(T),--task $(T),)

check-cuda: $(SETUP)
	$(PY) -m assignment.cuda.check_all

# Stream text with your t7 sampling loop (IMPL picks it), on the shipped model unless CKPT names another.
PROMPT ?=
generate: $(SETUP)
	@test -n "$(PROMPT)" || { echo 'make generate: give a prompt, e.g. make generate PROMPT="The history of"'; exit 2; }
	$(PY) -m assignment.commands.generate --prompt "$(PROMPT)" $(if $(CKPT),--ckpt "$(CKPT)") \
	  $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	  $(if $(TOP_P),--top-p $(TOP_P)) $(if $(TOP_K),--top-k $(TOP_K)) $(if $(SEED),--seed $(SEED)) \
	  $(if $(DEVICE),--device $(DEVICE)) $(if $(DTYPE),--dtype $(DTYPE)) $(if $(ATTN),--attention $(ATTN)) \
	  $(if $(CHAT),--chat) $(if $(THREADS),--threads $(THREADS))

feedback: $(SETUP)
	$(PY) -m assignment.feedback --file feedback.json

feedback-form: $(SETUP)
	$(PY) -m assignment.feedback_html --out build/feedback/feedback.html

report: $(SETUP)
	$(PY) -m assignment.report $(if $(T),--task $(T),) $(if $(REFRESH),--refresh,)

# Your theory questions, and theory_answers.toml to answer them in (the id: ID=, else STUDENT_ID, else the file's).
theory: $(SETUP)
	$(PY) -m assignment.theory $(if $(ID),--id "$(ID)",) --markdown build/theory/questions.md

submit: $(SETUP)
	$(PY) -m assignment.submit
