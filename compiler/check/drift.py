"""Template drift: what changed between two templates' protocols, and what it breaks.

`drift(old, new)` probes both templates, lists the protocol fields that differ
(spec.diff), and reads each template's renders of the standard turns (outputs.model_outputs)
with the other one's parser: a parser built for OLD that cannot read NEW's turns is what a
template update breaks in production. A turn reads across when the parser reports no error
and reads the message the render preserves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import runtime
from ..errors import InputError
from ..grammar.reading import reading_tables
from ..probe import probe
from ..source.template import ChatTemplate
from ..spec import ProtocolSpec
from ..spec.diff import Difference, protocol_differences, show
from .outputs import STANDARD_TOOLS, ModelOutput, difference, model_outputs, readable


@dataclass
class CrossRead:
    """One template's standard turns, read by the other template's parser."""

    parser: str  # whose parser: "old" or "new"
    renders: str  # whose renders
    read: list[str] = field(default_factory=list)  # the turns read back
    failed: list[tuple[str, str]] = field(default_factory=list)  # (turn, what went wrong)

    @property
    def total(self) -> int:
        return len(self.read) + len(self.failed)


@dataclass
class Drift:
    old: ProtocolSpec
    new: ProtocolSpec
    differences: list[Difference]
    old_reads_new: CrossRead
    new_reads_old: CrossRead

    @property
    def same(self) -> bool:
        return not self.differences


def cross_read(parser: tuple[ChatTemplate, ProtocolSpec], renders: list[ModelOutput],
               names: tuple[str, str]) -> CrossRead:
    """The standard turns another template wrote (`renders`), read by the parser of `parser`."""
    template, spec = parser
    protocol = runtime.Protocol(reading_tables(spec, template.special_tokens))
    result = CrossRead(*names)
    for output in renders:
        message = runtime.parse(protocol, output.text, tools=STANDARD_TOOLS, start=output.start)
        if message["errors"]:
            error = message["errors"][0]
            result.failed.append((output.turn, f"{error['kind']}: {error['message']}"))
        elif readable(message) != output.expected:
            result.failed.append((output.turn, difference(output.expected, readable(message))))
        else:
            result.read.append(output.turn)
    return result


def drift(old: ChatTemplate, new: ChatTemplate) -> Drift:
    old_spec, new_spec = probe(old), probe(new)
    renders = {}
    for side, template, spec in (("old", old, old_spec), ("new", new, new_spec)):
        renders[side] = model_outputs(template, spec)
        if not any(o.text.strip() for o in renders[side]):
            raise InputError(f"{template.origin}: the template renders no assistant turn: "
                             "no protocol to compare")
    return Drift(
        old_spec, new_spec, protocol_differences(old_spec, new_spec),
        cross_read((old, old_spec), renders["new"], ("old", "new")),
        cross_read((new, new_spec), renders["old"], ("new", "old")),
    )


def as_text(report: Drift) -> str:
    old, new = report.old, report.new
    lines = [f"old: {old.template_name} (family {old.family}, sha256 {old.template_sha256[:16]}…)",
             f"new: {new.template_name} (family {new.family}, sha256 {new.template_sha256[:16]}…)"]
    if old.template_sha256 == new.template_sha256:
        lines.append("(the same template text: any difference comes from the "
                     "tokens each source names)")
    if report.same:
        lines.append("protocol: the same")
    else:
        lines.append(f"protocol: {len(report.differences)} field(s) differ")
        width = max(len(d.field) for d in report.differences) + 2
        for d in report.differences:
            lines.append(f"  {d.field:<{width}}{_clip(show(d.old))}")
            lines.append(f"  {'':<{width}}→ {_clip(show(d.new))}")
    for cross in (report.old_reads_new, report.new_reads_old):
        lines.append(f"{cross.parser}'s parser reads {len(cross.read)} of {cross.total} of "
                     f"{cross.renders}'s standard turns")
        lines += [f"  not read: {turn}: {_clip(detail)}" for turn, detail in cross.failed]
    return "\n".join(lines) + "\n"


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def as_json(report: Drift) -> dict:
    def cross(c: CrossRead) -> dict:
        return {"parser": c.parser, "renders": c.renders, "read": c.read,
                "failed": [{"turn": t, "detail": d} for t, d in c.failed]}

    def side(spec: ProtocolSpec) -> dict:
        return {"template_name": spec.template_name, "family": spec.family,
                "template_sha256": spec.template_sha256}

    return {
        "old": side(report.old), "new": side(report.new), "same": report.same,
        "differences": [{"field": d.field, "old": d.old, "new": d.new} for d in report.differences],
        "old_parser_reads_new": cross(report.old_reads_new),
        "new_parser_reads_old": cross(report.new_reads_old),
    }


__all__ = ["CrossRead", "Drift", "as_json", "as_text", "cross_read", "drift"]
