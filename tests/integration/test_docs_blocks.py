"""Every code block in README.md and docs/*.rst runs, or says it does not.

The convention (docs/index.rst, "Code in these pages"):

- reStructuredText: code is in ``.. code-block:: LANG`` directives; a block that is not
  run carries ``:class: no-run``. Bare ``::`` literal blocks are refused here, so every
  block states its language and whether it runs.
- Markdown: a fenced block's info string is the language, then ``no-run`` if it is not run
  (```` ```sh no-run ````).
- A block quoted from a file names it: ```` ```python from=examples/widgets/controller.py ````
  in Markdown (reStructuredText uses ``literalinclude``, which Sphinx reads from the file
  itself). Such a block is not run here; it must be a run of whole lines of that file
  (compared after removing their common indent), and the file is what its own tests run.
- Every other block must be ``python`` (or ``pycon``, a doctest session): each page's
  blocks run in order in one namespace, as a reader would paste them, with top-level
  ``await`` on trio, ``KUBECONFIG`` pointing at the session's real apiserver, and
  ``kube_apiserver`` and ``kube_namespace`` defined. A ``pycon`` block's output must match.
  A ``test_*`` function a block defines is then called as pytest would, with those two as
  fixtures: on asyncio if it is marked ``@pytest.mark.asyncio``, on trio if it is async.
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import functools
import inspect
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from tracing_support import forget_global_tracer_provider

from kubemoon_testing import ApiServer

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]
RUNNABLE = {"python", "pycon"}
NO_RUN = "no-run"
FROM = "from="

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.M | re.S)
_DIRECTIVE = re.compile(r"^(\s*)\.\. code-block::\s*(\S*)\s*$")
_OPTION = re.compile(r"^\s+:([\w-]+):\s*(.*)$")


@dataclass(frozen=True)
class Block:
    """One code block of a page."""

    page: Path
    line: int
    language: str
    no_run: bool
    code: str
    bare: bool = False
    source: str | None = None  # the file a quoted block comes from

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.language or 'no language'})"


def _markdown_blocks(page: Path) -> Iterator[Block]:
    text = page.read_text(encoding="utf-8")
    for match in _FENCE.finditer(text):
        words = match.group(1).split()
        line = text.count("\n", 0, match.start()) + 1
        language = words[0] if words else ""
        source = next((w[len(FROM) :] for w in words[1:] if w.startswith(FROM)), None)
        no_run = NO_RUN in words[1:] or source is not None
        yield Block(page, line, language, no_run, match.group(2), source=source)


def _indented_block(lines: list[str], start: int, base: int) -> tuple[str, int]:
    """The lines indented deeper than ``base`` from ``start`` on, dedented; and the end."""
    end = start
    while end < len(lines) and (
        not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > base
    ):
        end += 1
    body = lines[start:end]
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    indents = [len(line) - len(line.lstrip()) for line in body if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] for line in body) + "\n", end


def _rst_blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        directive = _DIRECTIVE.match(lines[i])
        stripped = lines[i].strip()
        if directive is not None:
            base = len(directive.group(1))
            options: dict[str, str] = {}
            j = i + 1
            while j < len(lines) and (option := _OPTION.match(lines[j])):
                options[option.group(1)] = option.group(2)
                j += 1
            code, end = _indented_block(lines, j, base)
            no_run = NO_RUN in options.get("class", "").split()
            yield Block(page, i + 1, directive.group(2), no_run, code)
            i = end
        elif stripped.endswith("::") and not stripped.startswith(".."):
            base = len(lines[i]) - len(lines[i].lstrip())
            code, end = _indented_block(lines, i + 1, base)
            yield Block(page, i + 1, "", False, code, bare=True)
            i = end
        elif stripped.startswith(".. ") and "::" in stripped:
            # Another directive (toctree, autoclass...): skip its indented content.
            base = len(lines[i]) - len(lines[i].lstrip())
            _, i = _indented_block(lines, i + 1, base)
        else:
            i += 1


def blocks(page: Path) -> list[Block]:
    """Every code block of ``page``, in order."""
    return list(_markdown_blocks(page) if page.suffix == ".md" else _rst_blocks(page))


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


@pytest.fixture(autouse=True)
def _no_global_tracing_left() -> Iterator[None]:
    """A page may turn tracing on for the process (observability.rst does): not for later tests."""
    yield
    forget_global_tracer_provider()


def test_the_collector_sees_every_kind_of_block(tmp_path: Path) -> None:
    rst = tmp_path / "page.rst"
    rst.write_text(
        "Title\n=====\n\nText::\n\n   bare = 1\n\n.. toctree::\n   :maxdepth: 2\n\n   x\n\n"
        ".. code-block:: python\n   :class: no-run\n\n   a = 1\n\n   b = 2\n\n"
        "* item\n\n  .. code-block:: sh\n\n     make test\n"
    )
    found = blocks(rst)
    assert [(b.line, b.language, b.no_run, b.bare) for b in found] == [
        (4, "", False, True),
        (13, "python", True, False),
        (22, "sh", False, False),
    ]
    assert found[1].code == "a = 1\n\nb = 2\n"
    assert found[2].code == "make test\n"
    md = tmp_path / "page.md"
    md.write_text("# T\n\n```sh no-run\nmake demo\n```\n\n```python\nx = 1\n```\n")
    assert [(b.line, b.language, b.no_run, b.code) for b in blocks(md)] == [
        (3, "sh", True, "make demo\n"),
        (7, "python", False, "x = 1\n"),
    ]


def test_every_block_is_run_or_marked_not_runnable() -> None:
    assert len(ALL_BLOCKS) > 30, "the collector lost the pages' blocks"
    bare = [str(b) for b in ALL_BLOCKS if b.bare]
    assert not bare, f"bare :: blocks, write `.. code-block:: LANG`: {bare}"
    unmarked = [str(b) for b in ALL_BLOCKS if not b.no_run and b.language not in RUNNABLE]
    assert not unmarked, f"neither python nor marked `no-run`: {unmarked}"


def _is_quoted_from(code: str, text: str) -> bool:
    """Whether ``code`` is a run of whole lines of ``text``, up to their common indent."""
    wanted = code.splitlines()
    lines = text.splitlines()
    for start in range(len(lines) - len(wanted) + 1):
        window = lines[start : start + len(wanted)]
        if textwrap.dedent("\n".join(window)) == "\n".join(wanted):
            return True
    return False


def test_a_quoted_block_is_checked_against_its_file(tmp_path: Path) -> None:
    text = "def main():\n    x = 1\n    y = 2\n    return x + y\n"
    assert _is_quoted_from("x = 1\ny = 2\n", text)
    assert _is_quoted_from("def main():\n    x = 1\n", text)
    assert not _is_quoted_from("x = 1\ny = 3\n", text)
    assert not _is_quoted_from("x = 1\n    y = 2\n", text)  # the indent is the file's
    md = tmp_path / "page.md"
    md.write_text("```python from=a/b.py\nx = 1\n```\n")
    (found,) = blocks(md)
    assert (found.source, found.no_run, found.code) == ("a/b.py", True, "x = 1\n")


QUOTED = [b for b in ALL_BLOCKS if b.source is not None]


@pytest.mark.parametrize("block", QUOTED, ids=str)
def test_every_quoted_block_is_what_its_file_says(block: Block) -> None:
    assert block.source is not None
    path = ROOT / block.source
    assert path.is_file(), f"{block} quotes {block.source}, which does not exist"
    text = path.read_text(encoding="utf-8")
    assert _is_quoted_from(block.code, text), f"{block} is not what {block.source} says"


def test_the_readme_quotes_the_widget_operator() -> None:
    assert {b.source for b in QUOTED if b.page.name == "README.md"} == {
        "examples/widgets/controller.py"
    }


def _run_python(code: str, namespace: dict[str, Any], where: str) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:

        async def main() -> None:
            await eval(compiled, namespace)

        trio.run(main)
    else:
        exec(compiled, namespace)


def _run_pycon(code: str, namespace: dict[str, Any], where: str) -> None:
    test = doctest.DocTestParser().get_doctest(code, namespace, where, where, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out: list[str] = []
    result = runner.run(test, out=out.append, clear_globs=False)
    assert result.failed == 0, "".join(out)


def _call_tests(namespace: dict[str, Any], before: set[str], where: str) -> int:
    """Call the ``test_*`` functions defined since ``before``; return how many."""
    called = 0
    for name, func in list(namespace.items()):
        if name in before or not name.startswith("test_") or not inspect.isfunction(func):
            continue
        kwargs = {p: namespace[p] for p in inspect.signature(func).parameters}
        marks = {mark.name for mark in getattr(func, "pytestmark", [])}
        if "asyncio" in marks:
            asyncio.run(func(**kwargs))
        elif inspect.iscoroutinefunction(func):
            trio.run(functools.partial(func, **kwargs))
        else:
            func(**kwargs)
        called += 1
    return called


RUN_PAGES = sorted({b.page for b in ALL_BLOCKS if not b.no_run and not b.bare})


@pytest.mark.integration
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.name)
def test_the_pages_code_runs(
    page: Path,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube_apiserver.kubeconfig_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.chdir(ROOT)
    namespace: dict[str, Any] = {
        "__name__": f"docs_{page.stem}",
        "kube_apiserver": kube_apiserver,
        "kube_namespace": kube_namespace,
        "tmp_path": tmp_path,
    }
    called = 0
    for block in blocks(page):
        if block.no_run or block.bare:
            continue
        where = str(block)
        before = set(namespace)
        try:
            if block.language == "pycon":
                _run_pycon(block.code, namespace, where)
            else:
                _run_python(block.code, namespace, where)
            called += _call_tests(namespace, before, where)
        except BaseException as exc:
            raise AssertionError(f"{where} failed: {exc!r}\n{block.code}") from exc
    defined = [name for name in namespace if name.startswith("test_")]
    assert called == len(defined), f"not every test_ function ran: {defined}"
    print(f"{page.name}: {called} test functions ran")
