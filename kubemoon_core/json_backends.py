"""The JSON backends that decode and encode objects (the standard library, orjson, msgspec)."""

from ._json import (
    json_backend,
    set_json_backend,
    use_fast_json,
    use_msgspec_json,
    use_standard_json,
)
from ._public import publish
from ._typed_json import decode_json, use_msgspec

__all__ = [
    "decode_json",
    "json_backend",
    "set_json_backend",
    "use_fast_json",
    "use_msgspec",
    "use_msgspec_json",
    "use_standard_json",
]

publish(__name__, globals(), __all__)
