"""A full or read-only disk while writing an output: one message naming the output, never a traceback."""
from __future__ import annotations

import errno
from contextlib import contextmanager

DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def disk_errors_named(target: str, consequence: str, error_class: type[Exception]):
    """Turn a disk-full / quota / read-only OSError raised inside into `error_class("writing <target> failed: ...;
    <consequence>")`. Other OSErrors pass through."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        where = f" ({error.filename})" if error.filename else ""
        raise error_class(f"writing {target} failed: {error.strerror}{where}; {consequence}") from None
