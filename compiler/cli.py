"""The `tplparse` command line.

Every error a user can cause prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
import sys

import click

from .errors import InputError, TplparseError
from .loader import load


class _Group(click.Group):
    """Turns tplparse's user errors into one line on stderr and exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TplparseError as e:
            click.echo(f"tplparse: error: {e}", err=True)
            ctx.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="tplparse")
def main():
    """Turn a model's chat template into parsers and grammars."""


def _read_json_file(path: str, what: str):
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: invalid JSON ({what}) at line {e.lineno}, column {e.colno}: {e.msg}") from None


def _parse_var(text: str) -> tuple[str, object]:
    """KEY=VALUE; VALUE is JSON when it parses as JSON (true, 3, "x", [..]), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--var {text!r}: expected KEY=VALUE")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


@main.command()
@click.argument("source", type=click.Path())
@click.option("--variant", help="A named template of the source (e.g. tool_use).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def info(source, variant, as_json):
    """Print what was loaded from SOURCE: name, sha256, tokens, named templates."""
    template = load(source, variant=variant)
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
        "end_of_turn": list(template.end_of_turn),
        "special_tokens": list(template.special_tokens),
    }
    if as_json:
        click.echo(json.dumps(facts, ensure_ascii=False, indent=2))
        return
    rows = [
        ("name", template.name),
        ("family", template.family),
        ("origin", template.origin),
        ("template", f"{template.variant}: {facts['template_chars']} chars, {facts['template_lines']} lines"),
        ("sha256", template.sha256),
        ("named templates", ", ".join(template.variants)),
    ]
    for key, value in template.named_tokens.items():
        rows.append((key, repr(value)))
    rows.append(("end of turn", " ".join(map(repr, template.end_of_turn)) or "-"))
    specials = template.special_tokens
    shown = " ".join(specials[:40]) + (f" ... (+{len(specials) - 40} more; --json lists all)" if len(specials) > 40 else "")
    rows.append(("special tokens", f"{len(specials)}: {shown}" if specials else "none"))
    width = max(len(k) for k, _ in rows) + 1
    for key, value in rows:
        click.echo(f"{key + ':':<{width}} {value}")


@main.command()
@click.argument("source", type=click.Path())
@click.argument("messages", type=click.Path())
@click.option("--tools", "tools_path", type=click.Path(), help="OpenAI-style tool definitions (a JSON list).")
@click.option("--no-generation-prompt", is_flag=True, help="Do not open an assistant turn at the end.")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE",
              help="A template variable; VALUE is parsed as JSON when it can be (enable_thinking=false).")
@click.option("--variant", help="A named template of the source (default: tool_use when --tools is given and "
              "the source has it, as transformers does; else the main one).")
def render(source, messages, tools_path, no_generation_prompt, variables, variant):
    """Render MESSAGES (a JSON list of chat messages, or - for stdin) with SOURCE's chat template."""
    conversation = _read_json_file(messages, "messages")
    tools = _read_json_file(tools_path, "tools") if tools_path else None
    if isinstance(conversation, dict) and "messages" in conversation:
        if tools is None:
            tools = conversation.get("tools")
        conversation = conversation["messages"]
    if not isinstance(conversation, list):
        raise InputError(f"{messages}: expected a JSON list of messages (or an object with \"messages\")")
    if tools is not None and not isinstance(tools, list):
        raise InputError(f"{tools_path}: expected a JSON list of tool definitions")
    template = load(source)
    if variant:
        template = template.with_variant(variant)
    elif tools and "tool_use" in template.variants:
        template = template.with_variant("tool_use")
    extra = dict(_parse_var(v) for v in variables)
    text = template.render(conversation, tools=tools, add_generation_prompt=not no_generation_prompt, **extra)
    click.echo(text, nl=False)
