# dpfl — reproduce five papers on differentially private federated learning.
#   make reproduce   run every notebook at PROFILE (default: paper) and write figures/
#   make test        unit tests, cross-checks and notebook smoke runs
# Both create the virtual environment they need (.venv) on first use.

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
PROFILE     ?= paper
DEVICE      ?= auto
SEED        ?= 0
PAPERS      := zheng2021 kim2021 aldaghri_fedhdp asoodeh2020 geyer2017 audits
STAMP       := $(VENV)/.dpfl-installed
# RAY_ADDRESS=auto (or ray://host:10001): the notebooks' training runs go to that Ray cluster
RAY         := $(if $(RAY_ADDRESS),--ray $(RAY_ADDRESS),)
# pip prints one warning per package for the machine's offline mirrors; keep the log readable.
PIP_FILTER  := grep -v "is ignored: it is neither a file nor a directory" || true

.PHONY: help venv reproduce quick test bench status lab book chromium clean distclean $(PAPERS)

help: ## list the targets
	@echo "dpfl — make targets (variables: PROFILE=smoke|quick|paper, DEVICE=auto|cpu|cuda, SEED, DPFL_DATA, FORCE=1, RESULTS_ONLY=1, RAY_ADDRESS)"
	@grep -hE '^[a-zA-Z0-9_ -]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([^:]+):.*## (.*)/  \1\t\2/' | expand -t 22

$(STAMP): pyproject.toml
	@echo "Creating $(VENV) and installing dpfl with its dependencies (first time only)…"
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip 2>&1 | $(PIP_FILTER)
	@$(PY) -m pip install --quiet -e '.[lab,book,test,cluster]' 2>&1 | $(PIP_FILTER)
	@$(PY) -c "import dpfl, torch, papermill; print('dpfl', dpfl.__version__, '· torch', torch.__version__)"
	@touch $@

venv: $(STAMP) ## create .venv and install dpfl (idempotent)

reproduce: $(STAMP) ## run every notebook at PROFILE (default paper) → figures/, figures/REPORT.md
	$(PY) -m dpfl.reproduce --profile $(PROFILE) --device $(DEVICE) --seed $(SEED) $(RAY)

quick: ## reproduce at PROFILE=quick (minutes per notebook on a laptop CPU)
	$(MAKE) reproduce PROFILE=quick

$(PAPERS): $(STAMP)
	$(PY) -m dpfl.reproduce $@ --profile $(PROFILE) --device $(DEVICE) --seed $(SEED) $(RAY)

zheng2021:       ## Zheng et al. 2021, Federated f-DP
kim2021:         ## Kim, Günlü, Schaefer 2021, LDP trade-offs
aldaghri_fedhdp: ## Aldaghri et al., FedHDP
asoodeh2020:     ## Asoodeh & Calmon 2020, contraction of E_eps
geyer2017:       ## Geyer, Klein, Nabi 2017, client-level DP
audits:          ## empirical privacy audits of the engine's mechanisms (beyond the papers)

test: $(STAMP) chromium ## unit tests, cross-checks, notebook smoke runs, the book and its browser check (CPU, offline)
	$(PY) -m pytest -n 2 --durations=10 -m "not cluster"
	$(PY) -m pytest -m cluster

bench: $(STAMP) ## speed and memory benchmarks (ratios against a baseline in the same run)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/run_peers.py
	$(PY) benchmarks/cluster.py

status: $(STAMP) ## which paper-scale runs are cached and which are missing (a checkpoint's rounds, hours left, accuracy); computes nothing
	@$(PY) -c "from dpfl.data import datasets as d; print('== data:', d.data_root(), '(DPFL_DATA; a run is keyed by the' \
	  ' copy it reads: CIFAR-10 here is', repr(d.source_of('cifar10')) + ', FEMNIST', repr(d.source_of('femnist')) + ')')"
	@for grid in "zheng2021 --profile cells" "zheng2021 --profile paper" "geyer2017 --profile paper" \
	             "aldaghri_fedhdp_fl --profile paper"; do \
	  echo "== python -m dpfl.experiments.$$grid --list"; \
	  $(PY) -m dpfl.experiments.$$grid --list | grep -v "^cached " || true; done

book: $(STAMP) chromium ## the book of the executed notebooks in figures/ → build/book/_build/html; links checked; screenshots → figures/book-screenshots/
	$(PY) -m dpfl.book --check
	$(PY) -m dpfl.book_browser build/book/_build/html --pages index.html zheng2021/index.html --screenshots figures/book-screenshots

chromium: ## Debian's Chromium for the book's browser check (installed with apt-get when missing and run as root)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "Installing Debian's chromium (first time only)…"; apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || \
	  echo "warning: no Chromium (apt-get install chromium as root): the browser check of the book is skipped"

lab: $(STAMP) ## open the notebooks in JupyterLab
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

clean: ## remove training checkpoints, failed runs' staging directories and test caches (keeps .venv, figures and their cached runs)
	rm -rf figures/*/cache/checkpoints figures/.staging .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

distclean: clean ## also remove .venv
	rm -rf $(VENV)
