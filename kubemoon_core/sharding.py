"""Sharding: hash ranges, owner buckets and the member Leases that divide them."""

from ._barrier import DEFAULT_BARRIER_GRACE, BarrierState, CacheProgress, FreshnessBarrier
from ._member_leases import (
    CLAIMS_ANNOTATION,
    GROUP_LABEL,
    LEAVING_ANNOTATION,
    MemberRecord,
    decode_claims,
    encode_claims,
    member_lease,
    member_record_from_lease,
)
from ._membership import (
    MemberInput,
    MemberState,
    RangeInput,
    RangeState,
    ShardMember,
    assign_ranges,
)
from ._public import publish
from ._request import shard_probe_request, sharding_enabled
from ._shard import HASH_SPACE, ShardField, ShardRange, ShardSelector, fnv1a_64, shard_hash
from ._sharded import (
    OWNER_BUCKET_BITS,
    OWNER_BUCKET_LABEL,
    OWNER_BUCKETS,
    ShardedKeys,
    bucket_range,
    buckets_of,
    owner_bucket,
    owner_bucket_label,
    owner_bucket_selector,
)

__all__ = [
    "assign_ranges",
    "BarrierState",
    "CacheProgress",
    "DEFAULT_BARRIER_GRACE",
    "FreshnessBarrier",
    "bucket_range",
    "buckets_of",
    "CLAIMS_ANNOTATION",
    "decode_claims",
    "encode_claims",
    "fnv1a_64",
    "GROUP_LABEL",
    "HASH_SPACE",
    "LEAVING_ANNOTATION",
    "member_lease",
    "member_record_from_lease",
    "MemberInput",
    "MemberRecord",
    "MemberState",
    "owner_bucket",
    "OWNER_BUCKET_BITS",
    "owner_bucket_label",
    "OWNER_BUCKET_LABEL",
    "owner_bucket_selector",
    "OWNER_BUCKETS",
    "RangeInput",
    "RangeState",
    "shard_hash",
    "shard_probe_request",
    "ShardedKeys",
    "ShardField",
    "sharding_enabled",
    "ShardMember",
    "ShardRange",
    "ShardSelector",
]

publish(__name__, globals(), __all__)
