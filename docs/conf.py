"""Sphinx configuration for the KubeMoon docs (built by ``make docs`` with -W)."""

project = "KubeMoon"
author = "the KubeMoon team"
copyright = "2026, the KubeMoon team"
release = "0.1.0"

# Docstrings are reStructuredText (no Google or NumPy sections, so no napoleon).
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = True  # every cross-reference resolves; no suppressions
html_theme = "alabaster"
exclude_patterns = ["_build", "_generated"]

# The state diagrams (docs/diagrams/*.mmd) are generated from the machines' transition
# tables by scripts/state_diagrams.py; `make lint` and tests/unit/test_state_diagrams.py
# fail when one disagrees with its table.
import pathlib  # noqa: E402

_generated = pathlib.Path(__file__).parent / "_generated"
_generated.mkdir(exist_ok=True)


# -- Cross-references -------------------------------------------------------------------
# With nitpicky on, every reference must resolve, and each resolves to what it names: the
# standard library and the few third-party APIs our signatures use link to their docs; a
# short name (``DecodeError``) links to the one documented object of that name; a name a
# signature takes from a private module links to the public object it aliases, or, for a
# private type, type alias or TypeVar, is shown as its name; and the builtins (``type``)
# are kept from matching our kinds' ``.type`` fields.
import ast  # noqa: E402
import builtins  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
import typing  # noqa: E402

from docutils import nodes  # noqa: E402
from sphinx.pycode import ModuleAnalyzer  # noqa: E402
from sphinx.util.nodes import make_refnode  # noqa: E402

# Everything documented, imported before the schema metadata is left out of its types.
import configmirror  # noqa: E402, F401
import kubemoon_asyncio  # noqa: E402, F401
import kubemoon_cli  # noqa: E402, F401
import kubemoon_core.builtin  # noqa: E402, F401
import kubemoon_sync  # noqa: E402, F401
import kubemoon_testing  # noqa: E402, F401
import kubemoon_trio  # noqa: E402, F401

_PYTHON_DOCS = "https://docs.python.org/3/library/"
_THIRD_PARTY = {
    "trio": "https://trio.readthedocs.io/en/stable/reference-core.html#{target}",
    "httpcore": "https://www.encode.io/httpcore/network-backends/",
    "trustme": "https://trustme.readthedocs.io/en/latest/#{target}",
    "prometheus_client": "https://prometheus.github.io/client_python/",
}

# Third-party names our signatures import only for type checking.
_THIRD_PARTY_NAMES = {
    "CollectorRegistry": "https://prometheus.github.io/client_python/",
    "TracerProvider": "https://opentelemetry-python.readthedocs.io/en/latest/api/trace.html",
    "AbstractContextManager": f"{_PYTHON_DOCS}contextlib.html#contextlib.AbstractContextManager",
}


def _stdlib_page(target: str) -> str | None:
    """The docs.python.org page of a standard-library name, or None if it is not one."""
    parts = target.split(".")
    if parts[0] not in sys.stdlib_module_names:
        return None
    for end in range(len(parts), 0, -1):  # the longest importable module prefix
        module = ".".join(parts[:end])
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return f"{_PYTHON_DOCS}{module}.html" + (f"#{target}" if end < len(parts) else "")
    return None


def _type_variable(target: str) -> bool:
    module, _, name = target.rpartition(".")
    try:
        return isinstance(getattr(importlib.import_module(module), name), typing.TypeVar)
    except (ImportError, AttributeError, ValueError):
        return False


def _resolve_outside(app, env, node, contnode):  # type: ignore[no-untyped-def]
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    url = _stdlib_page(target)
    top = target.split(".", 1)[0]
    if url is None and top in _THIRD_PARTY:
        url = _THIRD_PARTY[top].format(target=target)
    if url is None and target in _THIRD_PARTY_NAMES:
        url = _THIRD_PARTY_NAMES[target]
    if url is not None:
        return nodes.reference("", "", contnode, refuri=url, internal=False)
    if _type_variable(target):
        return contnode
    found = _our_runtime_object(app, env, node, contnode)
    return found if found is not None else _unique_public_object(app, env, node, contnode)


def _our_runtime_object(app, env, node, contnode):  # type: ignore[no-untyped-def]
    # A name a signature takes from one of our private modules: an import alias of a public
    # object (``EventMachine`` for EventRecorder) links to that object; a private class,
    # type alias or TypeVar (``_Entry``, ``Items``, ``T``) is shown as its name.
    target = node["reftarget"]
    if "." in target:
        module_name, _, name = target.rpartition(".")
        module = sys.modules.get(module_name)
        candidates = [vars(module)[name]] if module and name in vars(module) else []
    else:
        candidates = [
            vars(module)[target]
            for module_name, module in list(sys.modules.items())
            if module_name.startswith(_OURS) and "._" in module_name and target in vars(module)
        ]
    domain = env.get_domain("py")
    for value in candidates:
        path = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if path in domain.objects:
            entry = domain.objects[path]
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode)
    return contnode if candidates else None


_OURS = ("kubemoon_", "configmirror")


def _unique_public_object(app, env, node, contnode):  # type: ignore[no-untyped-def]
    # A short name in a docstring (``DecodeError``) that names exactly one documented object
    # of the project: the link the author meant, wherever the object moved.
    target = node["reftarget"].lstrip("~.")
    suffix = "." + target
    domain = env.get_domain("py")
    found = [
        name
        for name in domain.objects
        if name.endswith(suffix) and name.startswith(_OURS) and "._" not in name
    ]
    if len(found) != 1:
        return None
    obj = domain.objects[found[0]]
    return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, found[0])


def _builtins_are_not_fields(app, doctree):  # type: ignore[no-untyped-def]
    # A signature's ``type`` is looked up fuzzily and would match every ``Event.type``;
    # looked up exactly, it falls through to Sphinx's resolver for builtins.
    for node in doctree.findall(lambda n: n.tagname == "pending_xref"):
        target = node.get("reftarget", "")
        if node.get("refdomain") == "py" and hasattr(builtins, target):
            node.attributes.pop("refspecific", None)


def _schema_metadata_left_out_of_types() -> None:
    # Declared kinds annotate fields with Annotated[T, JsonName(...), Length(...)]: schema
    # details, which Sphinx would render as references to names such as ``podIP``. The docs
    # show each field's Python type; the JSON names are in the generated field docs.
    for name, module in list(sys.modules.items()):
        if not name.startswith(("kubemoon_", "configmirror")):
            continue
        for obj in list(vars(module).values()):
            own = getattr(obj, "__dict__", {}).get("__annotations__")
            if not isinstance(obj, type) or obj.__module__ != name or not own:
                continue
            try:
                hints = typing.get_type_hints(obj)  # include_extras=False drops Annotated
            except Exception:  # a class whose hints need names imported for type checking
                continue
            obj.__annotations__ = {key: hints.get(key, value) for key, value in own.items()}


# Constants have no ``__module__``, so autodoc leaves out those a namespace re-exports. Each
# namespace page includes a generated list of its constants, documented by the ``#:``
# comment where they are defined.
_CONSTANT_NAMESPACES = [
    "kubemoon_core",
    "kubemoon_core.errors",
    "kubemoon_core.typed",
    "kubemoon_core.objects",
    "kubemoon_core.predicates",
    "kubemoon_core.webhooks",
    "kubemoon_core.sharding",
    "kubemoon_core.kubeconfig",
    "kubemoon_core.rbac",
    "kubemoon_core.json_backends",
    "kubemoon_core.lowlevel",
    "kubemoon_io",
    "kubemoon_trio",
    "kubemoon_testing",
]


def _defining_modules(namespace: str) -> dict[str, str]:
    """Each name ``namespace`` imports, mapped to the module it imports it from."""
    module = importlib.import_module(namespace)
    tree = ast.parse(pathlib.Path(module.__file__).read_text(encoding="utf-8"))
    package = namespace if module.__file__.endswith("__init__.py") else namespace.rpartition(".")[0]
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            source = importlib.util.resolve_name("." * node.level + node.module, package)
            for alias in node.names:
                found[alias.asname or alias.name] = source
    return found


def _constants_page(namespace: str) -> str:
    module = importlib.import_module(namespace)
    sources = _defining_modules(namespace)
    lines = []
    for name in module.__all__:
        value = getattr(module, name)
        if callable(value) or isinstance(value, (type, typing.TypeVar, type(module))):
            continue
        if not name.isupper():
            continue
        source = sources.get(name, namespace)
        docs = ModuleAnalyzer.for_module(source).find_attr_docs().get(("", name), [])
        shown = repr(value)
        lines += [f".. py:data:: {name}", f"   :module: {namespace}"]
        if len(shown) <= 80 and "\n" not in shown:
            lines.append(f"   :value: {shown}")
        lines.append("")
        lines += [f"   {line}" if line else "" for line in docs] or ["   A constant."]
        lines.append("")
    return "\n".join(lines) + "\n"


def _write_constant_pages(app):  # type: ignore[no-untyped-def]
    for namespace in _CONSTANT_NAMESPACES:
        page = _generated / f"constants-{namespace}.rst"
        text = _constants_page(namespace)
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            page.write_text(text, encoding="utf-8")


def setup(app):  # type: ignore[no-untyped-def]
    _schema_metadata_left_out_of_types()
    app.connect("builder-inited", _write_constant_pages)
    app.connect("missing-reference", _resolve_outside)
    app.connect("doctree-read", _builtins_are_not_fields)
