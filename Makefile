# Every target creates the virtual environment .venv on first use, so `make demo` and
# `make test` work on a machine with nothing installed but Python 3.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
S20_EXPERIMENTS := s20_exp1 s20_exp2 s20_exp3

.PHONY: install demo test test-all lint bench bench-losses sweeps $(addprefix sweep-,$(S20_EXPERIMENTS)) \
        $(addprefix figure-,$(S20_EXPERIMENTS)) figures clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: install
	$(PY) train.py

test: install
	$(PY) -m pytest -q -m "not slow"

# Everything, including cases marked slow (none are so far).
test-all: install
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check topk scripts tests train.py

# Wall time of the three S20 sweeps against a bare PyTorch loop (outputs/bench/sweeps.{json,md}).
bench: install
	$(PY) scripts/bench_sweeps.py

# Speed (ratio to cross-entropy) and float32 stability of every loss (outputs/bench/losses.{json,md}).
bench-losses: install
	$(PY) scripts/bench_losses.py

# One multirun sweep per paper figure: `make sweep-s20_exp2` then `make figure-s20_exp2`.
$(addprefix sweep-,$(S20_EXPERIMENTS)): sweep-%: install
	$(PY) train.py -m +experiment=$*

sweeps: $(addprefix sweep-,$(S20_EXPERIMENTS))

$(addprefix figure-,$(S20_EXPERIMENTS)): figure-%: install
	$(PY) scripts/make_figures.py $*

figures: $(addprefix figure-,$(S20_EXPERIMENTS))

clean:
	rm -rf outputs/runs outputs/sweeps outputs/figures
