"""The probe's report: what a spec says, in sections of lines, rendered two ways.

`tplparse probe` prints `as_text(report(spec))`; every generated parser module carries the
protocol sections as its header comment (`as_comment`), so a reader of the module sees
what the probe saw, in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec import ArgumentStyle, Piece, ProtocolSpec


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)


def _show(value: str) -> str:
    return repr(value) if value != "" else "-"


def layout_text(layout: list[Piece]) -> str:
    """A layout as one line: literals with their escapes, slots as {name}."""
    return "".join(repr(p)[1:-1] if isinstance(p, str) else "{" + p["slot"] + "}" for p in layout)


def protocol_sections(spec: ProtocolSpec) -> list[Section]:
    """Generation prompt, reasoning, content, tool calls, end of turn, turn layouts."""
    modes = Section("Generation prompt", [f"{'mode':<12} {'set':<28} "
                                          f"{'prompt ends with':<34} starts in"])
    for name, mode in spec.modes.items():
        setting = ", ".join(f"{k}={v!r}" for k, v in mode.variables.items()) or (
            f"system {mode.system_flag!r}" if mode.system_flag else "-")
        modes.lines.append(f"{name:<12} {setting:<28} {_show(mode.tail)[:34]:<34} {mode.start}")

    reasoning = Section("Reasoning")
    r = spec.reasoning
    if r:
        reasoning.lines += [
            f"start          {_show(r.start)}",
            f"end            {_show(r.end)}",
            f"in history     {'yes' if r.in_history else 'no (the template drops it)'}",
            f"a tool call ends open reasoning: {'yes' if r.tool_call_ends_reasoning else 'no'}",
        ]
    else:
        reasoning.lines.append("none found")

    content = Section("Content", [f"wrapper        {_show(spec.content_start)} … "
                                  f"{_show(spec.content_end)}"])

    calls = Section("Tool calls")
    tc = spec.tool_calls
    if tc:
        args = tc.arguments
        calls.lines += [
            f"section        {_show(tc.section_start)} … {_show(tc.section_end)}",
            f"one call       {layout_text(tc.call)}",
            f"between calls  {_show(tc.separator)}   (parallel calls: {tc.parallel})",
        ]
        if args.style == ArgumentStyle.OBJECT:
            calls.lines.append(f"arguments      one object, {args.encoder}"
                               + (f", keys {args.order}" if args.order != "given" else ""))
        else:
            calls.lines.append("arguments      one per argument, joined by "
                               f"{_show(args.separator)}, keys {args.order}")
            for kind, layout in args.argument.items():
                calls.lines.append(f"  {kind:<12} {layout_text(layout)}")
            calls.lines.append("  values       "
                               + ", ".join(f"{k}: {v}" for k, v in args.value_encoders.items()))
        if tc.wrappers:
            calls.lines.append(f"wrappers       {', '.join(map(repr, tc.wrappers))}   (written "
                               "before some kinds of call only)")
        if tc.instructed_bare or tc.instructed_separators:
            told = (["without the section's markers"] if tc.instructed_bare else []) + \
                [f"separated by {sep!r}" for sep in tc.instructed_separators]
            calls.lines.append(f"instructed     {', '.join(told)}   (the template's tool "
                               "instructions; read too)")
    else:
        calls.lines.append("the template does not render tool calls")

    end = Section("End of turn", [", ".join(map(repr, spec.end_of_turn)) or "none found"])
    turns = Section("Turn layouts", [f"{kind:<18} {layout_text(layout)}"
                                     for kind, layout in spec.turns.items()])
    sections = [modes, reasoning, content, calls, end, turns]
    if spec.unproved:  # (compile --allow-partial: what this parser is known not to read)
        sections.append(Section("Not proved: the parser does not read back "
                                "these turns of the template",
                                [f"- {line}" for line in spec.unproved]))
    return sections


def provenance_sections(spec: ProtocolSpec) -> list[Section]:
    """Why the probe believes each marker, the overrides applied, the warnings."""
    sections = []
    if spec.evidence:
        sections.append(Section("Evidence", [f"{key}: {why}"
                                             for key, why in spec.evidence.items()]))
    for title, lines in (("Overrides", spec.overrides), ("Warnings", spec.warnings)):
        if lines:
            sections.append(Section(title, [f"- {line}" for line in lines]))
    return sections


def as_text(title: str, sections: list[Section]) -> str:
    """The report as `tplparse probe` prints it."""
    out = [title]
    for section in sections:
        out.append("")
        out.append(section.title)
        out.extend("  " + line for line in section.lines)
    return "\n".join(out) + "\n"


def as_comment(sections: list[Section]) -> list[str]:
    """The report as comment lines of a generated module."""
    out = []
    for section in sections:
        out.append(f"# {section.title}")
        out.extend(f"#   {line}".rstrip() for line in section.lines)
    return out


__all__ = ["Section", "as_comment", "as_text", "layout_text", "protocol_sections",
           "provenance_sections"]
