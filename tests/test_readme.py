"""The README's commands and example stay true."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text(encoding="utf-8").splitlines()[:12]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_readme_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


# A gin binding as the docs write it: `name.parameter = value` in backticks, or a --gin_bindings argument.
_BINDING = re.compile(
    r"`([a-z_]+\.[a-z_]+\s?=\s?[^`]+)`|--gin_bindings[ =](?:'([^']+)'|\"([^\"]+)\"|([^\s'\"]+))"
)


def _doc_bindings() -> dict[str, list[str]]:
    """Every gin binding quoted in README.md, docs/ and configs/**/README.md, by file."""
    root = README.parent
    files = [README, *sorted((root / "docs").glob("*.md")), *sorted((root / "configs").rglob("README.md"))]
    found = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        bindings = [" ".join("".join(groups).split()) for groups in _BINDING.findall(text)]  # unwrap lines
        if bindings:
            found[str(path.relative_to(root))] = bindings
    return found


def test_every_gin_binding_in_the_docs_is_accepted() -> None:
    import gin

    from sit_keras.agents import train

    found = _doc_bindings()
    assert sum(len(b) for b in found.values()) >= 12 and any(f.startswith("configs/") for f in found)
    for path, bindings in found.items():
        for binding in bindings:
            gin.clear_config()
            try:
                train.parse_gin([], [binding])
            except ValueError as error:
                raise AssertionError(f"{path}: {binding!r} is refused: {error}") from None
    gin.clear_config()
