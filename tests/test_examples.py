"""The gallery's scripts are sphinx-gallery examples (the docs build runs them).

Cheap checks of their form only: each ``plot_*.py`` opens with a docstring
whose first line is an RST title, imports only installed packages (never the
test suite's helpers), and every folder of examples has its README.txt.
"""

import ast
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(EXAMPLES.rglob("plot_*.py"))


def test_the_gallery_has_examples_and_headers():
    assert (EXAMPLES / "README.txt").is_file()
    assert len(SCRIPTS) >= 10
    for folder in {script.parent for script in SCRIPTS}:
        assert (folder / "README.txt").is_file(), folder.relative_to(EXAMPLES)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_an_example_opens_with_an_rst_title(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring, f"{script.name} has no docstring"
    lines = docstring.strip("\n").splitlines()
    title, underline = lines[0], lines[1]
    assert title.strip() and set(underline) == {"="} and len(underline) >= len(title), script.name
    assert len(lines) > 3 and not lines[2].strip(), f"{script.name}: no text under the title"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_an_example_imports_no_test_helper(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    modules = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [m for m in modules if m == "tests" or m.startswith("tests.")], script.name
