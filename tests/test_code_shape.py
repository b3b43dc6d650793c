"""The codebase's shape (issue 36): a thin ``train.py`` read in two screens, no module of the
package over about 500 lines and no function over about 60, so that each piece is read whole."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES, FUNCTION_LINES, TRAIN_LINES = 520, 60, 160


def lines(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n")


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES]


def test_train_py_reads_in_two_screens():
    assert lines(ROOT / "train.py") <= TRAIN_LINES


def test_no_module_of_the_package_is_over_about_500_lines():
    long = [f"{path.relative_to(ROOT)} ({lines(path)} lines)" for path in sorted((ROOT / "topk").rglob("*.py"))
            if lines(path) > MODULE_LINES]
    assert not long, long


def test_no_function_is_over_about_60_lines():
    long = [found for path in [ROOT / "train.py", *sorted((ROOT / "topk").rglob("*.py"))]
            for found in long_functions(path)]
    assert not long, long


def test_the_shape_checks_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES + 1))
    module = tmp_path / "long.py"
    module.write_text(f"def long():\n{body}\n", encoding="utf-8")
    assert long_functions(module, tmp_path) == [f"long.py:1 long ({FUNCTION_LINES + 2} lines)"]
