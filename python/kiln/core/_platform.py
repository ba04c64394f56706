"""Platform knobs MLX has on every build that only act on some (Apple's wired memory)."""

import operator as _operator


def set_wired_limit(limit):
    """Set the wired size limit (memory kept resident): only macOS 15+ with Metal acts on
    it, so here, as on MLX's Linux build, it does nothing and returns the previous limit,
    0.

    Args:
        limit (int): The wired limit in bytes.

    Returns:
        int: The previous wired limit in bytes (always 0).
    """
    limit = _operator.index(limit)
    if limit < 0:
        raise TypeError("set_wired_limit(): limit must be a non-negative int")
    return 0
