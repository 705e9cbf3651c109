"""Lock-free Snowflake-style 64-bit IDs: the atomflake generator, compiled from Rust.

An ID is an ``int`` of 64 bits: a timestamp, a node and a per-tick sequence. IDs from one
generator are unique and strictly increasing under any threads and any clock; a copy of
a generator in a child of ``fork()`` is refused; a high-water file or a node lease carries
the guarantee across restarts.

>>> import atomflake
>>> generator = atomflake.Generator("twitter", node=7)
>>> a, b = generator.next_id(), generator.next_id()
>>> a < b
True
>>> atomflake.Layout.TWITTER.decode(a).node
7
"""

from . import _atomflake
from ._atomflake import *  # noqa: F403 (every name of the native module's __all__)

__all__ = _atomflake.__all__
