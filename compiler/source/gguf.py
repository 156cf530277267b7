"""Read the metadata of a GGUF file, never its tensor data.

A GGUF file is a header (magic, version, tensor count, key/value count), then the
key/value metadata, then tensor descriptions, then tensor data. Everything tplparse
needs (chat templates, names, special tokens) is in the key/value section, so this
reader memory-maps the file and walks only that section: loading the template of a
40 GB model touches a few pages of it.

Why not `gguf.GGUFReader`: it parses every array element of every key into numpy
views up front. On llama.cpp's Gemma 4 vocab file (262k tokens) that took 25 s and
1.4 GB of memory just to open. This reader uses the `gguf` package's own constants
(magic, value types, token types, key names) and skips arrays it does not need by
walking their lengths; `tests/test_gguf.py` checks it against `GGUFReader`.
"""

from __future__ import annotations

import mmap
import os
import struct
from array import array
from dataclasses import dataclass, field

from gguf import GGUF_MAGIC, GGUFValueType, Keys, TokenType

from ..errors import LoadError

# Fixed-size scalar types: struct format character for each.
_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}

# Arrays shorter than this are decoded whatever their key; longer ones only when wanted.
_SMALL_ARRAY = 64

# Token ids that name special roles, and the attribute each one fills.
_ROLE_TOKEN_KEYS = {
    Keys.Tokenizer.BOS_ID: "bos",
    Keys.Tokenizer.EOS_ID: "eos",
    Keys.Tokenizer.EOT_ID: "eot",
    Keys.Tokenizer.EOM_ID: "eom",
    Keys.Tokenizer.UNK_ID: "unk",
    Keys.Tokenizer.PAD_ID: "pad",
    Keys.Tokenizer.SEP_ID: "sep",
    Keys.Tokenizer.MASK_ID: "mask",
}

# Token types that make a token "special" (it is never produced by splitting plain text).
_SPECIAL_TYPES = (TokenType.CONTROL, TokenType.USER_DEFINED)


@dataclass
class GGUFMetadata:
    """What tplparse reads from a GGUF file."""

    path: str
    version: int
    tensor_count: int
    values: dict[str, object] = field(default_factory=dict)  # scalars and small arrays, by key
    role_tokens: dict[str, str] = field(default_factory=dict)  # "bos" -> "<s>", ...
    special_tokens: list[str] = field(default_factory=list)  # control + user-defined, by id
    # the control ones (never text: llama.cpp's "special")
    control_tokens: list[str] = field(default_factory=list)
    vocab_size: int = 0

    @property
    def chat_templates(self) -> dict[str, str]:
        """Chat templates by name: "default" for `tokenizer.chat_template`, then named variants."""
        templates: dict[str, str] = {}
        main = self.values.get(Keys.Tokenizer.CHAT_TEMPLATE)
        if isinstance(main, str):
            templates["default"] = main
        prefix = Keys.Tokenizer.CHAT_TEMPLATE + "."
        for key, value in self.values.items():
            if key.startswith(prefix) and isinstance(value, str):
                templates[key[len(prefix):]] = value
        return templates


class _Cursor:
    """Reads little- or big-endian GGUF values from a memory-mapped buffer."""

    def __init__(self, buf: mmap.mmap, path: str, endian: str):
        self.buf = buf
        self.size = len(buf)
        self.path = path
        self.endian = endian
        self.offset = 0
        self.context = "header"  # what is being read, for error messages

    def _need(self, n: int) -> None:
        if n < 0 or self.offset + n > self.size:
            raise LoadError(
                f"{self.path}: truncated GGUF file: {self.context} runs past the end of the file "
                f"(offset {self.offset}, {n} bytes needed, file has {self.size})"
            )

    def scalar(self, fmt: str):
        n = struct.calcsize(fmt)
        self._need(n)
        (value,) = struct.unpack_from(self.endian + fmt, self.buf, self.offset)
        self.offset += n
        return value

    def string(self) -> str:
        raw = self.string_bytes()
        return raw.decode("utf-8", errors="replace")

    def exact_string(self, what: str) -> str:
        """A string that must be read as written (a chat template): invalid UTF-8 is an error,
        never replaced (U+FFFD would silently change the template)."""
        raw = self.string_bytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LoadError(f"{self.path}: {what} ({self.context}) is not valid UTF-8 "
                            f"(byte {e.start} of it is {raw[e.start]:#04x}): it cannot be "
                            "read as it was written") from None

    def string_bytes(self) -> bytes:
        length = self.scalar("Q")
        self._need(length)
        raw = self.buf[self.offset:self.offset + length]
        self.offset += length
        return raw

    def skip_string(self) -> None:
        length = self.scalar("Q")
        self._need(length)
        self.offset += length


def _value_type(cursor: _Cursor, raw: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise LoadError(f"{cursor.path}: corrupt GGUF file: unknown value type "
                        f"{raw} in {cursor.context}") from None


def read_gguf_metadata(path: str | os.PathLike) -> GGUFMetadata:
    """Read the key/value metadata of the GGUF file at `path` (memory-mapped, tensor data
    untouched)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise LoadError(f"{path}: not a GGUF file (it is empty)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LoadError(f"{path}: is a directory, not a GGUF file") from None
    except PermissionError:
        raise LoadError(f"{path}: permission denied") from None
    try:
        return _read(buf, path)
    finally:
        buf.close()


def _read(buf: mmap.mmap, path: str) -> GGUFMetadata:
    if len(buf) < 4 or struct.unpack_from("<I", buf, 0)[0] != GGUF_MAGIC:
        raise LoadError(f"{path}: not a GGUF file (it starts with {bytes(buf[:4])!r}, not b'GGUF')")
    # The version tells the byte order: a big-endian file's version reads as a huge number.
    endian = "<"
    if len(buf) >= 8 and struct.unpack_from("<I", buf, 4)[0] & 0xFFFF == 0:
        endian = ">"
    cursor = _Cursor(buf, path, endian)
    cursor.offset = 4
    version = cursor.scalar("I")
    if version < 2:
        raise LoadError(f"{path}: GGUF version {version} is not supported "
                        "(only version 2 and later)")
    tensor_count = cursor.scalar("Q")
    kv_count = cursor.scalar("Q")
    meta = GGUFMetadata(path=path, version=version, tensor_count=tensor_count)

    tokens_at: tuple[int, int] | None = None  # (offset of the first token string, count)
    token_types: array | None = None
    for index in range(kv_count):
        cursor.context = f"metadata entry {index + 1} of {kv_count}"
        key = cursor.string()
        cursor.context = f"metadata key {key!r}"
        vtype = _value_type(cursor, cursor.scalar("I"))
        if vtype != GGUFValueType.ARRAY:
            if vtype == GGUFValueType.STRING and _is_chat_template(key):
                meta.values[key] = cursor.exact_string("the chat template")
            else:
                meta.values[key] = _read_scalar(cursor, vtype)
            continue
        item_type = _value_type(cursor, cursor.scalar("I"))
        count = cursor.scalar("Q")
        if key == Keys.Tokenizer.LIST and item_type == GGUFValueType.STRING:
            tokens_at = (cursor.offset, count)
            _skip_array(cursor, item_type, count)
        elif key == Keys.Tokenizer.TOKEN_TYPE \
                and item_type in (GGUFValueType.INT32, GGUFValueType.UINT32):
            token_types = _read_int_array(cursor, item_type, count)
        elif count <= _SMALL_ARRAY:
            meta.values[key] = [_read_item(cursor, item_type) for _ in range(count)]
        else:
            _skip_array(cursor, item_type, count)

    if tokens_at is not None:
        _read_tokens(cursor, meta, tokens_at, token_types)
    return meta


def _is_chat_template(key: str) -> bool:
    return key == Keys.Tokenizer.CHAT_TEMPLATE or key.startswith(Keys.Tokenizer.CHAT_TEMPLATE + ".")


def _read_scalar(cursor: _Cursor, vtype: GGUFValueType):
    if vtype == GGUFValueType.STRING:
        return cursor.string()
    return cursor.scalar(_SCALAR_FORMATS[vtype])


def _read_item(cursor: _Cursor, item_type: GGUFValueType):
    if item_type == GGUFValueType.ARRAY:
        nested_type = _value_type(cursor, cursor.scalar("I"))
        count = cursor.scalar("Q")
        return [_read_item(cursor, nested_type) for _ in range(count)]
    return _read_scalar(cursor, item_type)


def _skip_array(cursor: _Cursor, item_type: GGUFValueType, count: int) -> None:
    if item_type == GGUFValueType.STRING:
        for _ in range(count):
            cursor.skip_string()
    elif item_type == GGUFValueType.ARRAY:
        for _ in range(count):
            nested_type = _value_type(cursor, cursor.scalar("I"))
            _skip_array(cursor, nested_type, cursor.scalar("Q"))
    else:
        n = struct.calcsize(_SCALAR_FORMATS[item_type]) * count
        cursor._need(n)
        cursor.offset += n


def _read_int_array(cursor: _Cursor, item_type: GGUFValueType, count: int) -> array:
    n = 4 * count
    cursor._need(n)
    values = array("i" if item_type == GGUFValueType.INT32 else "I")
    values.frombytes(cursor.buf[cursor.offset:cursor.offset + n])
    if (cursor.endian == ">") != (struct.pack("=I", 1) == struct.pack(">I", 1)):
        values.byteswap()
    cursor.offset += n
    return values


def _read_tokens(cursor: _Cursor, meta: GGUFMetadata, tokens_at: tuple[int, int],
                 token_types) -> None:
    """Decode only the tokens that matter: role tokens (bos, eos, ...) and special tokens."""
    start, count = tokens_at
    meta.vocab_size = count
    wanted: dict[int, str] = {}  # token id -> role ("" for "special")
    for key, role in _ROLE_TOKEN_KEYS.items():
        token_id = meta.values.get(key)
        if isinstance(token_id, int) and 0 <= token_id < count:
            wanted[token_id] = role
    special_ids = []
    if token_types is not None:
        special_ids = [i for i, t in enumerate(token_types) if t in _SPECIAL_TYPES and i < count]
        for i in special_ids:
            wanted.setdefault(i, "")
    if not wanted:
        return
    texts: dict[int, str] = {}
    cursor.offset = start
    cursor.context = f"metadata key {Keys.Tokenizer.LIST!r}"
    last_wanted = max(wanted)
    for token_id in range(last_wanted + 1):
        if token_id in wanted:
            texts[token_id] = cursor.string()
        else:
            cursor.skip_string()
    for key, role in _ROLE_TOKEN_KEYS.items():
        token_id = meta.values.get(key)
        if isinstance(token_id, int) and token_id in texts:
            meta.role_tokens[role] = texts[token_id]
    meta.special_tokens = [texts[i] for i in special_ids]
    meta.control_tokens = [texts[i] for i in special_ids if token_types[i] == TokenType.CONTROL]
