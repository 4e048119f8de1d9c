"""The release version: one source, copied where packaging needs it, checked by make lint.

The version lives in ``kubemoon_core/__init__.py`` (``__version__``); the library's
pyproject.toml reads it from there (``dynamic``). ConfigMirror is released with the library
at the same version, so ``configmirror/pyproject.toml`` carries it twice (its ``version``
and its ``kubemoon>=`` requirement); CHANGELOG.md has a section per release. Works on a
fresh clone without network or git tags.

Usage::

    python scripts/version.py                 # print the version
    python scripts/version.py check           # every copy agrees, CHANGELOG has a section
    python scripts/version.py check --tag v0.2.0   # ... and the tag is this version
    python scripts/version.py bump 0.2.0      # rewrite every copy; Unreleased -> 0.2.0
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "kubemoon_core" / "__init__.py"
CONFIGMIRROR = ROOT / "configmirror" / "pyproject.toml"
CHANGELOG = ROOT / "CHANGELOG.md"
# PEP 440 public versions of the forms this project uses: 1.2.3, 1.2.3rc1, 1.2.3.post1.
VERSION = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
_SOURCE_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
_CM_VERSION = re.compile(r'^version = "(?P<version>[^"]+)"$', re.M)
# The library requirement, with or without extras: "kubemoon[webhooks]>=0.1.0".
_CM_PIN = re.compile(r'"kubemoon(?P<extras>\[[a-z,]+\])?>=(?P<version>[^",]+)"')
_UNRELEASED = "## Unreleased"


class VersionError(Exception):
    """A copy of the version disagrees, or a new version is not valid."""


def current() -> str:
    """The version in kubemoon_core/__init__.py."""
    found = _SOURCE_LINE.search(SOURCE.read_text(encoding="utf-8"))
    if found is None:
        raise VersionError(f'{SOURCE}: no `__version__ = "..."` line')
    return found.group(1)


def problems(tag: str | None = None) -> list[str]:
    """Every way the copies, CHANGELOG.md and ``tag`` disagree with :func:`current`."""
    version = current()
    found: list[str] = []
    if not VERSION.match(version):
        found.append(f"{SOURCE}: {version!r} is not a release version (1.2.3, 1.2.3rc1)")
    text = CONFIGMIRROR.read_text(encoding="utf-8")
    for pattern, what in ((_CM_VERSION, "version"), (_CM_PIN, "kubemoon>= requirement")):
        match = pattern.search(text)
        if match is None or match.group("version") != version:
            got = match.group("version") if match else "nothing"
            found.append(f"{CONFIGMIRROR}: {what} is {got}, expected {version}")
    changelog = CHANGELOG.read_text(encoding="utf-8")
    if not re.search(rf"^## \[{re.escape(version)}\]", changelog, re.M):
        found.append(f"{CHANGELOG}: no `## [{version}]` section")
    if tag is not None and tag != f"v{version}":
        found.append(f"tag {tag!r} is not v{version}: run `scripts/version.py bump` first")
    return found


def bump(new: str, today: datetime.date) -> None:
    """Set every copy to ``new`` and turn CHANGELOG's Unreleased section into ``new``'s."""
    if not VERSION.match(new):
        raise VersionError(f"{new!r} is not a release version (1.2.3, 1.2.3rc1)")
    old = current()
    if new == old:
        raise VersionError(f"the version is already {new}")
    changelog = CHANGELOG.read_text(encoding="utf-8")
    if _UNRELEASED not in changelog:
        raise VersionError(f"{CHANGELOG}: no `{_UNRELEASED}` section to release")
    SOURCE.write_text(
        _SOURCE_LINE.sub(f'__version__ = "{new}"', SOURCE.read_text(encoding="utf-8"), count=1),
        encoding="utf-8",
    )
    text = CONFIGMIRROR.read_text(encoding="utf-8")
    text = _CM_VERSION.sub(f'version = "{new}"', text, count=1)
    text = _CM_PIN.sub(lambda m: f'"kubemoon{m["extras"] or ""}>={new}"', text, count=1)
    CONFIGMIRROR.write_text(text, encoding="utf-8")
    heading = f"{_UNRELEASED}\n\n## [{new}] - {today.isoformat()}"
    CHANGELOG.write_text(changelog.replace(_UNRELEASED, heading, 1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description="Print, check or bump the release version.")
    commands = parser.add_subparsers(dest="command")
    check = commands.add_parser("check", help="every copy agrees with kubemoon_core")
    check.add_argument("--tag", help="the git tag being released (vX.Y.Z)")
    bump_cmd = commands.add_parser("bump", help="set a new version everywhere")
    bump_cmd.add_argument("version")
    args = parser.parse_args(argv)
    try:
        if args.command == "bump":
            bump(args.version, datetime.date.today())
            print(f"version {args.version}; review CHANGELOG.md, commit, tag v{args.version}")
        elif args.command == "check":
            found = problems(args.tag)
            for problem in found:
                print(f"version: {problem}", file=sys.stderr)
            return 1 if found else 0
        else:
            print(current())
    except (VersionError, OSError) as exc:
        print(f"version: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
