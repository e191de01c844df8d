"""Serializing stored events the way Dagster does, with each table schema packed once.

Every materialization of a per-batch table carries its ``dagster/column_schema`` (the UI's
column list). The IO manager hands Dagster one :class:`dagster.TableSchema` object per set of
columns and dtypes (``io_manager.column_schema``), so the 452 batches of a corpora run share
a few dozen schema objects, yet Dagster's serializer packed each schema afresh for each event:
every column a record of name, type, description, constraints and tags walked in Python,
twice (the metadata is packed eagerly, then walked again as plain dicts). That was two thirds
of the CPU of serializing a materialization (0.1 to 0.4 ms of 0.2 to 0.7 ms per event; about
1.2 s of a one-process corpora run, #12.4).

:func:`serialize_event` gives the text ``dagster._serdes.serialize_value`` gives, byte for
byte (``test_event_serdes.py``), through a whitelist map that differs from Dagster's in one
entry: the ``TableSchema`` serializer packs each schema object once (with Dagster's own
serializer) and keeps the JSON text of its fields; in an event it yields a placeholder
string per field, which :func:`serialize_event` replaces by that text in the serialized
event. A placeholder is a string of NUL characters and a number that no other value of the
event holds: the replacement is made only when the text holds each placeholder exactly as
many times as it was handed out, else the event is serialized by Dagster's map (the same
text, slower). The schema object is kept referenced while remembered, so its ``id`` cannot
be reused by another object meanwhile. Every other class is serialized by Dagster's own
serializer, looked up in Dagster's map at call time (classes registered later work too).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from dagster_shared import seven
from dagster_shared.serdes.serdes import _WHITELIST_MAP, WhitelistMap

CACHED_CLASSES = ("TableSchema",)
"""Classes whose packed fields are remembered per object: immutable records the IO manager
reuses across batches (``io_manager.column_schema`` returns one object per schema)."""
MAX_CACHED = 256
"""Schemas remembered (least recently used out); a run has a few dozen."""

_numbers = itertools.count()
_state = threading.local()
"""``handed``: the placeholders handed out during the current :func:`serialize_event`."""


class _CachingSerializer:
    """Dagster's serializer of one class, each object's fields packed once into JSON text
    and handed out as placeholders while :func:`serialize_event` runs."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        # id -> (object, [(field, placeholder or plain value)], {placeholder: json text})
        self._packed: OrderedDict[int, tuple[object, list[tuple[str, Any]], dict[str, str]]] = (
            OrderedDict())
        self._texts: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:  # everything else is Dagster's serializer's
        return getattr(self._inner, name)

    def pack_items(self, value: object, whitelist_map: WhitelistMap,
                   object_handler: Callable[..., Any], descent_path: str
                   ) -> Iterator[tuple[str, Any]]:
        handed: list[str] | None = getattr(_state, "handed", None)
        if handed is None:  # not within serialize_event: Dagster's own packing
            return self._inner.pack_items(value, whitelist_map, object_handler, descent_path)
        with self._lock:
            hit = self._packed.get(id(value))
            if hit is not None and hit[0] is value:
                self._packed.move_to_end(id(value))
        if hit is None or hit[0] is not value:
            items: list[tuple[str, Any]] = []
            texts: dict[str, str] = {}
            for key, item in self._inner.pack_items(value, whitelist_map, object_handler,
                                                    descent_path):
                if isinstance(item, (str, int, float, bool)) or item is None:
                    items.append((key, item))
                    continue
                token = f"\0eval_pipeline packed {next(_numbers)}\0"
                texts[token] = seven.json.dumps(item)  # as serialize_value renders it
                items.append((key, token))
            hit = (value, items, texts)
            with self._lock:
                self._packed[id(value)] = hit
                self._texts.update(texts)
                if len(self._packed) > MAX_CACHED:
                    for token in self._packed.popitem(last=False)[1][2]:
                        self._texts.pop(token, None)
        handed.extend(hit[2])
        return iter(hit[1])

    def text(self, token: str) -> str | None:
        """The JSON text a placeholder stands for (None: no longer remembered)."""
        with self._lock:
            return self._texts.get(token)


class _Serializers(dict[str, Any]):
    """Dagster's object serializers with a few replaced; any other name (also one
    registered later) is looked up in Dagster's map."""

    def __init__(self, base: dict[str, Any], replaced: dict[str, Any]) -> None:
        super().__init__(replaced)
        self._base = base

    def __missing__(self, key: str) -> Any:
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._base


def _whitelist_map() -> WhitelistMap:
    base = _WHITELIST_MAP
    replaced = {name: _CachingSerializer(base.object_serializers[name])
                for name in CACHED_CLASSES if name in base.object_serializers}
    return base._replace(object_serializers=_Serializers(base.object_serializers, replaced))


_MAP = _whitelist_map()


def serialize_event(value: Any) -> str:
    """``dagster._serdes.serialize_value(value)``, the same text, faster for events that
    carry table schemas the process has serialized before."""
    from dagster._serdes import serialize_value

    handed: list[str] = []
    _state.handed = handed
    try:
        text = serialize_value(value, whitelist_map=_MAP)
    finally:
        _state.handed = None
    if not handed:
        return text
    for token in dict.fromkeys(handed):
        quoted = seven.json.dumps(token)
        packed = _text(token)
        if packed is None or text.count(quoted) != handed.count(token):
            return serialize_value(value)  # a value held the placeholder: Dagster's way
        text = text.replace(quoted, packed)
    return text


def _text(token: str) -> str | None:
    for name in CACHED_CLASSES:
        serializer = _MAP.object_serializers.get(name)
        if isinstance(serializer, _CachingSerializer):
            found = serializer.text(token)
            if found is not None:
                return found
    return None
