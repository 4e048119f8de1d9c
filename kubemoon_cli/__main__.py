"""``python -m kubemoon_cli``: the same as the ``kubemoon`` command."""

from ._main import main

raise SystemExit(main())
