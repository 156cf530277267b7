"""Compile templates into the four artifacts, one family at a time, and keep them current.

`compile_template` writes, under a directory: grammars/<family>.peg, grammars/<family>.gbnf,
grammars/<family>.spec.json and generated/<family>.py. `build` does it for every family of
the manifest (families.toml); `check` says which committed files differ from a fresh build.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .gbnf import emit_gbnf
from .grammar import build as build_grammar
from .loader import load
from .parser_gen import generate_module
from .peg import emit_peg
from .probe import probe
from .template import ChatTemplate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def artifacts(template: ChatTemplate) -> dict[str, str]:
    """Relative path -> text of the four artifacts of one template."""
    spec = probe(template)
    grammar = build_grammar(spec, special_tokens=template.special_tokens)
    family = spec.family
    return {
        f"grammars/{family}.peg": emit_peg(grammar),
        f"grammars/{family}.gbnf": emit_gbnf(grammar),
        f"grammars/{family}.spec.json": spec.to_json(),
        f"generated/{family}.py": generate_module(spec),
    }


def compile_template(template: ChatTemplate, out_dir: Path) -> list[Path]:
    written = []
    for relative, text in artifacts(template).items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


@dataclass
class Family:
    name: str
    source: Path
    tokens: dict


def read_manifest(path: Path) -> list[Family]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: invalid TOML: {e}") from None
    families = []
    for entry in data.get("family", []):
        if not isinstance(entry, dict) or "name" not in entry or "source" not in entry:
            raise InputError(f"{path}: each [[family]] needs a name and a source")
        tokens = {k: v for k, v in entry.items() if k.endswith("_token")}
        families.append(Family(entry["name"], (path.parent / entry["source"]), tokens))
    return families


def family_template(family: Family) -> ChatTemplate:
    template = load(family.source, family=family.name)
    return template.with_tokens(**family.tokens) if family.tokens else template
