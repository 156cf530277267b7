"""Read the metadata of a GGUF file, never its tensor data.

A GGUF file is a header (magic, version, tensor count, key/value count), then the
key/value metadata, then tensor descriptions, then tensor data. Everything tplparse
needs (chat templates, names, special tokens) is in the key/value section, so this
reader walks only that section, through a window of the file it reads a megabyte at a
time: loading the template of a 40 GB model reads a few megabytes at its start, and the
memory it takes does not grow with the file.

Why not a memory map of the file: a command's work with a template runs in a child process
whose address space is limited (tplparse.source.isolation), and mapping a model of several
gigabytes counts against that limit whole, however little of it is read: every real model
file failed to load that way.

Why not `gguf.GGUFReader`: it maps the file too, and parses every array element of every
key into numpy views up front. On llama.cpp's Gemma 4 vocab file (262k tokens) that took
25 s and 1.4 GB of memory just to open. This reader uses the `gguf` package's own constants
(magic, value types, token types, key names) and skips arrays it does not need by walking
their lengths; `tests/test_gguf.py` checks it against `GGUFReader`.

What it refuses, each with one line naming the key: a key written twice (llama.cpp refuses
such a file; which of the two a reader takes would be a guess), a chat template that is not
a string or not valid UTF-8, a role or special token that is not valid UTF-8 (the template
would be rendered with U+FFFD in its place), and a truncated file.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass, field
from typing import BinaryIO

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

# How much of the file is read at a time.
_WINDOW = 1 << 20

# The longest chat template read (the same bound as a template read from a pipe); real ones
# are under 64 KiB.
MAX_TEMPLATE_BYTES = 64 << 20
# The longest other string kept (a model's name, a token): longer ones are refused (a token)
# or skipped (a value tplparse does not read).
_MAX_KEPT_STRING = 1 << 20

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
    """Reads little- or big-endian GGUF values from a file, through a window of it held in
    memory (`_WINDOW` bytes, or one value's length when that is longer)."""

    def __init__(self, file: BinaryIO, size: int, path: str, endian: str):
        self.file = file
        self.size = size
        self.path = path
        self.endian = endian
        self.offset = 0
        self.context = "header"  # what is being read, for error messages
        self._window = b""
        self._window_start = 0
        self._structs: dict[str, struct.Struct] = {}

    def _need(self, n: int) -> None:
        if n < 0 or self.offset + n > self.size:
            raise LoadError(
                f"{self.path}: truncated GGUF file: {self.context} runs past the end of the file "
                f"(offset {self.offset}, {n} bytes needed, file has {self.size})"
            )

    def _at(self, n: int) -> int:
        """The index in the window of the `n` bytes at the cursor (the window moved to hold them
        when it does not)."""
        self._need(n)
        start = self.offset - self._window_start
        if 0 <= start and start + n <= len(self._window):
            return start
        self.file.seek(self.offset)
        self._window = self.file.read(max(n, _WINDOW))
        self._window_start = self.offset
        if len(self._window) < n:
            raise LoadError(f"{self.path}: the file got shorter while it was read ({self.context})")
        return 0

    def struct(self, fmt: str) -> struct.Struct:
        compiled = self._structs.get(fmt)
        if compiled is None:
            compiled = self._structs[fmt] = struct.Struct(self.endian + fmt)
        return compiled

    def scalar(self, fmt: str):
        compiled = self.struct(fmt)
        at = self._at(compiled.size)
        self.offset += compiled.size
        return compiled.unpack_from(self._window, at)[0]

    def take(self, n: int) -> bytes:
        """The next `n` bytes."""
        at = self._at(n)
        self.offset += n
        return self._window[at:at + n]

    def skip(self, n: int) -> None:
        self._need(n)
        self.offset += n

    def string_length(self) -> int:
        return self.scalar("Q")

    def string_bytes(self, limit: int, what: str) -> bytes:
        length = self.string_length()
        if length > limit:
            raise LoadError(f"{self.path}: {what} ({self.context}) is {length} bytes long; "
                            f"tplparse reads up to {limit >> 20} MiB of it")
        return self.take(length)

    def exact_string(self, what: str, limit: int = _MAX_KEPT_STRING) -> str:
        """A string that must be read as written (a chat template, a token): invalid UTF-8 is
        an error, never replaced (U+FFFD would silently change what the template renders)."""
        raw = self.string_bytes(limit, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LoadError(f"{self.path}: {what} ({self.context}) is not valid UTF-8 "
                            f"(byte {e.start} of it is {raw[e.start]:#04x}): it cannot be "
                            "read as it was written") from None

    def key(self) -> str:
        """A metadata key's name (shown in messages, matched against known names)."""
        raw = self.string_bytes(_MAX_KEPT_STRING, "a key's name")
        return raw.decode("utf-8", "backslashreplace")

    def skip_string(self) -> None:
        self.skip(self.string_length())

    def skip_strings(self, count: int) -> None:
        """Skip `count` strings (a vocabulary's token list, 10^5-10^6 of them): walked inside
        the window, a window at a time."""
        length = self.struct("Q")
        for _ in range(count):
            at = self._at(8)
            self.offset += 8 + length.unpack_from(self._window, at)[0]
        self._need(0)


def _value_type(cursor: _Cursor, raw: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise LoadError(f"{cursor.path}: corrupt GGUF file: unknown value type "
                        f"{raw} in {cursor.context}") from None


def read_gguf_metadata(path: str | os.PathLike) -> GGUFMetadata:
    """Read the key/value metadata of the GGUF file at `path` (read from its start, tensor data
    untouched)."""
    path = os.fspath(path)
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise LoadError(f"{path}: not a GGUF file (it is empty)")
            return _read(f, size, path)
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LoadError(f"{path}: is a directory, not a GGUF file") from None
    except PermissionError:
        raise LoadError(f"{path}: permission denied") from None
    except OSError as e:
        raise LoadError(f"{path}: cannot read: {e.strerror or e}") from None


def _read(file: BinaryIO, size: int, path: str) -> GGUFMetadata:
    head = file.read(8)
    if len(head) < 4 or struct.unpack_from("<I", head, 0)[0] != GGUF_MAGIC:
        raise LoadError(f"{path}: not a GGUF file (it starts with {head[:4]!r}, not b'GGUF')")
    # The version tells the byte order: a big-endian file's version reads as a huge number.
    endian = "<"
    if len(head) >= 8 and struct.unpack_from("<I", head, 4)[0] & 0xFFFF == 0:
        endian = ">"
    cursor = _Cursor(file, size, path, endian)
    cursor.offset = 4
    version = cursor.scalar("I")
    if version < 2:
        raise LoadError(f"{path}: GGUF version {version} is not supported "
                        "(only version 2 and later)")
    tensor_count = cursor.scalar("Q")
    kv_count = cursor.scalar("Q")
    meta = GGUFMetadata(path=path, version=version, tensor_count=tensor_count)
    tokens = _Tokens()
    seen: dict[str, int] = {}
    for index in range(kv_count):
        cursor.context = f"metadata entry {index + 1} of {kv_count}"
        key = cursor.key()
        if key in seen:
            raise LoadError(f"{path}: metadata key {key!r} is written twice (entries "
                            f"{seen[key]} and {index + 1}): llama.cpp refuses such a file, and "
                            "which of the two to read would be a guess")
        seen[key] = index + 1
        cursor.context = f"metadata key {key!r}"
        _read_entry(cursor, meta, tokens, key)
    if tokens.at is not None:
        _read_tokens(cursor, meta, tokens)
    return meta


@dataclass
class _Tokens:
    """Where the vocabulary is (its strings are read last, only the wanted ones) and which of
    its tokens are special."""

    at: int | None = None  # the offset of the first token string
    count: int = 0
    special: dict[int, int] | None = None  # token id -> its type, for the special ones


def _read_entry(cursor: _Cursor, meta: GGUFMetadata, tokens: _Tokens, key: str) -> None:
    vtype = _value_type(cursor, cursor.scalar("I"))
    if _is_chat_template(key):
        if vtype != GGUFValueType.STRING:
            raise LoadError(f"{cursor.path}: metadata key {key!r} holds a{_type_name(vtype)}, not "
                            "a string: no chat template can be read from it")
        meta.values[key] = cursor.exact_string("the chat template", MAX_TEMPLATE_BYTES)
        return
    if vtype == GGUFValueType.STRING:
        value = _kept_string(cursor)
        if value is not None:
            meta.values[key] = value
        return
    if vtype != GGUFValueType.ARRAY:
        meta.values[key] = cursor.scalar(_SCALAR_FORMATS[vtype])
        return
    item_type = _value_type(cursor, cursor.scalar("I"))
    count = cursor.scalar("Q")
    if key == Keys.Tokenizer.LIST and item_type == GGUFValueType.STRING:
        tokens.at, tokens.count = cursor.offset, count
        cursor.skip_strings(count)
    elif key == Keys.Tokenizer.TOKEN_TYPE \
            and item_type in (GGUFValueType.INT32, GGUFValueType.UINT32):
        tokens.special = _special_token_types(cursor, item_type, count)
    elif count <= _SMALL_ARRAY and item_type not in (GGUFValueType.ARRAY, GGUFValueType.STRING):
        meta.values[key] = [cursor.scalar(_SCALAR_FORMATS[item_type]) for _ in range(count)]
    elif count <= _SMALL_ARRAY and item_type == GGUFValueType.STRING:
        meta.values[key] = [_kept_string(cursor) for _ in range(count)]
    else:  # (long arrays, and arrays of arrays: tplparse reads none)
        _skip_array(cursor, item_type, count)


def _kept_string(cursor: _Cursor) -> str | None:
    """A string value other than a template or a token (a model's name: shown, made a family
    name): bytes that are not UTF-8 kept visible as `\\xNN` escapes; None for one longer than
    any tplparse reads (skipped)."""
    length = cursor.string_length()
    if length > _MAX_KEPT_STRING:
        cursor.skip(length)
        return None
    return cursor.take(length).decode("utf-8", "backslashreplace")


def _type_name(vtype: GGUFValueType) -> str:
    """The value type with its article, to follow "a": " uint32", "n int32", "n array"."""
    name = vtype.name.lower()
    return ("n " if name[0] in "ai" else " ") + name


def _is_chat_template(key: str) -> bool:
    return key == Keys.Tokenizer.CHAT_TEMPLATE or key.startswith(Keys.Tokenizer.CHAT_TEMPLATE + ".")


def _skip_array(cursor: _Cursor, item_type: GGUFValueType, count: int) -> None:
    """Skip an array, arrays of arrays included, without recursion: a file may nest them
    deeper than Python's stack (each level is a type and a count: 12 bytes)."""
    pending = [(item_type, count)]
    while pending:
        item_type, count = pending.pop()
        if item_type == GGUFValueType.STRING:
            cursor.skip_strings(count)
        elif item_type == GGUFValueType.ARRAY:
            if count:
                pending.append((GGUFValueType.ARRAY, count - 1))  # (the elements after this one)
                nested_type = _value_type(cursor, cursor.scalar("I"))
                pending.append((nested_type, cursor.scalar("Q")))
        else:
            cursor.skip(struct.calcsize(_SCALAR_FORMATS[item_type]) * count)


def _special_token_types(cursor: _Cursor, item_type: GGUFValueType, count: int) -> dict[int, int]:
    """Token id -> type of the special tokens, from the token-type array, read a window at a
    time (a vocabulary has 10^5-10^6 tokens, a few hundred of them special)."""
    cursor.skip(4 * count)  # (checked whole first: a truncated file is named as such)
    cursor.offset -= 4 * count
    swap = (cursor.endian == ">") != (struct.pack("=I", 1) == struct.pack(">I", 1))
    special: dict[int, int] = {}
    per_window = _WINDOW // 4
    for first in range(0, count, per_window):
        n = min(per_window, count - first)
        values = array("i" if item_type == GGUFValueType.INT32 else "I")
        values.frombytes(cursor.take(4 * n))
        if swap:
            values.byteswap()
        special.update((first + i, t) for i, t in enumerate(values) if t in _SPECIAL_TYPES)
    return special


def _read_tokens(cursor: _Cursor, meta: GGUFMetadata, tokens: _Tokens) -> None:
    """Decode only the tokens that matter: role tokens (bos, eos, ...) and special tokens."""
    assert tokens.at is not None
    meta.vocab_size = tokens.count
    wanted: dict[int, str] = {}  # token id -> role ("" for "special")
    for key, role in _ROLE_TOKEN_KEYS.items():
        token_id = meta.values.get(key)
        if isinstance(token_id, int) and 0 <= token_id < tokens.count:
            wanted[token_id] = role
    special = {i: t for i, t in (tokens.special or {}).items() if i < tokens.count}
    for i in special:
        wanted.setdefault(i, "")
    if not wanted:
        return
    texts: dict[int, str] = {}
    cursor.offset = tokens.at
    cursor.context = f"metadata key {Keys.Tokenizer.LIST!r}"
    token_id = 0
    for wanted_id in sorted(wanted):
        cursor.skip_strings(wanted_id - token_id)
        role = wanted[wanted_id]
        what = f"token {wanted_id}, " + (f"the {role} token" if role else "a special token")
        texts[wanted_id] = cursor.exact_string(what)
        token_id = wanted_id + 1
    for key, role in _ROLE_TOKEN_KEYS.items():
        token_id = meta.values.get(key)
        if isinstance(token_id, int) and token_id in texts:
            meta.role_tokens[role] = texts[token_id]
    meta.special_tokens = [texts[i] for i in sorted(special)]
    meta.control_tokens = [texts[i] for i in sorted(special) if special[i] == TokenType.CONTROL]
