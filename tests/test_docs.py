"""The README and docs/ hold together: every link between them resolves (file and heading),
every `make` target they name exists, every project file they cite is there, and every
Python example they give runs as written. Their CLI commands are run as written by
tests/test_readme_commands.py."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from support import platform_module

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
MAKE = re.compile(r"(?:^|\s)make ([a-z][\w-]*)")
PYTHON_EXAMPLE = re.compile(r"^( *)```python\n(.*?)^\1```", flags=re.MULTILINE | re.DOTALL)
CITED_FILE = re.compile(r"^(?:assets|resources|sensors|platform|demo|benchmarks|tests)/[\w/]+\.py$")


def prose(path: Path) -> str:
    """The document without its fenced code blocks (their `#` lines are not headings)."""
    return re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)


def anchor(heading: str) -> str:
    """The anchor a heading gets when the document is rendered (GitHub's rule)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in prose(path).splitlines() if line.startswith("#")}


def make_targets() -> set[str]:
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.MULTILINE))


def test_the_docs_exist_and_the_readme_opens_on_one_screen():
    names = {str(path.relative_to(PROJECT_ROOT / "docs")) for path in DOCS[1:]}
    assert {"architecture.md", "running.md", "operations.md", "patterns/README.md"} <= names
    # One page per pattern the README's table names.
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(re.findall(r"\(docs/patterns/[a-z-]+\.md\)", readme)) == 11
    assert len((PROJECT_ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_every_link_resolves_to_a_file_and_heading():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(prose(doc)):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, heading = target.partition("#")
            linked = (doc.parent / file).resolve() if file else doc
            if not linked.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif heading and (linked.suffix != ".md" or heading not in anchors(linked)):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


def test_every_make_target_and_project_file_the_docs_name_exists():
    targets = make_targets()
    missing = []
    for doc in DOCS:
        for code in CODE.findall(prose(doc)):
            missing += [f"{doc.name}: make {t}" for t in MAKE.findall(code) if t not in targets]
            path = code.split()[-1] if code.split() else ""
            if CITED_FILE.match(path) and not (PROJECT_ROOT / path).is_file():
                missing.append(f"{doc.name}: {path}")
    assert missing == []


def test_the_patterns_index_names_every_asset_and_its_page_names_the_asset(tmp_path):
    """docs/patterns/README.md's table holds every asset the definitions build, each in the
    row of the page that documents it, and that page names the asset's module."""
    definitions = platform_module("definitions").build_definitions(
        {"LAKEHOUSE_ROOT": str(tmp_path)}
    )
    graph = definitions.resolve_asset_graph()
    index = PROJECT_ROOT / "docs" / "patterns" / "README.md"
    pages = {}
    for row in prose(index).splitlines():
        if row.startswith("| [") and (page := LINK.search(row)):
            for name in CODE.findall(row):
                pages[name] = index.parent / page.group(1)
    assets = {key.to_user_string(): key for key in graph.materializable_asset_keys}
    assert set(assets) <= set(pages), "assets missing from the patterns index"
    for name, key in assets.items():
        [reference] = graph.get(key).metadata["dagster/code_references"].code_references
        module = Path(reference.file_path).relative_to(PROJECT_ROOT)
        text = pages[name].read_text(encoding="utf-8")
        assert f"`{name}`" in text, f"{pages[name].name} does not name {name}"
        assert module.as_posix() in text or module.parent.as_posix() + "/" in text, (
            f"{pages[name].name} does not name {module}"
        )


def test_every_python_example_in_the_docs_runs_as_written(tmp_path):
    """Each ```python block of the README and docs/, as a user pastes it: in a folder of
    its own (a relative `.data/...` is there, empty), with the project installed. It
    must exit 0, which also catches a library aborting the process at exit."""
    examples = [
        (doc.relative_to(PROJECT_ROOT), textwrap.dedent(code))
        for doc in DOCS
        for _, code in PYTHON_EXAMPLE.findall(doc.read_text(encoding="utf-8"))
    ]
    assert examples, "the docs give Python examples (docs/patterns/telemetry.md does)"
    for doc, code in examples:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{doc}: example fails:\n{code}\n{done.stderr[-3000:]}"
