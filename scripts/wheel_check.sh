#!/usr/bin/env bash
# `make wheel-check`: the package as a user installs it. `python -m build` makes the sdist and the
# wheel (into DIST, outputs/dist/ by default), `twine check --strict` reads their metadata; then,
# for each Python given (VERSION, or VERSION:REQUIREMENT,... to install those beside the wheel,
# e.g. 3.10:torch==2.3.1,numpy==1.26.4), the wheel is installed into a new virtual environment
# outside the checkout, the README's loop with the losses runs there, and so do the library's tests
# (LIBRARY_TESTS: the losses', which need torch and numpy only) against the installed package.
# Usage: PY=.venv/bin/python bash scripts/wheel_check.sh 3.10:torch==2.3.1,numpy==1.26.4 3.13
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PY=${PY:-.venv/bin/python}
LIBRARY_TESTS=${LIBRARY_TESTS:-tests/test_losses_*.py tests/test_loss_edges.py tests/test_loss_weights.py
tests/test_numerics.py tests/test_esp.py tests/test_functional.py}
# Among those, the ones that build a loss from a config the way train.py does: they need the
# `train` extra (OmegaConf), which the wheel alone does not install.
TRAINING_STACK_TESTS=test_train_names_the_config_group_around_the_argument

# The interpreter of Python VERSION: pythonVERSION on the PATH, else pyenv's newest VERSION.x.
find_python() {
    local version=$1 candidate
    if command -v "python$version" > /dev/null && "python$version" -c "" 2> /dev/null; then
        command -v "python$version"
        return
    fi
    if command -v pyenv > /dev/null; then
        candidate=$(ls -d "$(pyenv root)/versions/$version".*/bin/"python$version" 2> /dev/null | sort -V | tail -n 1 || true)
        if [ -n "$candidate" ]; then
            echo "$candidate"
            return
        fi
    fi
    echo "Error: Python $version is not installed here; install it (pyenv install $version) or name" \
         "the ones to check (make wheel-check CHECK_PYTHONS='3.11 3.12')." >&2
    return 1
}

# Every Python found before anything is built.
for spec in "$@"; do
    find_python "${spec%%:*}" > /dev/null
done

DIST=$(mkdir -p "${DIST:-outputs/dist}" && cd "${DIST:-outputs/dist}" && pwd)
rm -f "$DIST"/topk-*
"$PY" -m build --quiet --outdir "$DIST" .
"$PY" -m twine check --strict "$DIST"/topk-*
wheel=$(ls "$DIST"/topk-*.whl)

work=$(mktemp -d "${TMPDIR:-/tmp}/topk-wheel-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
# The README's loop with the losses alone, as tests/test_package.py finds it.
"$PY" - "$work/readme_loop.py" << 'EOF'
import sys
readme = open("README.md").read()
start = readme.index("```python\nimport torch\nfrom topk import SmoothTopKSVM")
code = readme[start + len("```python\n"):readme.index("```", start + 3)]
with open(sys.argv[1], "w") as out:
    out.write(code + "\nassert torch.isfinite(loss), loss\nprint(f'README loop: loss {loss.item():.4f}')\n")
EOF

for spec in "$@"; do
    version=${spec%%:*}
    requirements=$([ "$spec" = "$version" ] || echo "${spec#*:}" | tr , " ")
    python=$(find_python "$version")  # found above
    venv="$work/venv-$version"
    "$python" -m venv "$venv"
    started=$(date +%s)
    # shellcheck disable=SC2086  # the requirements are words
    "$venv/bin/python" -m pip install --quiet "$wheel" $requirements pytest
    echo "Python $version: the wheel with torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')" \
         "and numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)') installed in $(( $(date +%s) - started )) s"
    cd "$work"
    "$venv/bin/python" -c "import topk; assert '$root' not in topk.__file__, topk.__file__"
    "$venv/bin/python" readme_loop.py
    # shellcheck disable=SC2086  # LIBRARY_TESTS is a list of globs
    OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest -c /dev/null \
        --rootdir "$work" -o "markers=slow" -m "not slow" -k "not $TRAINING_STACK_TESTS" $(cd "$root" && ls $LIBRARY_TESTS | sed "s|^|$root/|")
    cd "$root"
    rm -rf "$venv"
done
