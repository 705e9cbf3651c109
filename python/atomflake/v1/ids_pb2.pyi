from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetIdsRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class GetIdsResponse(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class StreamIdsRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class StreamIdsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("first", "count", "step")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    first: int
    count: int
    step: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class GetLayoutRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLayoutResponse(_message.Message):
    __slots__ = ("layout", "nodes")
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    layout: Layout
    nodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, layout: _Optional[_Union[Layout, _Mapping]] = ..., nodes: _Optional[_Iterable[int]] = ...) -> None: ...

class Layout(_message.Message):
    __slots__ = ("timestamp_bits", "timestamp_shift", "node_bits", "node_shift", "sequence_bits", "sequence_shift", "epoch_unix_ms", "tick_ms")
    TIMESTAMP_BITS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_SHIFT_FIELD_NUMBER: _ClassVar[int]
    NODE_BITS_FIELD_NUMBER: _ClassVar[int]
    NODE_SHIFT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_BITS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_SHIFT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TICK_MS_FIELD_NUMBER: _ClassVar[int]
    timestamp_bits: int
    timestamp_shift: int
    node_bits: int
    node_shift: int
    sequence_bits: int
    sequence_shift: int
    epoch_unix_ms: int
    tick_ms: int
    def __init__(self, timestamp_bits: _Optional[int] = ..., timestamp_shift: _Optional[int] = ..., node_bits: _Optional[int] = ..., node_shift: _Optional[int] = ..., sequence_bits: _Optional[int] = ..., sequence_shift: _Optional[int] = ..., epoch_unix_ms: _Optional[int] = ..., tick_ms: _Optional[int] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("id", "uuid", "masked")
    ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    MASKED_FIELD_NUMBER: _ClassVar[int]
    id: int
    uuid: str
    masked: bool
    def __init__(self, id: _Optional[int] = ..., uuid: _Optional[str] = ..., masked: _Optional[bool] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("unix_ms", "node", "sequence", "id")
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    unix_ms: int
    node: int
    sequence: int
    id: int
    def __init__(self, unix_ms: _Optional[int] = ..., node: _Optional[int] = ..., sequence: _Optional[int] = ..., id: _Optional[int] = ...) -> None: ...
