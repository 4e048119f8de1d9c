"""Sphinx configuration for the KubeMoon docs (built by ``make docs`` with -W)."""

project = "KubeMoon"
author = "the KubeMoon team"
copyright = "2026, the KubeMoon team"
release = "0.1.0"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
suppress_warnings = ["ref.python"]

# The reflector's state diagram is generated from its transition table at every build, so
# the docs cannot drift from the code.
import pathlib  # noqa: E402

from kubemoon_core.lowlevel import Reflector  # noqa: E402

_generated = pathlib.Path(__file__).parent / "_generated"
_generated.mkdir(exist_ok=True)
(_generated / "reflector.mmd").write_text(Reflector.diagram() + "\n", encoding="utf-8")
