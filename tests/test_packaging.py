"""What the wheel holds and what pyproject.toml claims, kept in step with what `make wheel-check`
tests (it builds the wheel and runs the losses' tests against it: too slow for the suite)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def check_pythons() -> list[tuple[str, list[str]]]:
    """Makefile's CHECK_PYTHONS as (version, requirements) pairs."""
    line = re.search(r"^CHECK_PYTHONS \?= (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    return [(spec.split(":")[0], spec.split(":")[1].split(",") if ":" in spec else []) for spec in line.split()]


def test_every_data_file_of_the_package_is_in_the_wheel():
    package_data = PYPROJECT["tool"]["setuptools"]["package-data"]
    missing = []
    for path in sorted((ROOT / "topk").rglob("*")):
        if path.is_dir() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
            continue
        package_dir = path.parent
        while not (package_dir / "__init__.py").exists() or not any(
                fnmatch.fnmatch(path.relative_to(package_dir).as_posix(), pattern)
                for pattern in package_data.get(".".join(package_dir.relative_to(ROOT).parts), [])):
            if package_dir == ROOT / "topk":
                missing.append(path.relative_to(ROOT).as_posix())
                break
            package_dir = package_dir.parent
    assert not missing, f"not in [tool.setuptools.package-data], so not in the wheel: {missing}"


def test_the_declared_lower_bounds_are_the_tested_ones():
    pythons = check_pythons()
    oldest_python = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert pythons[0][0] == oldest_python
    classified = sorted(c.rsplit(" ", 1)[1] for c in PYPROJECT["project"]["classifiers"]
                        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert pythons[-1][0] == max(classified, key=lambda v: tuple(map(int, v.split("."))))
    assert sorted({version for version, _ in pythons} | {"3.11"}) == classified  # make test runs 3.11
    torch = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("torch"))
    assert re.fullmatch(r"torch>=\d+\.\d+", torch), f"{torch}: one lower bound, no upper cap"
    tested_torch = next(r for r in pythons[0][1] if r.startswith("torch=="))
    assert tested_torch.removeprefix("torch==").startswith(torch.removeprefix("torch>=") + ".")
