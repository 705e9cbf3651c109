"""Type stubs of the native module (written by hand, checked by mypy and the tests)."""

import datetime as _datetime
import os
import uuid as _uuid
from array import array
from types import TracebackType
from typing import Literal, Optional, Union, final, overload

from typing_extensions import Self

_Preset = Literal["twitter", "discord", "instagram", "sonyflake", "mastodon", "javascript"]
_When = Union[_datetime.datetime, int]

__all__ = [
    "AtomflakeError",
    "ClosedError",
    "ForkedError",
    "Generator",
    "LeaseError",
    "Layout",
    "MAX_BATCH",
    "Mask",
    "MintError",
    "Parts",
    "StartError",
    "from_base32",
    "from_base62",
    "lease",
    "parse_id",
    "to_base32",
    "to_base62",
]

MAX_BATCH: int
"""The most IDs one ``next_ids`` or ``next_ids_array`` call returns."""

class AtomflakeError(Exception):
    """The base of every atomflake error but bad input (``ValueError``)."""

class MintError(AtomflakeError):
    """No ID can be minted now."""

    transient: bool
    """Whether the same generator can mint again."""
    retry_after: Optional[float]
    """Seconds until it may, or ``None`` when it cannot."""

class ForkedError(MintError):
    """A generator built in a parent of this process: build a new one, on a node of its own."""

class ClosedError(MintError):
    """A generator after ``close()``: its mark is stored and its lease released."""

class StartError(AtomflakeError):
    """A generator cannot start: its high-water file or mark store."""

    transient: bool
    retry_after: Optional[float]

class LeaseError(AtomflakeError):
    """No node leased: none is free, or the engine is out of reach or refuses."""

    transient: bool
    retry_after: Optional[float]

@final
class Parts:
    """An ID's parts."""

    @property
    def unix_ms(self) -> int:
        """The start of the ID's tick, Unix ms."""
    @property
    def node(self) -> int:
        """The node that minted the ID."""
    @property
    def sequence(self) -> int:
        """The ID's place within its tick on that node."""
    @property
    def datetime(self) -> _datetime.datetime:
        """The start of the ID's tick, an aware ``datetime`` in UTC."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Layout:
    """How the bits of an ID are spent: timestamp, node and sequence, epoch and tick."""

    TWITTER: Layout
    DISCORD: Layout
    INSTAGRAM: Layout
    SONYFLAKE: Layout
    MASTODON: Layout
    JAVASCRIPT: Layout

    def __new__(
        cls,
        *,
        timestamp_bits: int,
        node_bits: int,
        sequence_bits: int,
        epoch_ms: int,
        tick_ms: int = 1,
    ) -> Self:
        """A custom layout, checked; a ``ValueError`` says what is wrong."""
    @staticmethod
    def preset(name: str) -> Layout:
        """The preset of that name; a ``ValueError`` lists the presets."""
    @staticmethod
    def presets() -> dict[str, Layout]:
        """Every preset by name."""
    @property
    def timestamp_bits(self) -> int: ...
    @property
    def node_bits(self) -> int: ...
    @property
    def sequence_bits(self) -> int: ...
    @property
    def epoch_ms(self) -> int: ...
    @property
    def tick_ms(self) -> int: ...
    @property
    def max_node(self) -> int: ...
    @property
    def ids_per_tick(self) -> int: ...
    @property
    def end_unix_ms(self) -> int: ...
    @property
    def max_id(self) -> int: ...
    @property
    def fits_js_number(self) -> bool:
        """Whether every ID is at most ``2**53 - 1``: a JavaScript number holds it exactly."""
    def decode(self, id: int) -> Parts:
        """An ID's parts; a ``ValueError`` for an ID with bits outside the layout."""
    @overload
    def encode(self, parts: Parts, /) -> int:
        """The ID of these parts (``layout.encode(layout.decode(id)) == id``); a ``ValueError``
        names a part out of range, a ``TypeError`` anything but a ``Parts`` or the keywords."""
    @overload
    def encode(self, *, unix_ms: _When, node: int, sequence: int = 0) -> int:
        """The ID of these parts; a ``ValueError`` names a part out of range."""
    def to_uuid(self, id: int) -> _uuid.UUID:
        """The ID as a ``uuid.UUID`` of version 7 that sorts as the IDs do."""
    def from_uuid(self, uuid: _uuid.UUID) -> int:
        """The ID that a ``uuid.UUID`` from ``to_uuid`` holds."""
    def datetime(self, id: int) -> _datetime.datetime:
        """The start of an ID's tick, an aware ``datetime`` in UTC."""
    def first_id_at(self, when: _When) -> int:
        """The lowest ID of the tick holding ``when``."""
    def last_id_at(self, when: _When) -> int:
        """The highest ID of the tick holding ``when``."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Generator:
    """A Snowflake ID generator on one node: thread-safe, fork-safe, strictly increasing."""

    def __new__(
        cls,
        layout: Union[_Preset, Layout, None] = None,
        node: Optional[int] = None,
        *,
        high_water: Union[str, os.PathLike[str], None] = None,
        borrow_ahead: float = 0.0,
        patience: float = 10.0,
    ) -> Self: ...
    def next_id(self) -> int:
        """The next ID, waiting with the GIL released for a spent tick."""
    def try_next_id(self) -> int:
        """The next ID, or ``MintError`` at once (``retry_after``: when to ask again)."""
    def next_ids(self, n: int) -> list[int]:
        """``n`` IDs in increasing order."""
    def next_ids_array(self, n: int) -> array[int]:
        """``n`` IDs in increasing order as an ``array('Q')``."""
    async def next_id_async(self) -> int:
        """The next ID, a spent tick waited out with ``asyncio.sleep``: the loop never waits."""
    async def next_ids_async(self, n: int) -> list[int]:
        """``n`` IDs in increasing order, each spent tick waited out with ``asyncio.sleep``."""
    def _next_id_nowait(self) -> int: ...
    def _next_run_nowait(self, n: int) -> list[int]: ...
    @property
    def node(self) -> int: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Stores the exact mark and releases the lease; later mints raise ``ClosedError``."""
    def __enter__(self) -> Generator: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Literal[False]: ...

def lease(
    url: str,
    *,
    namespace: str = "atomflake",
    ttl: float = 10.0,
    layout: Union[_Preset, Layout, None] = None,
    node: Optional[int] = None,
    borrow_ahead: float = 0.0,
    patience: Optional[float] = None,
) -> Generator:
    """A generator on a node leased from PostgreSQL, etcd or ZooKeeper, chosen by ``url``."""

def to_base32(id: int) -> str:
    """An ID as 13 characters of sortable Crockford base32."""

def from_base32(text: str) -> int:
    """The ID of 13 characters of base32."""

def to_base62(id: int) -> str:
    """An ID as 11 characters of base62 (``0-9A-Za-z`` in ASCII order) that sort as the IDs do."""

def from_base62(text: str) -> int:
    """The ID of 11 characters of base62."""

@final
class Mask:
    """A keyed permutation of the IDs: ``unmask(mask(id)) == id``; IDs below ``2**63`` stay below it."""

    def __new__(cls, key: bytes) -> Self: ...
    @staticmethod
    def from_key_file(path: Union[str, os.PathLike[str]]) -> Mask:
        """A mask with the key in a file of 16 raw bytes or 32 hex digits, readable by its owner alone."""
    def mask(self, id: int) -> int:
        """The masked ID of ``id``."""
    def unmask(self, masked: int) -> int:
        """The ID whose masked ID is ``masked``."""

def parse_id(text: str) -> int:
    """The ID of decimal text."""
