"""Process limits a server raises at start: the soft open-file limit.

Rules: best effort and idempotent; never lowers a limit; reports what it found and did.
"""

from __future__ import annotations

import logging

__all__ = ["raise_open_file_limit"]

logger = logging.getLogger("kubemoon.limits")

# The soft limit asked for when the hard limit is unlimited (the kernel default nr_open).
_UNLIMITED_TARGET = 1048576


def raise_open_file_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the soft limit now in force.

    A container's default soft limit (often 1024, sometimes 256) is what a flood of idle
    sockets exhausts first, while the hard limit is usually far higher. Returns ``None``
    where the platform has no such limit (Windows); a refusal by the kernel is logged and
    leaves the limit as it was.
    """
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Linux caps open files at fs.nr_open even when the hard limit reads "unlimited".
    target = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        logger.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft
    logger.debug("raised the open-file limit from %d to %d", soft, target)
    return target
