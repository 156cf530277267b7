"""The `tplparse` command line.

Every error a user can cause prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from .display import json_text, printable, printable_lines
from .errors import InputError, TplparseError
from .source.isolation import DEFAULT_WORK_LIMITS, WorkLimits, run_isolated

if TYPE_CHECKING:
    from .pipeline import Family
from .version import __version__

# Paths are checked where they are read, so that every problem with one is one line naming it.
_PATH = click.Path(readable=False)


class _Group(click.Group):
    """Turns every error a user can cause into one line on stderr and exit status 2: tplparse's
    own errors, click's usage errors, and a broken pipe on the output."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TplparseError as e:
            click.echo(f"tplparse: error: {_one_line(str(e))}", err=True)
            ctx.exit(2)

    def main(self, *args, **kwargs):
        # click's standalone mode prints a usage block for a usage error; tplparse prints one line.
        try:
            # (click's overloads cannot tell which of them *args picks)
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.format_message())
            code = 2
        except click.UsageError as e:
            hint = f" (see: {e.ctx.command_path} --help)" if e.ctx is not None else ""
            click.echo(f"tplparse: error: {_one_line(e.format_message())}{hint}", err=True)
            code = 2
        except click.ClickException as e:
            click.echo(f"tplparse: error: {_one_line(e.format_message())}", err=True)
            code = e.exit_code
        except click.Abort:
            click.echo("tplparse: error: interrupted", err=True)
            code = 130
        except BrokenPipeError:
            # The reader of our output went away (| head): nothing more to say, to anyone.
            sys.stderr = open(os.devnull, "w")
            code = 1
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: str) -> str:
    """`text` with every control character, line break, lone surrogate and invisible format
    character (a bidirectional override) escaped: an error is one line, and what a file or a
    template put in it cannot rewrite the terminal (tplparse.display)."""
    return printable(text)


def _say(text: str = "", err: bool = False, nl: bool = True) -> None:
    """click.echo of text that holds what a user's files say (a model's name, a template's
    words, a path): each line made printable (tplparse.display); the line breaks kept."""
    click.echo(printable_lines(text), err=err, nl=nl)


@click.group(cls=_Group)
# (not looked up in the installed metadata: 45 ms)
@click.version_option(__version__, prog_name="tplparse")
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=DEFAULT_WORK_LIMITS.seconds,
              show_default=True, envvar="TPLPARSE_TIME_LIMIT", metavar="SECONDS",
              help="The render budget: CPU time for all of a command's work with the template "
                   "(compile, every render of a probe and a proof); past it the work is stopped "
                   "(and past a wall-clock backstop of 3 times it and 10 s). "
                   "Also $TPLPARSE_TIME_LIMIT.")
@click.option("--memory-limit", type=click.IntRange(min=64),
              default=DEFAULT_WORK_LIMITS.memory_bytes >> 20, show_default=True,
              envvar="TPLPARSE_MEMORY_LIMIT", metavar="MB",
              help="The memory that work may take (address space, beyond what tplparse holds "
                   "before it); an allocation past it fails. Also $TPLPARSE_MEMORY_LIMIT.")
@click.pass_context
def main(ctx, time_limit, memory_limit):
    """Turn a model's chat template into parsers and grammars."""
    ctx.obj = WorkLimits(seconds=time_limit, memory_bytes=memory_limit << 20)


def _work_limits() -> WorkLimits:
    return click.get_current_context().find_object(WorkLimits) or DEFAULT_WORK_LIMITS


def _isolated(job, source):
    """`job()` (everything the command does with the template: load, compile, render, probe,
    prove) in a child process under the command's budget and memory limit, killed at the
    budget (tplparse.source.isolation); its value here."""
    return run_isolated(job, _work_limits(), name=str(source))


def _render_limits():
    """Each render's limits, from the command's (a render may take the whole budget)."""
    from .source import RenderLimits

    limits = _work_limits()
    return RenderLimits(seconds=limits.seconds, max_memory_growth_bytes=limits.memory_bytes)


def _read_json_file(path: str, what: str):
    from .jsontext import loads

    return loads(_read_text_file(path, what), "<stdin>" if path == "-" else path, InputError, what)


def _json_kind(value) -> str:
    return {dict: "JSON object", str: "JSON string", bool: "JSON boolean", type(None): "JSON null",
            int: "JSON number", float: "JSON number"}.get(type(value), type(value).__name__)


def _decode(data: bytes, path: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: {what} is not UTF-8 (byte {e.start} is "
                         f"{data[e.start]:#04x})") from None


def _read_text_file(path: str, what: str) -> str:
    try:
        if path == "-":
            return _decode(sys.stdin.buffer.read(), "<stdin>", what)
        with open(path, "rb") as f:
            return _decode(f.read(), path, what)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}") from None


def _token_options(command):
    """--bos-token / --eos-token: the tokens a source that does not name them (a bare .jinja) is
    rendered with."""
    command = click.option("--eos-token", help="The eos token the template is rendered with (a "
                                               "bare .jinja names none).")(command)
    return click.option("--bos-token", help="The bos token the template is rendered with (a "
                                            "bare .jinja names none).")(command)


def _override_option(command):
    """--override FILE: a user's declarative override of the probe's spec (docs/overrides.md)."""
    return click.option("--override", "override_path", type=_PATH, metavar="FILE",
                        help="A declarative override of the probe's spec (JSON: why, "
                             "patch, template_sha256, source), applied after the shipped "
                             "ones and proved like the rest.")(command)


def _read_override(path):
    """The override file, read and checked here, before any work with the template."""
    from pathlib import Path

    from .probe.overrides import read_override

    return read_override(Path(path)) if path else None


def _load(source, variant=None, family=None, bos_token=None, eos_token=None):
    from .source import load

    template = load(source, variant=variant, family=family, limits=_render_limits())
    tokens = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token))
              if v is not None}
    return template.with_tokens(**tokens) if tokens else template


def _parse_var(text: str) -> tuple[str, object]:
    """KEY=VALUE; VALUE is JSON when it parses as JSON (true, 3, "x", [..]), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--var {text!r}: expected KEY=VALUE")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    except (RecursionError, ValueError):
        from .jsontext import loads

        loads(raw, f"--var {key.strip()}", InputError)  # (raises, naming what is wrong)
    return key.strip(), value


@main.command()
@click.argument("source", type=_PATH)
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def info(source, variant, as_json):
    """Print what was loaded from SOURCE: name, sha256, tokens, named templates."""
    template = _isolated(lambda: _load(source, variant=variant), source)
    facts = {
        "name": template.name,
        "family": template.family,
        "origin": template.origin,
        "variant": template.variant,
        "variants": list(template.variants),
        "sha256": template.sha256,
        "template_chars": len(template.source),
        "template_lines": template.source.count("\n") + 1,
        "named_tokens": dict(template.named_tokens),
        "token_lists": {name: list(tokens) for name, tokens in template.token_lists.items()},
        "end_of_turn": list(template.end_of_turn),
        "special_tokens": list(template.special_tokens),
    }
    if as_json:
        click.echo(json_text(facts, indent=2))
        return
    rows = [
        ("name", template.name),
        ("family", template.family),
        ("origin", template.origin),
        ("template", f"{template.variant}: {facts['template_chars']} chars, "
                     f"{facts['template_lines']} lines"),
        ("sha256", template.sha256),
        ("named templates", ", ".join(template.variants)),
    ]
    for key, value in template.named_tokens.items():
        rows.append((key, repr(value)))
    for key, tokens in template.token_lists.items():
        rows.append((key, f"{len(tokens)}: " + " ".join(map(repr, tokens[:20]))
                     + (f" ... (+{len(tokens) - 20} more)" if len(tokens) > 20 else "")))
    rows.append(("end of turn", " ".join(map(repr, template.end_of_turn)) or "-"))
    specials = template.special_tokens
    shown = " ".join(specials[:40]) + (f" ... (+{len(specials) - 40} more; --json lists all)"
                                       if len(specials) > 40 else "")
    rows.append(("special tokens", f"{len(specials)}: {shown}" if specials else "none"))
    width = max(len(k) for k, _ in rows) + 1
    for key, value in rows:
        _say(f"{key + ':':<{width}} {value}")


@main.command()
@click.argument("source", type=_PATH)
@click.argument("messages", type=_PATH)
@click.option("--tools", "tools_path", type=_PATH,
              help="OpenAI-style tool definitions (a JSON list).")
@click.option("--no-generation-prompt", is_flag=True,
              help="Do not open an assistant turn at the end.")
@click.option("--continue-final-message", is_flag=True,
              help="End the prompt inside the final assistant message, right after its text "
                   "(its content, else its reasoning_content), for the model to continue it: "
                   "transformers' continue_final_message. No new turn is opened.")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE",
              help="A template variable; VALUE is parsed as JSON when it can be "
                   "(enable_thinking=false).")
@click.option("--var-str", "string_variables", multiple=True, metavar="KEY=VALUE",
              help="A template variable that is a string, whatever it looks like "
                   "(functions='[...]', a JSON string).")
@click.option("--variant", help="A named template of the source (default: tool_use when "
                                "--tools is given and the source has it, as transformers "
                                "does; else the main one).")
@_token_options
def render(source, messages, tools_path, no_generation_prompt, continue_final_message, variables,
           string_variables, variant, bos_token, eos_token):
    """Render MESSAGES (a JSON list of chat messages, or - for stdin) with SOURCE's chat
    template."""
    conversation = _read_json_file(messages, "messages")
    tools = _read_json_file(tools_path, "tools") if tools_path else None
    if isinstance(conversation, dict) and "messages" in conversation:
        if tools is None:
            tools = conversation.get("tools")
        conversation = conversation["messages"]
    if not isinstance(conversation, list):
        raise InputError(f"{messages}: expected a JSON list of messages (or an "
                         "object with \"messages\")")
    if tools is not None and not isinstance(tools, list):
        raise InputError(f"{tools_path}: expected a JSON list of tool definitions")
    extra = dict(_parse_var(v) for v in variables)
    for text in string_variables:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--var-str {text!r}: expected KEY=VALUE")
        extra[key.strip()] = value

    def rendered():
        template = _load(source, bos_token=bos_token, eos_token=eos_token)
        if variant:
            template = template.with_variant(variant)
        elif tools and "tool_use" in template.variants:
            template = template.with_variant("tool_use")
        if continue_final_message:
            from .bridge.prompt import continued_render

            return continued_render(template, conversation, tools, **extra)
        return template.render(conversation, tools=tools,
                               add_generation_prompt=not no_generation_prompt, **extra)

    if continue_final_message:
        from .bridge.prompt import final_message_text

        if no_generation_prompt:
            raise InputError("--continue-final-message opens no turn already: leave out "
                             "--no-generation-prompt")
        final_message_text(conversation)  # (refused before any render: no such message)
    text = _isolated(rendered, source)
    _check_unicode(text, source)
    click.echo(text, nl=False)


def _check_unicode(text: str, source) -> None:
    """A prompt holding a lone surrogate (a template can write '\\ud800') is no Unicode text: no
    UTF-8 encodes it, and printing it another way would change it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{source}: the rendered prompt is not valid Unicode: the template writes "
                         f"a lone surrogate ({text[e.start]!r}) at character {e.start}") from None


@main.command()
@click.argument("source", type=_PATH)
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--json", "as_json", is_flag=True, help="Print the ProtocolSpec as JSON.")
@_override_option
@_token_options
def probe(source, variant, as_json, override_path, bos_token, eos_token):
    """Derive SOURCE's protocol (reasoning, content, tool calls, end of turn) by rendering it."""
    from .probe.report import as_text, protocol_sections, provenance_sections

    override = _read_override(override_path)
    template, spec, checks, proof = _isolated(
        lambda: _probed(_load(source, variant=variant, bos_token=bos_token, eos_token=eos_token),
                        override), source)
    if proof.error:
        raise InputError(_proof_error(proof))
    if as_json:
        click.echo(spec.to_json(), nl=False)
    else:
        title = (f"{template.name} — family {spec.family}, template sha256 "
                 f"{spec.template_sha256[:16]}…, input shape: {spec.shape}")
        _say(as_text(title, protocol_sections(spec) + provenance_sections(spec)), nl=False)
        passed = sum(c.passed for c in checks)
        _say(f"\nCheck: the spec re-renders {passed} of {len(checks)} standard turns (fresh "
                   "values) exactly as the template does")
        for check in checks:
            if not check.passed:
                _say(f"  {check.turn}: {check.detail}")
        _say("\n" + proof.table(), nl=False)
    if not proof.ok:
        # (what compile refuses, probe refuses: the same proof, the same words)
        raise InputError(_proof_error(proof))


def _probed(template, override=None):
    """(template, its spec, the spec's checks against the standard turns, the compile's proof
    of the parser made from the spec). `override`: a user's, applied to the spec."""
    from .check.proof import prove
    from .probe import probe as run_probe
    from .probe import verify
    from .probe.overrides import blamed_on

    spec = run_probe(template, override=override)
    with blamed_on(override):
        checks = verify(template, spec)
        proof = prove(template, spec, override=override)
    return template, spec, checks, proof


def _probed_for_a_grammar(template, override=None):
    """(template, its spec): the probe, refused as compile refuses a template that renders
    nothing to prove a parser on (the grammar would have nothing to describe)."""
    from .check.outputs import mode_outputs
    from .check.proof import nothing_to_prove
    from .probe import probe as run_probe

    spec = run_probe(template, override=override)
    nothing = nothing_to_prove(spec, mode_outputs(template, spec))
    if nothing:
        raise InputError(f"{spec.family}: {nothing}: nothing to build a grammar from")
    return template, spec


def _grammar_options(command):
    """The options every grammar command takes: what the output may be."""
    for option in reversed([
        click.option("--tools", "tools_path", type=_PATH,
                     help="OpenAI-style tool definitions: names and argument schemas."),
        click.option("--tool-choice", default=None,
                     help="auto (the default), required, none, a tool name, or "
                          '{"type": "function", "function": {"name": NAME}} for a '
                          'tool named like a mode.'),
        click.option("--parallel/--no-parallel", default=True, show_default=True,
                     help="Allow several calls in one turn."),
        click.option("--json-schema", "schema_path", type=_PATH,
                     help="Structured output: the answer is JSON of this schema."),
        click.option("--open-objects", is_flag=True,
                     help="Let an object take properties its schema does not list unless "
                          "additionalProperties is false (JSON Schema's own rule). Default: "
                          "llama.cpp's and OpenAI strict mode's convention, no unlisted "
                          "property where the schema lists properties, unless "
                          "additionalProperties allows them."),
        click.option("--mode", default="default", show_default=True,
                     help="The generation-prompt mode whose start state the output follows "
                          "(default, thinking, no_thinking)."),
        click.option("--variant", help="A named template of the source (e.g. tool_use)."),
    ]):
        command = option(command)
    return _override_option(_token_options(command))


@main.command()
@click.argument("source", type=_PATH)
@click.option("--format", "grammar_format", type=click.Choice(["gbnf", "lark"]), default="gbnf",
              show_default=True,
              help="gbnf: llama.cpp's grammars; lark: llguidance's Lark dialect (llama.cpp's "
                   "%llguidance, vLLM's guidance backend, SGLang, Guidance).")
@click.option("--llama-request", is_flag=True,
              help="Print the JSON fields llama.cpp's server takes (GBNF only).")
@_grammar_options
def grammar(**given):
    """Print a grammar for SOURCE's output, for constrained decoding.

    Without --tools: any tool name, any JSON arguments. With --tools: the offered names only,
    each call's arguments by its tool's JSON Schema. An object whose schema lists properties
    takes no other unless additionalProperties allows it (llama.cpp's and OpenAI strict mode's
    convention; --open-objects: JSON Schema's own rule). Schema keywords the grammar does not
    enforce are reported on stderr. The grammar is checked before it is printed: GBNF with
    lark, and with llama.cpp when it is installed; Lark with llguidance when it is installed.
    """
    _print_grammar(_GrammarCommand(**given))


@main.command()
@click.argument("source", type=_PATH)
@click.option("--llama-request", is_flag=True,
              help="Print the JSON fields llama.cpp's server takes.")
@_grammar_options
def gbnf(**given):
    """Print a GBNF grammar for SOURCE's output (`tplparse grammar --format gbnf`)."""
    _print_grammar(_GrammarCommand(grammar_format="gbnf", **given))


@dataclass(frozen=True)
class _GrammarCommand:
    """What a grammar command (`grammar`, `gbnf`) is given, as click reads it."""

    source: str
    llama_request: bool
    tools_path: str | None
    tool_choice: str | None
    parallel: bool
    schema_path: str | None
    open_objects: bool
    mode: str
    variant: str | None
    bos_token: str | None
    eos_token: str | None
    override_path: str | None
    grammar_format: str = "gbnf"


def _check_tools(tools, path) -> None:
    """A list of tool definitions, each with a name (OpenAI's shape, or the function alone)."""
    if not isinstance(tools, list):
        raise InputError(f"{path}: expected a JSON list of tool definitions, not "
                         f"a {_json_kind(tools)}")
    for number, tool in enumerate(tools, 1):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise InputError(f"{path}: tool {number} has no name (expected {{\"type\": "
                             "\"function\", \"function\": {\"name\": ..., "
                             "\"parameters\": {...}}}})")
        assert isinstance(function, dict)  # (a name was read from it)
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{path}: tool {number}'s name is not valid "
                             "Unicode (a lone surrogate)") from None
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, (dict, bool)):
            raise InputError(f"{path}: tool {name!r}: parameters must be a JSON Schema object")


def _print_grammar(command: _GrammarCommand) -> None:
    from .bridge.grammar import GrammarForm, GrammarRefused, GrammarRequest, checked, grammar_for
    from .probe.overrides import blamed_on

    source, tool_choice = command.source, command.tool_choice
    if command.llama_request and command.grammar_format != "gbnf":
        raise InputError("--llama-request: llama.cpp's server fields carry a GBNF grammar; "
                         "leave out --format lark")
    tools = _read_json_file(command.tools_path, "tools") if command.tools_path else None
    if tools is not None:
        _check_tools(tools, command.tools_path)
    schema = _read_json_file(command.schema_path, "JSON schema") if command.schema_path else None
    if tool_choice is not None and tool_choice.lstrip().startswith("{"):
        try:
            tool_choice = json.loads(tool_choice)
        except json.JSONDecodeError as e:
            raise InputError(f"--tool-choice {tool_choice!r}: not JSON ({e.msg})") from None
    elif tool_choice not in (None, "auto", "required", "none") and not any(
            (t.get("function") or t).get("name") == tool_choice for t in tools or []):
        raise InputError(f"--tool-choice {tool_choice!r}: not auto, required, none, or the name of "
                         "a tool in --tools")
    form = GrammarForm.LLAMA_REQUEST if command.llama_request \
        else GrammarForm(command.grammar_format)
    try:
        request = GrammarRequest(form, tools=tools, tool_choice=tool_choice,
                                 parallel=command.parallel, content_schema=schema,
                                 open_objects=command.open_objects, mode=command.mode)
    except ValueError as e:
        raise InputError(f"--tool-choice: {e}") from None
    override = _read_override(command.override_path)
    template, spec = _isolated(
        lambda: _probed_for_a_grammar(_load(source, variant=command.variant,
                                            bos_token=command.bos_token,
                                            eos_token=command.eos_token), override), source)
    if request.mode not in spec.modes:
        raise InputError(f"--mode {request.mode!r}: this template has the modes "
                         f"{', '.join(spec.modes)}")
    if spec.tool_calls is None and tool_choice == "required":
        raise InputError("--tool-choice required: this template does not render tool calls")
    try:
        with blamed_on(override):
            grammar = grammar_for(template, spec, request, check=False)
    except ValueError as e:
        raise InputError(str(e)) from None
    for warning in grammar.warnings:
        _say(f"tplparse: warning: {warning}", err=True)
    if form == GrammarForm.LARK and not template.control_tokens:
        _say(f"tplparse: warning: {source} names no control tokens (a bare .jinja names "
                   "none): the grammar writes every marker as text, and a model whose tokenizer "
                   "keeps a marker as a control token writes a token this grammar refuses; give "
                   "the model's GGUF or tokenizer_config.json", err=True)
    try:
        checked(grammar, template.control_tokens)
    except GrammarRefused as e:
        raise InputError(str(e)) from None
    if form == GrammarForm.LLAMA_REQUEST:
        click.echo(json_text(grammar.fields, indent=2))
    else:
        click.echo(grammar.text, nl=False)


@main.command(name="compile")
@click.argument("source", type=_PATH)
@click.option("-o", "--out", "out_dir", type=_PATH, default=".", show_default=True,
              help="Where grammars/ and generated/ go.")
@click.option("--family", help="The family name (default: from the model's name).")
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--standalone", is_flag=True,
              help="Write the parser as one self-contained file (the runtime inlined) instead of a "
                   "module beside the shared generated/tplparse_runtime.py.")
@click.option("--allow-partial", is_flag=True,
              help="Write the files even when the parser does not read back every turn the "
                   "template renders (the spec and the module record which); exit status 1.")
@_override_option
@_token_options
def compile_command(source, out_dir, family, variant, standalone, allow_partial, override_path,
                    bos_token, eos_token):
    """Write SOURCE's PEG, GBNF and Lark grammars, its spec and its streaming parser module.

    The compile proves the parser first: every standard turn the template renders is read
    back by the parser (one-shot and one character at a time) and accepted by the GBNF
    grammar. A turn that does not prove is an error (exit 2, nothing written). The deviated
    forms of the proved turns (what the tolerance rules read) are fed too; one that does not
    read back as its render is a warning.

    A turn that does not prove names the spec fields involved; --override FILE sets them
    (a partial spec keyed to the template's sha256, with why and source), and the result is
    proved like any other.
    """
    from pathlib import Path

    from .pipeline import compile_template, write_files

    override = _read_override(override_path)
    compiled = _isolated(
        lambda: compile_template(_load(source, variant=variant, family=family, bos_token=bos_token,
                                       eos_token=eos_token),
                                 standalone=standalone, allow_partial=allow_partial,
                                 override=override), source)
    _say(compiled.proof.table(), nl=False)
    for warning in compiled.spec.warnings:
        if warning.startswith(_NO_CALLS) and warning != _NO_CALLS:
            # (why no call format was found, and what the template reads instead)
            _say(f"tplparse: warning: {compiled.spec.family}: {warning}", err=True)
    proof = compiled.proof
    if not proof.ok and not allow_partial:
        raise InputError(_proof_error(proof))
    for path in write_files(compiled.files, Path(out_dir)):
        _say(f"wrote {path}")
    if proof.not_tolerated:
        # (the parser reads the renders; a tolerance rule does not hold here: said, not fatal)
        _say(f"tplparse: warning: {proof.family}: {len(proof.not_tolerated)} deviated "
                   "form(s) of its turns are not read back as the render (first: "
                   f"{proof.not_tolerated[0]})", err=True)
    if not proof.ok:
        _say(f"tplparse: warning: {_proof_error(proof)} (written anyway: --allow-partial)",
                   err=True)
        sys.exit(1)


# The probe's warning for a template that renders no call (probe/derive.py).
_NO_CALLS = "the template does not render tool calls"


def _proof_error(proof) -> str:
    if proof.error:
        return f"{proof.family}: {proof.error}: nothing to prove the parser on"
    first = proof.unproved[0]
    more = f" (and {len(proof.unproved) - 1} more turns)" if len(proof.unproved) > 1 else ""
    # (a render that breaks its own notation is corrected in the template, not overridden)
    way = "" if proof.defects else " (an override sets them: compile --override FILE)"
    fields = f"; spec fields involved: {', '.join(first.fields)}{way}" if first.fields else ""
    defect = f"; {proof.defects[0]}" if proof.defects else ""
    return (f"{proof.family}: the parser does not read back the {first.turn!r} turn: "
            f"{first.detail}{more}{fields}{defect}")


class _Parsers:
    """Where `parse` gets its parsers: a generated module, or a template compiled in memory."""

    def __init__(self, make, family: str, template_name: str, template_sha256: str):
        self.make, self.family = make, family
        self.template_name, self.template_sha256 = template_name, template_sha256


def _load_generated(path) -> types.ModuleType:
    """A generated family module from its file, with the runtime beside it importable (as a
    package member, the way `from generated import <family>` imports it)."""
    import hashlib
    import importlib.util
    import sys as _sys

    folder_digest = hashlib.sha256(str(path.resolve().parent).encode()).hexdigest()
    package = "tplparse_generated_" + folder_digest[:12]
    if package not in _sys.modules:
        holder = types.ModuleType(package)
        holder.__path__ = [str(path.resolve().parent)]
        _sys.modules[package] = holder
    spec = importlib.util.spec_from_file_location(f"{package}.{path.stem}", path)
    assert spec is not None and spec.loader is not None  # (a .py file always has both)
    module = importlib.util.module_from_spec(spec)
    _sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - a broken module file is bad input
        _sys.modules.pop(spec.name, None)
        raise InputError(f"{path}: not a generated parser module "
                         f"({type(e).__name__}: {e})") from None
    return module


def _parsers(source: str) -> _Parsers:
    """A generated module from a .py file, or the parser of a template source, probed now."""
    from pathlib import Path

    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise InputError(f"{source}: no such file")
        module = _load_generated(path)
        if not hasattr(module, "StreamParser") or not hasattr(module, "TEMPLATE_SHA256"):
            raise InputError(f"{source}: not a generated parser module (no StreamParser)")
        return _Parsers(module.StreamParser, module.FAMILY, getattr(module, "TEMPLATE_NAME", ""),
                        module.TEMPLATE_SHA256)
    from . import runtime
    from .bridge import compile_in_memory

    spec, protocol = _isolated(lambda: compile_in_memory(_load(source)), source)

    def make(tools=None, generation_prompt=None, start=None):
        return runtime.StreamParser(protocol, tools=tools, generation_prompt=generation_prompt,
                                    start=start)

    return _Parsers(make, spec.family, spec.template_name, spec.template_sha256)


@main.command()
@click.argument("source", type=_PATH)
@click.option("--tools", "tools_path", type=_PATH,
              help="OpenAI-style tool definitions (types key/value arguments).")
@click.option("--prompt", "prompt_path", type=_PATH,
              help="The rendered prompt: decides the start state.")
@click.option("--start", type=click.Choice(["reasoning", "content"]),
              help="Override the start state.")
@click.option("--finish-reason", default="stop", show_default=True,
              help="How the generation ended (stop, length).")
@click.option("--stream", is_flag=True, help="Print the deltas, one per line (fed in small "
                                             "chunks), then the message.")
@click.option("--record", "record_path", type=_PATH,
              help="Append a transcript (the chunks fed, the message, the template's "
                   "identity: docs/cli.md, tplparse replay) to this JSON Lines file; "
                   "`tplparse replay` reads it.")
def parse(source, tools_path, prompt_path, start, finish_reason, stream, record_path):
    """Parse a model's raw output (stdin) with SOURCE's parser (a generated .py, or a template)."""
    parsers = _parsers(source)
    tools = _read_json_file(tools_path, "tools") if tools_path else None
    if tools is not None and not isinstance(tools, list):
        raise InputError(f"{tools_path}: expected a JSON list of tool definitions, not "
                         f"a {_json_kind(tools)}")
    prompt = _read_text_file(prompt_path, "the prompt") if prompt_path else None
    text = _decode(sys.stdin.buffer.read(), "<stdin>", "the model output")
    try:
        parser = parsers.make(tools=tools, generation_prompt=prompt, start=start)
    except (TypeError, ValueError) as e:
        # The runtime checks its arguments at the door; here they came from these files.
        where = tools_path if str(e).startswith("tools") else prompt_path
        raise InputError(f"{where}: {e}") from None
    if not finish_reason:
        raise InputError("--finish-reason: expected a word such as stop or length")
    if record_path:
        from .bridge.transcripts import Identity, Recorder

        identity = Identity(parsers.template_sha256, parsers.template_name, parsers.family)
        parser = Recorder(parser, identity, tools=tools, start=start, generation_prompt=prompt,
                          writer="parse")
    if stream:
        for i in range(0, len(text), 8):
            for delta in parser.feed(text[i:i + 8]):
                click.echo(json_text(delta))
        for delta in parser.end(finish_reason):
            click.echo(json_text(delta))
        click.echo(json_text({"message": parser.message}))
    else:
        parser.feed(text)
        parser.end(finish_reason)
        click.echo(json_text(parser.message, indent=2))
    if record_path:
        from .bridge.transcripts import append_transcript

        try:
            append_transcript(record_path, parser.transcript())
        except OSError as e:
            raise InputError(f"{record_path}: cannot record: {e.strerror or e}") from None


@main.command()
@click.argument("source", type=_PATH)
@click.argument("transcripts", nargs=-1, required=True, type=_PATH)
@click.option("--start", type=click.Choice(["reasoning", "content", "after_reasoning"]),
              help="Start every replay here instead of the recorded start state.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def replay(source, transcripts, start, as_json):
    """Read recorded transcripts (JSON Lines: parse --record, serve --record) again with
    SOURCE's parser (a generated .py, or a template), one-shot and in their recorded chunks,
    and say what changed: content, reasoning, calls, errors, finish reason, stream.

    Exit status: 0 nothing changed, 1 something did, 2 bad input.
    """
    from .bridge.replayer import replay as replay_one
    from .bridge.replayer import report_json
    from .bridge.transcripts import read_transcripts

    loaded = [(f"{path}:{number}", t) for path in transcripts
              # (every file read before any work)
              for number, t in enumerate(read_transcripts(path), 1)]
    parsers = _parsers(source)
    results = []
    for where, transcript in loaded:
        try:
            results.append(replay_one(transcript, parsers.make, where, start))
        except (TypeError, ValueError) as e:  # the runtime refused the recorded tools or start
            raise InputError(f"{where}: {e}") from None
    if as_json:
        click.echo(json_text(report_json(results), indent=2))
    else:
        _print_replay(results, parsers)
    sys.exit(1 if any(r.changed for r in results) else 0)


def _print_replay(results, parsers) -> None:
    _say(f"replayed with {parsers.template_name or parsers.family} (family {parsers.family}, "
               f"sha256 {parsers.template_sha256[:16]}…)")
    for r in results:
        recorded = r.transcript
        same = " (the recorded template)" \
            if recorded.template_sha256 == parsers.template_sha256 \
            else f" (recorded with {recorded.family}, sha256 {recorded.template_sha256[:16]}…)"
        _say(f"  {r.where}{same}: " + ("changed" if r.changed else "unchanged")
                   + ("; the deltas are split differently" if r.deltas_changed and not r.changed
                      else ""))
        for change in r.changes:
            if change.field == "stream":
                _say(f"    stream ≠ one-shot: one-shot {_short(change.recorded)}, streamed "
                           f"{_short(change.replayed)}")
            else:
                _say(f"    {change.field}: recorded {_short(change.recorded)}, now "
                           f"{_short(change.replayed)}")
    changed = sum(r.changed for r in results)
    _say(f"{changed} of {len(results)} transcripts changed")


def _short(value, limit: int = 160) -> str:
    text = json_text(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


@main.command()
@click.argument("old", type=_PATH)
@click.argument("new", type=_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--old-variant", help="A named template of OLD (e.g. tool_use).")
@click.option("--new-variant", help="A named template of NEW.")
@_token_options
def diff(old, new, as_json, old_variant, new_variant, bos_token, eos_token):
    """What changed in the protocol from OLD to NEW (any two sources), field by field, and
    whether each one's parser reads the other's renders of the standard turns.

    Exit status: 0 the protocols are the same, 1 they differ, 2 bad input.
    """
    from .check.drift import as_json as report_json
    from .check.drift import as_text, drift

    def side(source, variant):
        # (--bos-token / --eos-token: for a source that names none, as a bare .jinja)
        template = _load(source, variant=variant)
        given = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token))
                 if v is not None and k not in template.named_tokens}
        return template.with_tokens(**given) if given else template

    report = _isolated(lambda: drift(side(old, old_variant), side(new, new_variant)),
                       f"{old} / {new}")
    if as_json:
        click.echo(json_text(report_json(report), indent=2))
    else:
        _say(as_text(report), nl=False)
    sys.exit(0 if report.same else 1)


@main.group(name="export")
def export_group():
    """Write SOURCE's protocol for another tool: a vLLM plugin, transformers' response_template."""


@export_group.command(name="response-template")
@click.argument("source", type=_PATH)
@click.option("-o", "--out", "out_file", type=_PATH,
              help="Write the JSON to this file (default: print it).")
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--transformers", "target", metavar="VERSION",
              help="The transformers release that will parse it (default: the installed one, if "
                   "any). Older than the export needs: exit 2 (the installed one: a warning).")
@_token_options
def export_response_template(source, out_file, variant, target, bos_token, eos_token):
    """Print SOURCE's response_template: the declarative output parser transformers 5 reads
    from tokenizer_config.json (tokenizer.parse_response, get_response_parser).

    A construct of the protocol that the format cannot express (channel messages, a call
    written as a bare JSON object, ...) is exit 2, naming it. The first transformers release
    that reads the export goes to stderr.
    """
    from pathlib import Path

    from .pipeline import export_response_template as export
    from .pipeline import write_text_atomically

    def exported_template():
        template = _load(source, variant=variant, bos_token=bos_token, eos_token=eos_token)
        return (template, *export(template))

    template, compiled, exported = _isolated(exported_template, source)
    if exported is None:
        raise InputError(_proof_error(compiled.proof))
    _check_transformers(exported, target)
    text = json_text(exported, indent=2) + "\n"
    _warn_stand_ins(template, text)
    if out_file:
        write_text_atomically(Path(out_file), text)
        _say(f"wrote {out_file}")
    else:
        click.echo(text, nl=False)


def _check_transformers(exported: dict, target: str | None) -> None:
    """Say on stderr which transformers release first reads the export, and what for. A
    --transformers release older than that is an InputError (that release cannot load the
    file); the installed one older, a warning (the file is often read on another machine)."""
    from .export.response_template import transformers_features, transformers_needed

    if target is not None and _lacks(exported, target):
        raise InputError(f"transformers {target} cannot read this response_template "
                         f"({_lacks(exported, target)}): it needs transformers >= "
                         f"{transformers_needed(exported)}")
    by_release: dict[str, list[str]] = {}
    for feature, since in transformers_features(exported).items():
        by_release.setdefault(since, []).append(feature)
    said = "; ".join(f"{', '.join(names)}: {since}"
                     for since, names in reversed(by_release.items()))
    _say("tplparse: this response_template needs transformers >= "
               f"{transformers_needed(exported)} ({said})",
               err=True)
    installed = _installed("transformers") if target is None else None
    if installed and _lacks(exported, installed, quiet=True):
        _say(f"tplparse: warning: the installed transformers {installed} cannot read it "
                   f"({_lacks(exported, installed)}): parse it with transformers >= "
                   f"{transformers_needed(exported)}",
                   err=True)


def _lacks(exported: dict, version: str, quiet: bool = False) -> str:
    """What transformers `version` lacks to read the export ("join needs 5.16.0, …"), or "".
    A version that is no release number is an InputError, or (`quiet`: an installed build's)
    nothing."""
    from .export.response_template import transformers_missing

    try:
        missing = transformers_missing(exported, version)
    except InputError:
        if not quiet:
            raise
        missing = {}
    return ", ".join(f"{feature} needs {since}" for feature, since in missing.items())


def _installed(package: str) -> str | None:
    """The installed version of `package`, or None."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _warn_stand_ins(template, *texts: str) -> None:
    """A token the source does not name (a bare .jinja's eos_token) was probed with a stand-in;
    where the stand-in is in an export, the export reads that string, which no model writes."""
    from .probe import PLACEHOLDER_TOKENS

    for name, stand_in in PLACEHOLDER_TOKENS.items():
        # (as written, as a regex, and as such a regex in JSON: the exports hold it each way)
        forms = {stand_in, re.escape(stand_in), json.dumps(re.escape(stand_in))[1:-1]}
        if name not in template.named_tokens \
                and any(form in text for form in forms for text in texts):
            _say(f"tplparse: warning: the source does not name its {name}: the export "
                       f"reads the stand-in {stand_in!r} in its place (give "
                       f"--{name.replace('_', '-')} to name the model's)", err=True)


@export_group.command(name="vllm")
@click.argument("source", type=_PATH)
@click.option("-o", "--out", "out_dir", type=_PATH, required=True,
              help="The folder for the plugin and the family's parser (made if missing).")
@click.option("--family", help="The family name (default: from the model's name).")
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@_token_options
def export_vllm(source, out_dir, family, variant, bos_token, eos_token):
    """Write a vLLM plugin for SOURCE's family: a tool-call parser and (when the family has
    reasoning) a reasoning parser, registered as tplparse-<family>, over the family's
    generated parser; print the `vllm serve` options that load them.

    OUT gets <module>_vllm.py (the plugin: the only file that imports vLLM) and <module>.py
    (the parser, standalone, standard library only). The compile must prove (as `compile`).
    """
    from pathlib import Path

    from .pipeline import export_vllm as export
    from .pipeline import write_files

    def exported_plugin():
        template = _load(source, variant=variant, family=family, bos_token=bos_token,
                         eos_token=eos_token)
        return (template, *export(template))

    template, compiled, plugin = _isolated(exported_plugin, source)
    if plugin is None:
        raise InputError(_proof_error(compiled.proof))
    _warn_stand_ins(template, *plugin.files.values())
    for path in write_files(plugin.files, Path(out_dir)):
        _say(f"wrote {path}")
    _say("serve with:")
    _say(plugin.usage(str(out_dir)))


def _family_name(family: Family | None) -> str:
    return family.name if family else ""


@main.command(name="build")
@click.option("--manifest", type=_PATH, default="families.toml", show_default=True,
              help="The families and their sources (paths relative to the manifest's folder).")
@click.option("-o", "--out", "out_dir", type=_PATH,
              help="Where grammars/ and generated/ go (default: the manifest's folder).")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 naming the files a fresh build would change and the "
                   "families whose protocol changed.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1,
              show_default="the cores", help="Families compiled at a time.")
@click.option("--no-cache", is_flag=True,
              help="Compile every family (the cache keeps each family's files by its template, "
                   "tokens, override and this tplparse's own source: $TPLPARSE_CACHE_DIR, else "
                   "~/.cache/tplparse/build).")
def build_command(manifest, out_dir, check, jobs, no_cache):
    """Regenerate grammars/ and generated/ for every family of the manifest.

    Exit status: 0 everything is fresh (or was written), 1 (with --check) files are stale or a
    family's protocol changed, 2 bad input (a manifest or source that does not load, a family
    whose parser does not prove).
    """
    from pathlib import Path

    from .pipeline import BuildCache, build, read_manifest

    manifest_path = Path(manifest)
    count = len(read_manifest(manifest_path))
    with click.progressbar(length=count, label="building", item_show_func=_family_name) as bar:
        result = build(manifest_path, check=check, progress=lambda family: bar.update(1, family),
                       out_dir=Path(out_dir) if out_dir else None, jobs=jobs,
                       cache=None if no_cache else BuildCache())
    for name, fields in result.protocol_changed.items():
        _say(f"protocol changed: {name}: {', '.join(fields)} (tplparse diff shows how)",
                   err=True)
    for family in result.skipped:
        _say(f"skipped {family.name}: {family.source} is not here", err=True)
    for proof in result.unproved:
        _say(f"tplparse: error: {_proof_error(proof)}", err=True)
    if result.unproved:
        raise InputError(f"{len(result.unproved)} families do not prove: "
                         + ", ".join(p.family for p in result.unproved)
                         + " (their files were left as they are)")
    if check:
        if result.changed or result.removed:
            if result.changed:
                _say("stale (run tplparse build): " + ", ".join(result.changed), err=True)
            if result.removed:
                _say("generated by tplparse but made by no family "
                           "(tplparse build removes them): "
                           + ", ".join(result.removed), err=True)
            sys.exit(1)
        _say(f"all {len(result.built)} families are current")
    else:
        removed = f", {len(result.removed)} removed" if result.removed else ""
        _say(f"built {len(result.built)} families, {len(result.changed)} "
                   f"files changed{removed}")


@main.command()
@click.argument("source", type=_PATH)
@click.option("--upstream", required=True, metavar="URL",
              help="The engine's base URL (it is sent the rendered prompt; "
                   "it applies no template).")
@click.option("--upstream-kind", type=click.Choice(["llama-server", "vllm", "sglang",
                                                    "openai-completions"]),
              default="llama-server", show_default=True,
              help="The engine: llama-server (/completion, GBNF in its own fields), vllm "
                   "(/v1/completions, Lark for its guidance backend), sglang (/v1/completions, "
                   "GBNF as ebnf), openai-completions (/v1/completions, no grammar: tool_choice "
                   "and response_format are not enforced).")
@click.option("--context", type=click.IntRange(min=1), metavar="TOKENS",
              help="The upstream's context size, where its /v1/models does not say it (not for "
                   "llama-server: its /props says it).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="The port to listen on.")
@click.option("--model-name", help="The model's name in /v1/models and in answers (default: "
                                   "the source's file name).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds the upstream may go without sending a token before "
                   "the request fails (504).")
@click.option("--head-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              metavar="SECONDS", help="Seconds a client may take to send a request's head "
                                      "(408 past them).")
@click.option("--body-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              metavar="SECONDS", help="Seconds a client may take between two pieces of a "
                                      "request's body (408 past them).")
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--record", "record_dir", type=_PATH, metavar="DIR",
              help="Write a transcript of every generation into DIR (raw output can hold "
                   "secrets: off by default).")
@click.option("--record-keep", type=click.IntRange(min=1), default=1000, show_default=True,
              metavar="N", help="With --record: keep the newest N transcripts.")
@click.option("--record-days", type=click.FloatRange(min=0, min_open=True), default=7.0,
              show_default=True, metavar="DAYS",
              help="With --record: delete transcripts older than DAYS.")
@_token_options
def serve(source, upstream, upstream_kind, context, host, port, model_name, timeout, head_timeout,
          body_timeout, variant, record_dir, record_keep, record_days, bos_token, eos_token):
    """An OpenAI-compatible /v1/chat/completions in front of an engine that only completes text."""
    try:
        import uvicorn

        from .serve import create_app, upstream_for
    except ImportError as e:
        raise InputError(f"tplparse serve needs its extra ({e.name} is missing): pip "
                         "install 'tplparse[serve]'") from e
    if not upstream.startswith(("http://", "https://")):
        raise InputError(f"--upstream must be an http:// or https:// URL, not {upstream!r}")
    if context is not None and upstream_kind == "llama-server":
        raise InputError("--context is for an OpenAI-compatible upstream: llama-server says "
                         "its own context (/props)")
    template = _load(source, variant=variant, bos_token=bos_token, eos_token=eos_token)
    from .bridge import compile_in_memory

    # a template that cannot be probed fails here, before listening
    spec, _ = compile_in_memory(template)
    name = model_name or os.path.basename(str(source).rstrip("/"))
    try:
        engine = upstream_for(upstream_kind, upstream, timeout=timeout, context=context)
    except ValueError as e:  # (a URL without a host, or whose port is not a number)
        raise InputError(f"--upstream: {e}") from None
    _say(f"tplparse serve: {name} (family {spec.family}) at http://{host}:{port}/v1, "
               f"upstream {upstream} ({upstream_kind})", err=True)
    if engine.grammar_form is None:
        _say(f"tplparse serve: {upstream_kind} is sent no grammar: tool_choice 'required' or "
                   "a named tool, and response_format, are not enforced while generating (answers "
                   "are still parsed and validated)",
                   err=True)
    record = None
    if record_dir is not None:
        from .bridge.transcripts import Retention, TranscriptFolder

        record = TranscriptFolder(record_dir, Retention(record_keep, record_days))
        _say(f"tplparse serve: a transcript of every generation goes into {record_dir} (the "
                   f"newest {record_keep}, none older than {record_days:g} days)", err=True)
    from .serve.guard import GuardedH11Protocol, HttpLimits

    limits = HttpLimits(head_seconds=head_timeout, body_seconds=body_timeout)
    app = create_app(template, engine, name, record, limits)
    # (h11, each request's head read by tplparse's guard first: serve/guard.py)
    protocol = type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=5, http=protocol)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as e:  # uvicorn exits when it cannot bind
        raise InputError(f"cannot listen on {host}:{port} (in use, or not an "
                         "address of this machine)") from e
    if not server.started:
        raise InputError(f"cannot listen on {host}:{port} (in use, or not an "
                         "address of this machine)")
