"""`load(source)`: a chat template from whatever the user has.

Accepted sources:
- a `.gguf` model file (metadata only; tensor data is never read),
- a Jinja file (`.jinja`, or any other text file),
- a `tokenizer_config.json` (its `chat_template`: a string, or a list of named templates),
- a directory holding `tokenizer_config.json` and/or `chat_template.jinja`
  (plus `chat_templates/NAME.jinja` variants and `generation_config.json`, as newer
  checkpoints ship them).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LoadError
from ..jsontext import loads
from .gguf import read_gguf_metadata
from .render import DEFAULT_LIMITS, RenderLimits
from .template import ChatTemplate, family_slug, slugify

_GGUF_MAGIC = b"GGUF"

# The named special tokens transformers passes to templates, in its order.
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")
# ... and the lists of special tokens it passes (transformers 4's name, and 5's).
TOKEN_LISTS = ("additional_special_tokens", "extra_special_tokens")


@dataclass
class _Found:
    """What a source yielded, before it becomes a `ChatTemplate`."""

    templates: dict[str, str]  # variant name -> Jinja source ("default" first)
    name: str
    model_slug: str
    origin: str
    named_tokens: dict[str, str] = field(default_factory=dict)
    token_lists: dict[str, list[str]] = field(default_factory=dict)
    end_of_turn: list[str] = field(default_factory=list)
    special_tokens: list[str] = field(default_factory=list)
    control_tokens: list[str] = field(default_factory=list)


def load(source: str | os.PathLike, *, variant: str | None = None, family: str | None = None,
         limits: RenderLimits = DEFAULT_LIMITS) -> ChatTemplate:
    """Load the chat template of `source` (GGUF, Jinja, tokenizer_config.json or a model directory).

    `variant` picks a named template ("tool_use", ...); the default is the source's main
    one. `family` overrides the family slug derived from the model's name. `limits` are the
    template's compile and render limits (RenderLimits).
    """
    if str(source) == "-":
        found = _from_stream(Path("<stdin>"), sys.stdin.buffer.read())
    else:
        path = Path(source)
        if not path.exists():
            raise LoadError(f"{path}: no such file or directory")
        if path.is_dir():
            found = _from_directory(path)
        elif not path.is_file():
            # A pipe or FIFO (<(cat t.jinja)): read once, completely; it cannot be read twice.
            found = _from_stream(path, _read_stream(path))
        elif _starts_with_gguf_magic(path) or path.suffix.lower() == ".gguf":
            found = _from_gguf(path)
        elif path.suffix.lower() == ".json":
            found = _from_tokenizer_config(path, _read_json(path))
        else:
            found = _from_jinja_file(path)

    if not found.templates:
        raise LoadError(f"{found.origin}: holds no chat template")
    variant = variant or ("default" if "default" in found.templates
                          else next(iter(found.templates)))
    if variant not in found.templates:
        known = ", ".join(found.templates)
        raise LoadError(f"{found.origin}: no chat template named {variant!r} (it has: {known})")
    model_slug = slugify(family) if family else found.model_slug
    template = ChatTemplate(
        source=found.templates[variant],
        name=found.name,
        family=slugify(family) if family else family_slug(model_slug, variant),
        model_slug=model_slug,
        origin=found.origin + ("" if variant == "default" else f" [{variant}]"),
        named_tokens=found.named_tokens,
        token_lists={name: tuple(tokens) for name, tokens in found.token_lists.items()},
        end_of_turn=tuple(_unique(found.end_of_turn)),
        special_tokens=tuple(_unique(found.special_tokens)),
        control_tokens=tuple(_unique(found.control_tokens)),
        variant=variant,
        variants=found.templates,
        limits=limits,
    )
    template.check()
    return template


# A template read from a pipe is held in memory: a bound on what is read.
MAX_STREAM_BYTES = 64 << 20


def _read_stream(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STREAM_BYTES + 1)
    except OSError as e:
        raise LoadError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_STREAM_BYTES:
        raise LoadError(f"{path}: more than {MAX_STREAM_BYTES >> 20} MiB from a pipe; "
                        "save it to a file first")
    return data


def _from_stream(path: Path, data: bytes) -> _Found:
    """A source read from a pipe or stdin: a chat template, or a tokenizer_config.json (not a GGUF:
    its metadata is read from a file, in place)."""
    if data[:4] == _GGUF_MAGIC:
        raise LoadError(f"{path}: a GGUF file cannot be read from a pipe; give its path")
    if not data.strip():
        raise LoadError(f"{path}: empty: no chat template")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LoadError(f"{path}: not UTF-8 text (byte {e.start} is "
                        f"{data[e.start]:#04x}); is it a template?") from None
    if text.lstrip().startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            config = None
        except (RecursionError, ValueError):  # (JSON, but none Python reads: say why)
            config = loads(text, str(path), LoadError)
        if isinstance(config, dict):
            return _from_tokenizer_config(path, config)
    return _Found(templates={"default": text}, name="template", model_slug="template",
                  origin=str(path))


def _unique(items):
    seen = set()
    for item in items:
        if item and item not in seen:
            seen.add(item)
            yield item


def _starts_with_gguf_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == _GGUF_MAGIC
    except OSError as e:
        raise LoadError(f"{path}: cannot read: {e.strerror}") from None


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LoadError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LoadError(f"{path}: not UTF-8 text (byte {e.start} is "
                        f"{data[e.start]:#04x}); is it a template?") from None


def _read_json(path: Path):
    return loads(_read_text(path), str(path), LoadError)


# --- GGUF ---------------------------------------------------------------------------


def _from_gguf(path: Path) -> _Found:
    meta = read_gguf_metadata(path)
    values = meta.values
    name = str(values.get("general.name") or "") or path.stem
    label = _usable_label(values.get("general.basename")) \
        or _usable_label(values.get("general.name")) or path.stem
    named = {f"{role}_token": text for role, text in meta.role_tokens.items()
             if f"{role}_token" in NAMED_TOKENS}
    end_of_turn = [meta.role_tokens[r] for r in ("eot", "eom") if r in meta.role_tokens]
    templates = meta.chat_templates
    if not templates:
        raise LoadError(f"{path}: this GGUF file has no chat template (no "
                        "tokenizer.chat_template key)")
    return _Found(
        templates=templates,
        name=name,
        model_slug=slugify(label),
        origin=f"{path}",
        named_tokens=named,
        end_of_turn=end_of_turn,
        special_tokens=meta.special_tokens,
        control_tokens=meta.control_tokens,
    )


def _usable_label(value) -> str:
    """A model name usable as a family label; a bare commit hash (seen in the wild) is not one."""
    if not isinstance(value, str) or not value.strip():
        return ""
    text = value.strip()
    if len(text) >= 32 and all(c in "0123456789abcdef" for c in text.lower()):
        return ""
    return text


# --- Jinja file ---------------------------------------------------------------------


def _from_jinja_file(path: Path) -> _Found:
    found = _Found(templates={"default": _read_text(path)}, name=path.stem,
                   model_slug=slugify(path.stem), origin=str(path))
    # A bare .jinja names no special tokens; a tokenizer_config.json beside it (a model
    # folder holding its template as a file) does: its tokens, and the end-of-turn tokens of
    # a generation_config.json there.
    config_path = path.parent / "tokenizer_config.json"
    if config_path.is_file():
        config = _from_tokenizer_config(config_path, _read_json(config_path))
        found.named_tokens, found.special_tokens = config.named_tokens, config.special_tokens
        found.token_lists = config.token_lists
        found.control_tokens = config.control_tokens
        found.end_of_turn = _generation_config_stops(path.parent, found)
    return found


# --- Hugging Face tokenizer_config.json / model directory ---------------------------------


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _unicode(text: str, path: Path, where: str) -> str:
    """`text` from a JSON file, which can hold a lone surrogate (`"\\ud800"`) no Unicode text
    holds (no file, tokenizer or hash takes it): refused, naming where it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LoadError(f"{path}: {where} holds a lone surrogate ({text[e.start]!r} at character "
                        f"{e.start}): that is not Unicode text") from None
    return text


def _json_kind(value) -> str:
    return {list: "JSON list", dict: "JSON object", bool: "JSON boolean", int: "JSON number",
            float: "JSON number"}.get(type(value), type(value).__name__)


def _from_tokenizer_config(path: Path, config) -> _Found:
    if not isinstance(config, dict):
        raise LoadError(f"{path}: expected a JSON object (a tokenizer_config.json)")
    templates: dict[str, str] = {}
    chat_template = config.get("chat_template")
    if isinstance(chat_template, str):
        templates["default"] = _unicode(chat_template, path, "chat_template")
    elif isinstance(chat_template, list):
        for entry in chat_template:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("template"), str)):
                raise LoadError(f"{path}: chat_template list entries must be {{\"name\": "
                                "..., \"template\": ...}")
            name = _unicode(entry["name"], path, "a chat_template entry's name")
            templates[name] = _unicode(entry["template"], path, f"chat_template {name!r}")
    elif chat_template is not None:
        raise LoadError(f"{path}: chat_template must be a string or a list of named templates")

    named = {}
    for key in NAMED_TOKENS:
        value = config.get(key)
        text = _token_text(value)
        if text is not None:
            named[key] = _unicode(text, path, key)
        elif value is not None:
            # (transformers takes a string or an AddedToken's {"content": ...}: a list or a
            # number is no token, and dropping it would render the template without it)
            raise LoadError(f"{path}: {key} is a {_json_kind(value)}; a token is a string or "
                            "{\"content\": \"...\"}")
    special: list[tuple[int, str]] = []
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for token_id, token in decoder.items():
            if isinstance(token, dict) and token.get("special") \
                    and isinstance(token.get("content"), str):
                try:
                    special.append((int(token_id), token["content"]))
                except ValueError:
                    pass
    special.sort()
    special = [(token_id, _unicode(text, path, f"added token {token_id}"))
               for token_id, text in special]
    extra: list[str] = []
    lists: dict[str, list[str]] = {}
    for key in TOKEN_LISTS:
        listed = config.get(key)
        if isinstance(listed, list):
            # (to the template as transformers passes it: the list, in its order)
            lists[key] = [_unicode(t, path, key) for t in map(_token_text, listed) if t is not None]
            extra.extend(t for t in lists[key] if t)
    name_or_path = config.get("name_or_path")
    label = name_or_path.rstrip("/").split("/")[-1] \
        if isinstance(name_or_path, str) and name_or_path.strip() else ""
    if not label:
        label = path.parent.name if path.name == "tokenizer_config.json" else path.stem
    return _Found(
        templates=templates,
        name=label,
        model_slug=slugify(label),
        origin=str(path),
        named_tokens=named,
        token_lists=lists,
        special_tokens=[text for _, text in special] + extra,
        control_tokens=[text for _, text in special] + extra,  # (all of them are marked special)
    )


def _from_directory(path: Path) -> _Found:
    config_path = path / "tokenizer_config.json"
    jinja_path = path / "chat_template.jinja"
    if not config_path.is_file() and not jinja_path.is_file():
        raise LoadError(f"{path}: a model directory must hold tokenizer_config.json "
                        "or chat_template.jinja")
    if config_path.is_file():
        found = _from_tokenizer_config(config_path, _read_json(config_path))
    else:
        found = _Found(templates={}, name=path.name, model_slug=slugify(path.name),
                       origin=str(path))
    found.origin = str(path)
    if not found.name or found.name == "tokenizer_config":
        found.name = path.name
    # Newer checkpoints keep the template beside the config; transformers prefers that file.
    if jinja_path.is_file():
        found.templates = {"default": _read_text(jinja_path),
                           **{k: v for k, v in found.templates.items() if k != "default"}}
    named_dir = path / "chat_templates"
    if named_dir.is_dir():
        for file in sorted(named_dir.glob("*.jinja")):
            found.templates.setdefault(file.stem, _read_text(file))
    found.end_of_turn = _generation_config_stops(path, found)
    return found


def _generation_config_stops(path: Path, found: _Found) -> list[str]:
    """End-of-turn tokens: generation_config.json's eos_token_id (one id or a list), by id ->
    text."""
    gen_path = path / "generation_config.json"
    config_path = path / "tokenizer_config.json"
    if not gen_path.is_file() or not config_path.is_file():
        return []
    gen = _read_json(gen_path)
    ids = gen.get("eos_token_id") if isinstance(gen, dict) else None
    ids = ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else []
    decoder = _read_json(config_path).get("added_tokens_decoder") or {}
    texts = []
    for token_id in ids:
        token = decoder.get(str(token_id)) if isinstance(decoder, dict) else None
        text = _token_text(token)
        if text:
            texts.append(text)
    return texts
