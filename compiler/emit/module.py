"""Generate the streaming parser files: the shared runtime and one thin module per family.

`generated/` is a package (or a folder on sys.path) of:

    __init__.py            a stamped docstring
    tplparse_runtime.py    the runtime (tplparse.runtime), assembled into one file from the
                           `###{standalone` … `###}` sections of its modules, in the order of
                           `runtime.MODULES` (the way lark's standalone tool assembles its own)
    <family>.py            the family's protocol as comments, FAMILY, TEMPLATE_SHA256, its
                           reading TABLES, and StreamParser / parse bound to them

`standalone_module` writes one self-contained file instead: the runtime inlined, then the
family's part. Every file is printed through the indenting emitter, imports only the
standard library, embeds template-derived strings only through repr(), and is the same
bytes for the same input.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .. import runtime
from ..probe.report import as_comment, protocol_sections
from ..spec import ProtocolSpec
from .code import CodeEmitter

RUNTIME_MODULE = "tplparse_runtime"
_RUNTIME_DIR = Path(runtime.__file__).resolve().parent
_SECTION = re.compile(r"^###\{standalone\n(.*?)^###\}\n", re.S | re.M)
_IMPORT = re.compile(r"^(?:import [\w.]+|from \w[\w.]* import [\w, ]+)$")

_USAGE = """\
    parser = StreamParser(tools=tools, generation_prompt=prompt)
    for chunk in stream: deltas = parser.feed(chunk)   # OpenAI-style deltas
    deltas = parser.end(finish_reason); message = parser.message

or parse(text, ...) for a whole output at once (the same result)."""


def python_literal(value, indent: int = 0, width: int = 100) -> str:
    """Plain data (dict, list, str, int, float, bool, None) as a Python literal: repr() for
    anything that fits on its line, else one item per line, indented by four."""
    text = repr(value)
    if len(text) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return text
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        items = [f"{pad}{key!r}: {python_literal(item, indent + 4, width)},"
                 for key, item in value.items()]
        return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
    items = [f"{pad}{python_literal(item, indent + 4, width)}," for item in value]
    return "[\n" + "\n".join(items) + "\n" + " " * indent + "]"


def module_name(family: str) -> str:
    """The importable name of a family's module: `qwen-qwen3-0.6b` -> `qwen_qwen3_0_6b`."""
    name = re.sub(r"\W+", "_", family.lower()).strip("_") or "family"
    return name if not name[0].isdigit() else f"family_{name}"


def _defined_names(source: str) -> list[str]:
    """The names a module's top level defines (functions, classes, assigned names)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names += [e.id for e in elements if isinstance(e, ast.Name)]
    return names


def _runtime_sections() -> tuple[list[str], list[tuple[str, str]]]:
    """(the standard-library imports, hoisted; [(module, its section without them)])."""
    imports: list[str] = []
    sections = []
    defined: dict[str, str] = {}
    for name in runtime.MODULES:
        source = (_RUNTIME_DIR / f"{name}.py").read_text(encoding="utf-8")
        found = _SECTION.findall(source)
        if len(found) != 1:
            raise RuntimeError(f"tplparse/runtime/{name}.py must have one "
                               "###{standalone … ###} section")
        body = []
        if re.search(r"^from \.", found[0], re.M):
            raise RuntimeError(f"tplparse/runtime/{name}.py imports a runtime module inside its "
                               "standalone section (the runtime's own imports go above "
                               "`###{standalone`, after `# isort: split`)")
        for line in found[0].split("\n"):
            if _IMPORT.match(line):
                if line not in imports:
                    imports.append(line)
            else:
                body.append(line)
        text = "\n".join(body).strip("\n")
        # One namespace for all of them: a name defined twice would silently replace the first.
        for target in _defined_names(text):
            if defined.setdefault(target, name) != name:
                raise RuntimeError(f"the runtime defines {target!r} in both "
                                   f"{defined[target]}.py and {name}.py")
        sections.append((name, text))
    return _merged_imports(imports), sections


def _merged_imports(imports: list[str]) -> list[str]:
    """The import lines sorted, `from m import …` lines of one module merged into one."""
    plain = sorted(line for line in imports if not line.startswith("from "))
    names: dict[str, set[str]] = {}
    for line in imports:
        if line.startswith("from "):
            module, imported = line[len("from "):].split(" import ", 1)
            names.setdefault(module, set()).update(name.strip() for name in imported.split(","))
    return plain + [f"from {module} import {', '.join(sorted(found))}"
                    for module, found in sorted(names.items())]


def _rule(title: str) -> str:
    return title + "-" * max(3, 88 - len(title))


def _emit_runtime(e: CodeEmitter) -> None:
    imports, sections = _runtime_sections()
    e.line("from __future__ import annotations")  # (the runtime's annotations are not evaluated)
    e.line()
    for line in imports:
        e.line(line)
    for name, text in sections:
        e.line()
        e.line()
        e.line(_rule(f"# --- {name} (tplparse/runtime/{name}.py) "))
        e.line()
        e.line()
        e.lines_of(text)


def runtime_source() -> str:
    """`tplparse_runtime.py`: the runtime every family module of a folder shares."""
    e = CodeEmitter()
    e.line("# @generated by tplparse from its runtime package (tplparse/runtime) — do not edit")
    e.line('"""tplparse\'s streaming parser runtime, in one file: standard library only.')
    e.line()
    e.line("Each family module beside it binds this runtime to the family's tables; import those.")
    e.line("Layers, in order: " + ", ".join(runtime.MODULES) + ".")
    e.line('"""')
    e.line()
    _emit_runtime(e)
    return e.text()


def package_init() -> str:
    """`__init__.py` of a generated folder (the same for every family and build)."""
    e = CodeEmitter()
    e.line("# @generated by tplparse — do not edit")
    e.line('"""Streaming parsers generated by tplparse, one module per model family.')
    e.line()
    e.line("    from generated.<family> import StreamParser, parse")
    e.line()
    e.line(f"Each module shares {RUNTIME_MODULE}.py (standard library only); "
           "`tplparse compile --standalone`")
    e.line("writes a single self-contained file instead.")
    e.line('"""')
    return e.text()


def _stamp(e: CodeEmitter, spec: ProtocolSpec, standalone: bool) -> None:
    e.line(f"# @generated by tplparse from {spec.template_name!r} (sha256 "
           f"{spec.template_sha256}) — do not edit")
    e.line(f'"""Streaming parser for the {spec.family} family (generated by tplparse'
           + ("; standalone: the runtime is inlined below)." if standalone else ")."))
    e.line()
    e.lines_of(_USAGE)
    e.line('"""')
    e.line()
    e.line("# The family's protocol, as the probe derived it (`tplparse probe` "
           "prints the same report):")
    for line in as_comment(protocol_sections(spec)):
        e.line(line)


def _emit_family(e: CodeEmitter, spec: ProtocolSpec, tables: runtime.ReadingTables, protocol: str,
                 engine: str, read_all: str) -> None:
    """FAMILY, TEMPLATE_SHA256, TABLES, PROTOCOL, and StreamParser / parse bound to them."""
    e.line(f"FAMILY = {spec.family!r}")
    e.line(f"TEMPLATE_NAME = {spec.template_name!r}")
    e.line(f"TEMPLATE_SHA256 = {spec.template_sha256!r}")
    e.line("# What the runtime reads (tplparse.grammar.reading wrote it from "
           "the spec; the spec with")
    e.line("# its evidence and warnings is grammars/<family>.spec.json).")
    e.lines_of("TABLES = " + python_literal(tables))
    e.line(f"PROTOCOL = {protocol}(TABLES)  # prepared once, shared by every parser of the family")
    e.line()
    e.line()
    e.line(f"class StreamParser({engine}):")
    with e.indent():
        e.line(f'"""Feed the {spec.family} family\'s output in chunks (str or bytes); get '
               'OpenAI-style deltas back."""')
        e.line()
        e.line('def __init__(self, tools=None, generation_prompt=None, start=None, '
               'calls="deltas", validate=None):')
        with e.indent():
            e.line("super().__init__(PROTOCOL, tools=tools, generation_prompt=generation_prompt, "
                   "start=start, calls=calls,")
            e.line("                 validate=validate)")
    e.line()
    e.line()
    e.line('def parse(text, tools=None, generation_prompt=None, start=None, '
           'finish_reason="stop", calls="deltas",')
    e.line("          validate=None):")
    with e.indent():
        e.line('"""Parse a whole output at once: the same result as streaming it."""')
        e.line("parser = StreamParser(tools=tools, generation_prompt=generation_prompt, "
               "start=start, calls=calls,")
        e.line("                      validate=validate)")
        e.line(f"return {read_all}(parser, text, finish_reason)")


def family_module(spec: ProtocolSpec, tables: runtime.ReadingTables) -> str:
    """`<family>.py`: the family's tables and parser, on the shared runtime beside it."""
    e = CodeEmitter()
    _stamp(e, spec, standalone=False)
    e.line()
    e.line("try:  # generated/ imported as a package")
    with e.indent():
        e.line(f"from . import {RUNTIME_MODULE} as _runtime")
    e.line(f"except ImportError:  # this file and {RUNTIME_MODULE}.py side by side on sys.path")
    with e.indent():
        e.line(f"import {RUNTIME_MODULE} as _runtime")
    e.line()
    _emit_family(e, spec, tables, "_runtime.Protocol", "_runtime.StreamParser", "_runtime.read_all")
    return e.text()


def standalone_module(spec: ProtocolSpec, tables: runtime.ReadingTables) -> str:
    """One self-contained file: the runtime inlined, then the family's tables and parser."""
    e = CodeEmitter()
    _stamp(e, spec, standalone=True)
    e.line()
    _emit_runtime(e)
    e.line()
    e.line()
    e.line(_rule("# --- the family "))
    e.line()
    e.line("# The runtime's parser, bound below to this family's tables "
           "(StreamParser and parse() are")
    e.line("# the family's from here on).")
    e.line("_RuntimeParser = StreamParser")
    e.line()
    _emit_family(e, spec, tables, "Protocol", "_RuntimeParser", "read_all")
    return e.text()


__all__ = ["RUNTIME_MODULE", "family_module", "module_name", "package_init", "runtime_source",
           "standalone_module"]
