"""Claims the docs make about numbers that live elsewhere: each is checked at its source.

A page that states a minimum version or a duration says what the code or the packaging
does; when one changes, this test names the page that has gone stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TESTING = ROOT / "docs" / "testing.rst"


def _pip_minimums(text: str) -> set[str]:
    return set(re.findall(r"pip (\d+\.\d+) or newer", text.replace("*", "")))


def test_the_minimum_pip_is_stated_alike_wherever_a_git_url_install_is_shown() -> None:
    pages = [README, TESTING]
    stated = {page.name: _pip_minimums(page.read_text(encoding="utf-8")) for page in pages}
    assert all(stated.values()), f"a page shows the git URL install without its pip: {stated}"
    assert len(set().union(*stated.values())) == 1, f"the pages disagree: {stated}"


@pytest.mark.parametrize("page", [README, TESTING], ids=lambda p: p.name)
def test_the_cold_build_time_matches_what_the_build_itself_says(page: Path) -> None:
    source = (ROOT / "kubemoon_testing" / "_testenv.py").read_text(encoding="utf-8")
    (said,) = set(re.findall(r"about (\d+) minutes on 2 idle", source))
    claims = re.findall(r"about (\d+) minutes on two idle cores", page.read_text("utf-8"))
    assert set(claims) <= {said}, f"{page.name} says {claims} minutes, the build says {said}"
    if page == TESTING:
        assert claims, "testing.rst no longer states the cold build time"


def test_no_page_sends_users_to_an_extra_that_adds_nothing() -> None:
    pages = [README, *sorted((ROOT / "docs").glob("*.rst"))]
    offenders = [p.name for p in pages if "kubemoon[operator]" in p.read_text("utf-8")]
    assert not offenders, f"the operator extra adds nothing; these pages still name it: {offenders}"
