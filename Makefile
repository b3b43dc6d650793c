# Every target creates the virtual environment .venv on first use, so `make demo` and
# `make test` work on a machine with nothing installed but Python 3.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXPERIMENTS := s20_exp1 s20_exp2 s20_exp3 s20_cifar b18_cifar_noise b18_imagenet b18_margin b18_tau \
               b18_sparsity g22_sparsity \
               g22_epsilon g22_samples g22_cifar_noise g22_plantnet g22_imagenet_lt g22_imagenet \
               g22_time p22_cifar p22_imagenet zoo_cifar100 zoo_plantnet
FIGURE_IDS := s20_exp1 s20_exp2 s20_exp3 s20_cifar b18_tau b18_sparsity g22_sparsity g22_time
ZOOS := zoo_cifar100 zoo_plantnet
TUNED_LOSSES := $(basename $(notdir $(wildcard conf/tune/*.yaml)))
TRIALS ?= 20

.PHONY: help install install-peers demo test test-all wheel-check docs cards lint bench bench-losses bench-noised-paths bench-data bench-share bench-startup gpu-check bench-epochs bench-train smoke sweeps figures report readme-figures clean \
        $(addprefix sweep-,$(EXPERIMENTS)) $(addprefix table-,$(EXPERIMENTS)) $(addprefix figure-,$(FIGURE_IDS)) \
        sweep-b18_speed table-b18_speed $(addprefix tune-,$(ZOOS)) $(addprefix table-,$(addsuffix _tuned,$(ZOOS)))

# A bare `make` prints the targets; it installs nothing.
.DEFAULT_GOAL := help
help:
	@echo "make <target>   (every target creates .venv and installs what it needs on first use)"
	@echo ""
	@echo "  demo            install the package with its training and report extras, train the default run"
	@echo "  test            the test suite (about 5½ minutes on 2 CPU cores); test-all adds the slow cases"
	@echo "  wheel-check     build the sdist and wheel (outputs/dist/), twine check them, install the wheel in new"
	@echo "                  venvs (Python 3.10 with torch 2.3.1, 3.12 and 3.13 with the newest torch), run the README"
	@echo "                  loop and the losses' tests there (7 to 10 minutes)"
	@echo "  docs            the documentation site into outputs/docs/ (open outputs/docs/index.html)"
	@echo "  smoke           every paper experiment at smoke scale, every table and figure, the report"
	@echo "  sweep-<id>      run one paper experiment's sweep, <id> one of:"
	@echo "$(EXPERIMENTS)" | fmt -w 80 | sed 's/^/                    /'
	@echo "  table-<id>      build its table beside the published numbers (outputs/tables/<id>.md)"
	@echo "  figure-<id>     build its figure, <id> one of: $(FIGURE_IDS)"
	@echo "  tune-<zoo>      tune every loss of a zoo with the same Optuna budget (TRIALS=20, ARGS=overrides),"
	@echo "                  <zoo> one of: $(ZOOS); then table-<zoo>_tuned"
	@echo "  sweeps          the three S20 synthetic sweeps (about 5 minutes on 2 cores)"
	@echo "  report          the report page of every paper item (outputs/report/index.html)"
	@echo "  cards           check every protocol card against its sweep, write docs/cards/"
	@echo "  bench-losses    speed and stability of every loss, against the published codes if installed"
	@echo "  bench-noised-paths  the noised losses' three k-th largest paths forced in turn at the papers' settings"
	@echo "  install-peers   add the published codes (pytopk, difftopk) for bench-losses and the parity tests"
	@echo "  bench           the S20 sweeps' wall time against a bare PyTorch loop"
	@echo "  bench-train     images per second of the engine against a bare loop (DenseNet 40-12)"
	@echo "  bench-epochs    training-step times of every experiment's model, and its sweep's compute"
	@echo "  bench-data      images per second of the CIFAR and ImageNet-format input pipelines"
	@echo "  bench-share     several small jobs at once on one machine (a GPU each, a share of the cores) against one"
	@echo "  bench-startup   start-up of import topk, train.py --help and a 1-epoch run against import torch"
	@echo "  gpu-check       every GPU check on a CUDA machine (outputs/gpu/)"
	@echo "  lint            ruff over the code"
	@echo "  clean           remove the runs, sweeps, tables, figures, smoke data and report under outputs/"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[train,report,tune,track,timm,dev]'
	touch $@

demo: install
	$(PY) train.py

# Tests run in TEST_WORKERS pytest-xdist processes of one torch thread each (2 here: the suite
# takes about 5½ minutes on 2 cores: 5 min 17 s in a fresh clone's CI run, 2,702 tests).
TEST_WORKERS ?= 2
test: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

# Everything, including the cases marked slow (every diffsort_topk_ce sorter and mode compiled).
test-all: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS)

# The package as pip installs it (scripts/wheel_check.sh): `python -m build` makes the sdist and the
# wheel in outputs/dist/, `twine check --strict` reads their metadata; for each entry of
# CHECK_PYTHONS (VERSION[:REQUIREMENT,...]) the wheel goes into a new venv of that Python outside
# the checkout, with those requirements, where the README's loop and the library's tests (the
# losses': test_losses_*, test_loss_edges, ...) run against the installed package. The ends of the
# declared ranges: the oldest Python (3.10) with the oldest torch (2.3.1, built against numpy 1),
# the newest Python (3.13) with the newest torch the machine allows, and 3.12 with it too (every
# classified Python is run: `make test` runs 3.11; Python 3.12: 1 min 32 s with its install).
# 6 min 43 s to 9 min 45 s on this 2-core machine while other jobs ran (the build about 1 min;
# Python 3.10 with torch 2.3.1: 1 min 48 s to 3 min 41 s installing, its CUDA 12 wheels from pip's
# cache (a first download adds about 2.5 GB), 24 to 50 s of tests; Python 3.13: 1 min 49 s to
# 2 min 11 s installing, 22 to 29 s of tests).
CHECK_PYTHONS ?= 3.10:torch==2.3.1,numpy==1.26.4 3.12 3.13
wheel-check: install
	PY=$(PY) bash scripts/wheel_check.sh $(CHECK_PYTHONS)

# The documentation site, from docs/ and the docstrings, into outputs/docs/ (open
# outputs/docs/index.html from disk). Warnings are errors: a broken reference fails the build.
docs: $(VENV)/.docs-installed
	rm -rf outputs/docs
	$(PY) -m sphinx -W --keep-going -q -b html docs outputs/docs
	@echo "The documentation site: outputs/docs/index.html"

$(VENV)/.docs-installed: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@

lint: install
	$(PY) -m ruff check topk scripts tests train.py

# Wall time of the three S20 sweeps against a bare PyTorch loop (outputs/bench/sweeps.{json,md}).
bench: install
	$(PY) scripts/bench_train.py sweeps

# Speed (ratio to cross-entropy) and float32 stability of every loss, and ours against the
# published codes where `make install-peers` has installed them (outputs/bench/losses.{json,md}).
bench-losses: install
	$(PY) scripts/bench_losses.py

bench-noised-paths: install
	$(PY) scripts/bench_noised_paths.py

# The published implementations bench-losses compares ours with: pytopk (G22's noised losses) and
# difftopk (its copy of B18's smooth top-k SVM loss), the `peers` extra.
install-peers: install
	$(PY) -m pip install --quiet -e '.[peers]'

# Every GPU check of issue 13 on a CUDA machine (loss benchmark, host-device synchronisations
# of a DenseNet 40-40 step per loss, G22 Fig. 3 epoch times): outputs/gpu/. See scripts/gpu_check.sh.
gpu-check: install
	PY=$(PY) bash scripts/gpu_check.sh

# Images per second of the engine against the same bare PyTorch loop on a DenseNet 40-12
# (outputs/bench/train.{json,md}).
bench-train: install
	$(PY) scripts/bench_train.py densenet

# Training-step times of every paper experiment's model on this machine, and the compute its sweep
# needs (outputs/bench/epochs.{json,md}).
bench-epochs: install
	$(PY) scripts/bench_epochs.py

# Images per second of the batched CIFAR pipeline against the per-image torchvision one, and of
# ImageFolder JPEG decoding (outputs/bench/data.{json,md}).
bench-data: install
	$(PY) scripts/bench_data.py

# Several small jobs at once (hydra.launcher.n_jobs=k, each with its GPU and share of the cores)
# against one at a time (outputs/bench/share.{json,md}).
bench-share: install
	$(PY) scripts/bench_share.py

bench-startup: install
	$(PY) scripts/bench_startup.py

# Every experiment at smoke scale (tiny data in the real formats, one seed, one short epoch),
# then every table and figure from those records: outputs/smoke/{tables,figures,summary.md}.
smoke: install
	$(PY) scripts/smoke.py

# One paper item: `make sweep-g22_epsilon` runs the sweep, `make table-g22_epsilon` builds the
# table from its best sweep (faithful to the protocol, most complete, newest records) into
# outputs/tables/, `make figure-b18_tau` the figure (outputs/figures/).
# b18_speed's numbers come from `make bench-losses`, not from a sweep.
$(addprefix sweep-,$(EXPERIMENTS)): sweep-%: install
	$(PY) train.py -m +experiment=$*

$(addprefix table-,$(EXPERIMENTS)): table-%: install
	$(PY) scripts/make_tables.py $*

sweep-b18_speed: bench-losses

# A zoo tuned: one Optuna study per loss over its own parameters (conf/tune/<loss>.yaml), TRIALS
# trials each (a loss without parameters runs once), into outputs/tuning/<zoo>/<loss>/<time>/;
# `make table-zoo_cifar100_tuned` sets each loss's best validation trial on the test split beside
# the untuned zoo. ARGS adds overrides to every trial (ARGS='dataset.root=/data/plantnet_300K').
$(addprefix tune-,$(ZOOS)): tune-%: install
	for loss in $(TUNED_LOSSES); do \
	  TOPK_TUNE_TRIALS=$(TRIALS) $(PY) train.py -m +experiment=$* $(ARGS) +tune=$$loss || exit 1; \
	done

$(addprefix table-,$(addsuffix _tuned,$(ZOOS))): table-%: install
	$(PY) scripts/make_tables.py $*

table-b18_speed: install
	$(PY) scripts/make_tables.py b18_speed

$(addprefix figure-,$(FIGURE_IDS)): figure-%: install
	$(PY) scripts/make_figures.py $*

# The three S20 synthetic sweeps run on a CPU in about 5 minutes.
sweeps: sweep-s20_exp1 sweep-s20_exp2 sweep-s20_exp3

figures: $(addprefix figure-,$(FIGURE_IDS))

# One static page with every paper item: its tables and figures beside the published numbers, its
# status and the command that produces it, from whatever runs exist (full sweeps first, else the
# smoke ones): outputs/report/index.html, which opens from disk. `make smoke` builds it too.
report: install
	$(PY) scripts/make_report.py

# The protocol cards' documentation pages (docs/cards/) from topk/cards/*.yaml, after checking every
# card against the composed jobs of its experiment's sweep.
cards: install
	$(PY) scripts/make_cards.py --check
	$(PY) scripts/make_cards.py

# The report page, then the README's S20 figures (docs/figures/) copied from it: refused unless it
# shows s20_exp1-3 from complete full-scale protocol sweeps (`make sweeps` first).
readme-figures: install
	$(PY) scripts/make_report.py --readme-figures docs/figures

clean:
	rm -rf outputs/runs outputs/sweeps outputs/figures outputs/tables outputs/smoke outputs/smoke_data outputs/report
