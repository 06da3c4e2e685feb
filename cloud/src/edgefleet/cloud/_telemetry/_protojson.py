"""A validator for protobuf's JSON mapping, compiled once from the message descriptors.

It gives the verdicts ``json_format.ParseDict`` gives on the output of ``json.loads``, without building a
message: the pure-Python ``ParseDict`` costs ~190 us per 1 KB telemetry payload, this ~25 us.
:class:`Unsupported` marks the corners it does not decide (the same field named twice, by its JSON name and
its proto name; ``Any``/``Struct``/``Value``/``ListValue`` values; extension names); the caller falls back
to ``ParseDict`` for those. ``tests/unit/telemetry/test_protojson.py`` checks the agreement on the agent's
real payloads and on generated and mutated ones.

One deliberate difference: where ``ParseDict`` raises something else than ``ParseError`` (``OverflowError``
for an integer too large for a float in a ``double`` field or ``1e999`` where an enum goes, ``SystemError``
for a surrogate where an enum name goes), this rejects.

Example::

    >>> from edgefleet.proto.v1 import telemetry_pb2 as pb
    >>> v = compile_message(pb.Event.DESCRIPTOR)
    >>> v({"error": {"component": "camera", "message": "gone"}})
    >>> v({"error": {"code": 1}})
    Traceback (most recent call last):
    ...
    edgefleet.cloud._telemetry._protojson.Invalid: edgefleet.proto.v1.Event.Error has no field 'code'
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import math
import re
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor_pool, json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

__all__ = ["FieldReader", "Invalid", "Unsupported", "Validator", "compile_message", "timestamp_ns"]

Validator = Callable[[Any], Any]
Converter = Callable[[Any], Any]

_FLOAT_MAX = 3.4028234663852886e38  # google.protobuf.internal.type_checkers._FLOAT_MAX
_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_UNSUPPORTED_TYPES = frozenset(
    {"google.protobuf.Any", "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)
_GENERIC_TYPES: dict[str, Callable[[], Any]] = {
    "google.protobuf.Duration": Duration,
    "google.protobuf.FieldMask": FieldMask,
}
_TIMESTAMP = "google.protobuf.Timestamp"
_TIMESTAMP_FAST = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z")
_EPOCH = datetime.datetime(1970, 1, 1)
_TS_MIN, _TS_MAX = -62135596800, 253402300799  # 0001-01-01 .. 9999-12-31T23:59:59


class Invalid(ValueError):  # noqa: N818 - a verdict, like Rejected
    """The value is not valid for the message type (``ParseDict`` raises ``ParseError``)."""


class Unsupported(Exception):  # noqa: N818 - a signal to fall back, not an error
    """A corner this validator leaves to ``json_format.ParseDict``."""


# --- scalars -----------------------------------------------------------------------------------------
def _slow_int(v: Any) -> int:
    """``json_format._ConvertInteger``, step for step."""
    if isinstance(v, float) and not v.is_integer():
        raise Invalid(f"not an integer: {v!r}")
    if isinstance(v, str) and " " in v:
        raise Invalid(f"not an integer: {v!r}")
    if isinstance(v, bool):
        raise Invalid("a bool is not an integer")
    try:
        return int(v)
    except (TypeError, OverflowError):
        raise Invalid(f"not an integer: {type(v).__name__}") from None
    except ValueError:
        pass
    try:
        f = float(v)
    except (ValueError, TypeError, OverflowError):
        raise Invalid(f"not an integer: {v!r}") from None
    if not f.is_integer():
        raise Invalid(f"not an integer: {v!r}")
    return int(f)


def _int_converter(lo: int, hi: int) -> Converter:
    def convert(v: Any) -> int:
        t = type(v)
        if t is int:
            n = v
        elif t is str and len(v) < 21 and v.isdigit() and v.isascii():
            n = int(v)
        else:
            n = _slow_int(v)
        if lo <= n <= hi:
            return n  # type: ignore[no-any-return]
        raise Invalid(f"integer out of range: {n}")

    return convert


def _slow_float(v: Any, single: bool) -> float:
    """``json_format._ConvertFloat``, step for step (an ``OverflowError`` there is a rejection here)."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise Invalid('NaN and infinities must be quoted: "NaN", "Infinity", "-Infinity"')
        if single and not -_FLOAT_MAX <= v <= _FLOAT_MAX:
            raise Invalid(f"float value out of range: {v!r}")
    if v == "nan":
        raise Invalid('"nan" must be written "NaN"')
    try:
        return float(v)
    except ValueError:
        raise Invalid(f"not a number: {v!r}") from None
    except (TypeError, OverflowError):
        raise Invalid(f"not a number: {type(v).__name__}") from None


def _double(v: Any) -> float:
    if type(v) is float and v - v == 0.0:  # finite
        return v
    return _slow_float(v, False)


def _single(v: Any) -> float:
    """The JSON value (not rounded to 32 bits: only its validity is decided here)."""
    if type(v) is float and -_FLOAT_MAX <= v <= _FLOAT_MAX:
        return v
    return _slow_float(v, True)


def _bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise Invalid("expected true or false without quotes")


def _bool_key(v: Any) -> bool:
    if v == "true":
        return True
    if v == "false":
        return False
    raise Invalid(f'expected "true" or "false", not {v!r}')


def _string(v: Any) -> str:
    if type(v) is not str:
        raise Invalid(f"expected a string, got {type(v).__name__}")
    if not v.isascii():
        try:
            v.encode("utf-8")  # what the message setter does: no surrogates, paired or not
        except UnicodeEncodeError:
            raise Invalid("string with surrogates") from None
    return v


def _bytes(v: Any) -> bytes:
    if type(v) is not str:
        raise Invalid(f"expected a base64 string, got {type(v).__name__}")
    try:
        encoded = v.encode("utf-8")
        return base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))
    except (UnicodeEncodeError, binascii.Error):
        raise Invalid("not base64") from None


def _enum_converter(enum: EnumDescriptor, custom: dict[str, int]) -> Converter:
    by_name: dict[str, int] = {v.name: v.number for v in enum.values}
    by_name.update({k: n for k, n in custom.items() if k not in by_name})
    # protobuf's own lookup, quirks included: it wraps numbers that fit 64 bits to 32 (2**32 + 1 finds 1).
    by_number = enum.values_by_number
    closed = bool(enum.is_closed)
    lo, hi = _INT_RANGES[FieldDescriptor.CPPTYPE_INT32]

    def convert(v: Any) -> int:
        t = type(v)
        if t is str:
            n = by_name.get(v)
            if n is not None:
                return n
        elif t is list or t is dict:
            raise Invalid(f"invalid enum value for {enum.full_name}")
        try:
            number = int(v)
        except (ValueError, TypeError, OverflowError):
            raise Invalid(f"invalid enum value {v!r} for {enum.full_name}") from None
        value = by_number.get(number)
        if value is not None:
            return int(value.number)
        if not closed and lo <= number <= hi:
            return number
        raise Invalid(f"invalid enum value {v!r} for {enum.full_name}")

    return convert


def _custom_enum_names(enum: EnumDescriptor) -> dict[str, int]:
    """Names given with the ``pb.enumvalue.json`` option, as ``ParseDict`` reads them."""
    try:
        ext = descriptor_pool.Default().FindExtensionByName("pb.enumvalue.json")
    except KeyError:
        return {}
    cache: dict[Any, Any] = {}
    names = json_format._GetCustomJsonEnumNames(enum, cache, ext)
    return {k: ev.number for k, ev in names.items()}


def timestamp_ns(v: Any) -> int:
    """A ``google.protobuf.Timestamp`` JSON string as nanoseconds since the epoch; raises Invalid."""
    if type(v) is str:
        return _timestamp_str(v)
    raise Invalid(f"Timestamp JSON value not a string: {type(v).__name__}")


@functools.lru_cache(maxsize=4096)  # validation, then reading the header: the same string twice in a row
def _timestamp_str(v: str) -> int:
    m = _TIMESTAMP_FAST.fullmatch(v)  # the agent's form; protobuf's parser decides everything else
    if m is not None:
        y, mo, d, h, mi, s, frac = m.groups()
        try:
            td = datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)) - _EPOCH
        except ValueError:
            raise Invalid(f"not a timestamp: {v!r}") from None
        seconds = td.seconds + td.days * 86400
        nanos = round(float("0." + frac) * 1e9) if frac else 0
        if _TS_MIN <= seconds <= _TS_MAX and 0 <= nanos < 1_000_000_000:
            return seconds * 1_000_000_000 + nanos
    ts = Timestamp()
    try:
        ts.FromJsonString(v)
    except (ValueError, TypeError):
        raise Invalid(f"not a timestamp: {v!r}") from None
    return int(ts.ToNanoseconds())


def _generic(factory: Callable[[], Any]) -> Converter:
    def convert(v: Any) -> Any:
        msg = factory()
        try:
            msg.FromJsonString(v)
        except (ValueError, TypeError):
            raise Invalid(f"not a {msg.DESCRIPTOR.full_name}: {v!r}") from None
        return msg

    return convert


def _unsupported(v: Any) -> None:
    raise Unsupported("a value of a type this validator leaves to ParseDict")


_FLOATS: dict[int, Converter] = {FieldDescriptor.CPPTYPE_DOUBLE: _double, FieldDescriptor.CPPTYPE_FLOAT: _single}


# --- compilation -------------------------------------------------------------------------------------
class _Compiler:
    def __init__(self) -> None:
        self.messages: dict[str, Validator] = {}

    def scalar(self, fd: FieldDescriptor, *, key: bool = False) -> Converter:
        cpp = fd.cpp_type
        if cpp in _INT_RANGES:
            return _int_converter(*_INT_RANGES[cpp])
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            return _bool_key if key else _bool
        if cpp in _FLOATS:
            return _FLOATS[cpp]
        if cpp == FieldDescriptor.CPPTYPE_ENUM:
            if fd.enum_type.full_name == "google.protobuf.NullValue":
                return _unsupported
            return _enum_converter(fd.enum_type, _custom_enum_names(fd.enum_type))
        return _bytes if fd.type == FieldDescriptor.TYPE_BYTES else _string

    def message(self, desc: Descriptor) -> Validator:
        name = desc.full_name
        if name in self.messages:
            return self.messages[name]

        def later(js: Any) -> Any:  # a recursive type reaches itself through this, once compiled
            return self.messages[name](js)

        self.messages[name] = later
        self.messages[name] = self._special(desc) or self._build(desc)
        return self.messages[name]

    def _special(self, desc: Descriptor) -> Validator | None:
        """Well-known types with a JSON form of their own."""
        name = desc.full_name
        if name in _UNSUPPORTED_TYPES:
            return _unsupported
        if name == _TIMESTAMP:
            return timestamp_ns
        if name in _GENERIC_TYPES:
            return _generic(_GENERIC_TYPES[name])
        if desc.file.name == "google/protobuf/wrappers.proto":
            return self.scalar(desc.fields_by_name["value"])
        return None

    def _build(self, desc: Descriptor) -> Validator:
        name = desc.full_name
        handlers: dict[str, tuple[int, Callable[[Any], Any]]] = {}
        aliases: list[tuple[str, str]] = []
        oneofs: list[tuple[str, tuple[str, ...]]] = []
        for fd in desc.fields:
            h = (_fast_code(fd), self.field(fd))
            handlers[fd.json_name] = h
            handlers[fd.name] = h
            if fd.json_name != fd.name:
                aliases.append((fd.json_name, fd.name))
        for oneof in desc.oneofs:
            keys = tuple(k for fd in oneof.fields for k in dict.fromkeys((fd.json_name, fd.name)))
            oneofs.append((oneof.name, keys))
            if oneof.name in handlers:
                return _unsupported  # a field named like a oneof: ParseDict's name bookkeeping differs
        return _message_validator(name, handlers, aliases, tuple(oneofs), bool(desc.is_extendable))

    def field(self, fd: FieldDescriptor) -> Callable[[Any], Any]:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            entry = fd.message_type
            key = self.scalar(entry.fields_by_name["key"], key=True)
            vfd = entry.fields_by_name["value"]
            if vfd.message_type is not None:
                null_ok = vfd.message_type.full_name == "google.protobuf.Value"
                return _map(key, self.message(vfd.message_type), null=Unsupported if null_ok else Invalid)
            return _map(key, self.scalar(vfd), null=None)
        if fd.message_type is not None:
            item: Callable[[Any], Any] = self.message(fd.message_type)
            null_item = fd.message_type.full_name == "google.protobuf.Value"
        else:
            item = self.scalar(fd)
            null_item = False
        if fd.is_repeated:
            return _repeated(item, null_item)
        return item


# The common valid values the message loop accepts without a call (the converter decides the rest).
_FAST_NONE, _FAST_DOUBLE, _FAST_STRING, _FAST_DIGITS, _FAST_BOOL = range(5)
_FAST_CODES = {
    FieldDescriptor.CPPTYPE_DOUBLE: _FAST_DOUBLE,
    FieldDescriptor.CPPTYPE_INT64: _FAST_DIGITS,  # at most 18 digits: below 2**63
    FieldDescriptor.CPPTYPE_UINT64: _FAST_DIGITS,
    FieldDescriptor.CPPTYPE_BOOL: _FAST_BOOL,
}


def _fast_code(fd: FieldDescriptor) -> int:
    if fd.is_repeated or fd.message_type is not None:
        return _FAST_NONE
    if fd.cpp_type == FieldDescriptor.CPPTYPE_STRING:
        return _FAST_STRING if fd.type == FieldDescriptor.TYPE_STRING else _FAST_NONE
    return _FAST_CODES.get(fd.cpp_type, _FAST_NONE)


def _repeated(item: Callable[[Any], Any], null_item: bool) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if type(value) is not list:
            raise Invalid("a repeated field must be a JSON array")
        for v in value:
            if v is None:
                if null_item:
                    raise Unsupported("null in a repeated google.protobuf.Value")
                raise Invalid("null in a repeated field")
            item(v)

    return check


def _map(key: Converter, value: Callable[[Any], Any], *, null: type[Exception] | None) -> Callable[[Any], None]:
    """``null``: what a null message value raises (scalar converters reject null themselves)."""

    def check(obj: Any) -> None:
        if type(obj) is not dict:
            raise Invalid("a map field must be a JSON object")
        for k, v in obj.items():
            key(k)
            if v is None and null is not None:
                raise null("null map value")
            value(v)

    return check


def _message_validator(
    name: str,
    handlers: dict[str, tuple[int, Callable[[Any], Any]]],
    aliases: list[tuple[str, str]],
    oneofs: tuple[tuple[str, tuple[str, ...]], ...],
    extendable: bool,
) -> Validator:
    get = handlers.get
    proto_names = frozenset(b for _, b in aliases)  # the proto names that differ from the JSON names

    def check(js: Any) -> None:
        if type(js) is not dict:
            # ParseDict iterates whatever it is given: "" and [] are an empty message, anything else fails.
            if (type(js) is str or type(js) is list) and not js:
                return
            raise Invalid(f"{name}: expected a JSON object, got {type(js).__name__}")
        for key, value in js.items():
            entry = get(key)
            if entry is None:
                if extendable and key.startswith("["):
                    raise Unsupported("extension field")
                raise Invalid(f"{name} has no field {key!r}")
            if value is None:
                continue
            fast, h = entry
            if fast == _FAST_DOUBLE:
                if type(value) is float and value - value == 0.0:
                    continue
            elif fast == _FAST_STRING:
                if type(value) is str and value.isascii():
                    continue
            elif fast == _FAST_DIGITS:
                if type(value) is str and len(value) < 19 and value.isdigit() and value.isascii():
                    continue
            elif fast == _FAST_BOOL and type(value) is bool:
                continue
            h(value)
        if proto_names and not proto_names.isdisjoint(js):
            for a, b in aliases:
                if a in js and b in js:
                    raise Unsupported(f"{name}.{b} given twice, as {a!r} and {b!r}")
        for oneof, keys in oneofs:
            n = 0
            for k in keys:
                if js.get(k) is not None:
                    n += 1
            if n > 1:
                raise Invalid(f"{name}: more than one field of oneof {oneof!r}")

    return check


def compile_message(desc: Descriptor) -> Validator:
    """A function that returns when ``obj`` (``json.loads`` output) is valid for ``desc``, else raises
    :class:`Invalid` (or :class:`Unsupported`: ask ``ParseDict``)."""
    return _Compiler().message(desc)


class FieldReader:
    """Reads one field of an already validated JSON object, converted like ``ParseDict`` would."""

    __slots__ = ("_convert", "_default", "_keys")

    def __init__(self, desc: Descriptor, field: str, default: Any = None, *, presence: bool = False) -> None:
        """``presence``: an absent field reads as None (a proto3 ``optional`` field), not its default."""
        fd = desc.fields_by_name[field]
        self._keys = tuple(dict.fromkeys((fd.json_name, fd.name)))
        if fd.message_type is not None and fd.message_type.full_name == _TIMESTAMP:
            self._convert: Converter | None = timestamp_ns
            self._default = 0 if default is None else default
        elif fd.message_type is not None or fd.is_repeated:
            self._convert = None  # the JSON value itself (a sub-object, array or map)
            self._default = default
        else:
            self._convert = _Compiler().scalar(fd)
            self._default = fd.default_value if default is None else default
        if presence:
            self._default = None

    def __call__(self, obj: Any) -> Any:
        if type(obj) is dict:
            for k in self._keys:
                v = obj.get(k)
                if v is not None:
                    return v if self._convert is None else self._convert(v)
        return self._default
