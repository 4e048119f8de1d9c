"""Every error KubeMoon raises: the apiserver's answers by reason, protocol errors, and the
runtime's.
"""

from ._client_config import ConfigError
from ._conversion import ConversionError
from ._declare import SchemaError
from ._errors import DecodeError, LocalProtocolError, RemoteProtocolError
from ._gate import AuthorityLost
from ._jsonpatch import JSONPatchError
from ._public import publish
from ._resources import NamespaceRequired
from ._restmapper import NoMatchError
from ._runtime_errors import (
    CacheSyncTimeout,
    LeaderElectionTimeout,
    LeadershipLost,
    MissingPermissions,
    PermissionCheckFailed,
)
from ._shard import ShardSelectorError
from ._status import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    InternalError,
    Invalid,
    MethodNotAllowed,
    NotFound,
    RedirectRefused,
    ResourceNotServed,
    ServerTimeout,
    ServiceUnavailable,
    Status,
    StatusCause,
    TooManyRequests,
    Unauthorized,
)
from ._typed import TypedDecodeError

__all__ = [
    "AlreadyExists",
    "AuthorityLost",
    "BadRequest",
    "CacheSyncTimeout",
    "ConfigError",
    "Conflict",
    "ConversionError",
    "DecodeError",
    "Expired",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "JSONPatchError",
    "LeaderElectionTimeout",
    "LeadershipLost",
    "LocalProtocolError",
    "MissingPermissions",
    "MethodNotAllowed",
    "NamespaceRequired",
    "NoMatchError",
    "NotFound",
    "PermissionCheckFailed",
    "RedirectRefused",
    "RemoteProtocolError",
    "ResourceNotServed",
    "SchemaError",
    "ServerTimeout",
    "ServiceUnavailable",
    "ShardSelectorError",
    "Status",
    "StatusCause",
    "TooManyRequests",
    "TypedDecodeError",
    "Unauthorized",
]

publish(__name__, globals(), __all__)
