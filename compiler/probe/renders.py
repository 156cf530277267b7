"""The probe's one primitive: render a turn after a fixed history and cut out what it added.

`assistant_spans` renders several turns after the same history and returns the assistant
header (where every render and the generation prompt stop agreeing), what the generation
prompt writes past it (its tail), and each turn's span (what the turn writes past it).
`layout_of` turns a span into a layout: the span with each sentinel value as a slot.
"""

from __future__ import annotations

from ..source.render import check_time_budget
from ..spec import Piece, slot
from .conversations import Rendered, ShapedRenderer, Turn
from .spans import Boundaries, common_prefix_length


def _turn_text(history: str, full: str, header_hint: str, boundaries: Boundaries,
               user: str = "") -> str:
    """What rendering one more turn added to `history`.

    Usually `full` extends `history`. Some templates append a trailer after the last turn
    (a closing system instruction) and the new turn goes in before it; where the inserted
    text could be read at several offsets (it repeats what surrounds it), the reading that
    starts most like the generation prompt's addition (`header_hint`) is the turn. Some write
    the last message otherwise than an earlier one (the system prompt and the tools in the
    last user turn: Mistral's templates), so history is not a prefix of the conversation
    with the turn: the turn is then what follows the user's turn as history closes it.
    """
    after_user = _after_the_user_turn(history, full, user)
    if after_user is not None:
        return after_user
    p = boundaries.split_common_prefix(history, full)
    q = boundaries.split_common_suffix(history[p:], full[p:])
    end = len(full) - q
    best, best_score = full[p:end], common_prefix_length(full[p:end], header_hint)
    k = 1
    while q and k <= p and full[p - k] == full[end - k]:
        candidate = full[p - k:end - k]
        score = common_prefix_length(candidate, header_hint)
        if score > best_score:
            best, best_score = candidate, score
        k += 1
    return best


def _after_the_user_turn(history: str, full: str, user: str) -> str | None:
    """What `full` writes after the user's turn, closed as history closes it, when history is
    not a prefix of `full` because the user's turn is written otherwise there; else None."""
    if not user or full.startswith(history) or user not in history or user not in full:
        return None
    closer = history[history.rindex(user) + len(user):]
    at = full.rindex(user) + len(user)
    if not closer.strip() or not full.startswith(closer, at):
        return None
    return full[at + len(closer):]


def _readings(history: str, full: str, boundaries: Boundaries) -> list[tuple[str, str, str]]:
    """Every way of reading `full` as `history` with one turn inserted: (what comes before the
    turn, the turn, what comes after it), the insertion moved back as far as it can go (the
    text it passes over is the same on both sides of the turn)."""
    p = boundaries.split_common_prefix(history, full)
    q = boundaries.split_common_suffix(history[p:], full[p:])
    end = len(full) - q
    found = []
    # (the insertion moves back at most its own length: further, it would pass over a turn)
    limit = min(p, len(full) - len(history))
    k = 0
    while True:
        if boundaries.is_split_point(full, p - k) and boundaries.is_split_point(full, end - k):
            found.append((full[:p - k], full[p - k:end - k], full[end - k:]))
        if not (k < limit and full[p - k - 1] == full[end - k - 1]):
            return found
        k += 1


def _turn_before_a_trailer(history: str, full: str, user: str,
                           boundaries: Boundaries) -> tuple[str, str] | None:
    """For a template that writes its generation prompt whatever add_generation_prompt says:
    (the turn, the trailer after it). Of the readings, the one whose turn ends the way the
    user's turn ends before it (the closer a turn writes), with the longest trailer."""
    best = None
    for before, turn, after in _readings(history, full, boundaries):
        closer = before[before.rfind(user) + len(user):] if user in before else ""
        if closer.strip() and turn.endswith(closer) and (best is None or len(after) > len(best[1])):
            best = (turn, after)
    return best


def _prompt_addition(history: str, prompt: str, boundaries: Boundaries) -> str:
    """What the generation prompt added to `history` (some templates end history differently)."""
    return prompt[boundaries.split_common_prefix(history, prompt):]


def assistant_spans(renderer: ShapedRenderer, user: str, turns: dict[str, Turn],
                    variables: dict | None = None, system: str | None = None):
    """Render each turn after the same history; return (header, tail, {kind: span}).

    The assistant header is where every rendered turn and the generation prompt stop
    agreeing (backed off to a marker boundary); the tail is what the generation prompt
    writes past the header; a span is what a turn writes past it. Turns the template
    cannot render are left out.
    """
    check_time_budget(renderer.template.name)
    boundaries = Boundaries(renderer.template.special_tokens)
    renders: dict[str, Rendered] = {}
    for kind, turn in turns.items():
        rendered = renderer.render_turn(user, turn, variables, system=system)
        if rendered is not None:
            renders[kind] = rendered
    if not renders:
        return None
    first = next(iter(renders.values()))
    added = _prompt_addition(first.history, first.prompt, boundaries)
    texts = {kind: _turn_text(r.history, r.full, added, boundaries, user)
             for kind, r in renders.items()}
    if not added and all(r.prompt == r.history for r in renders.values()):
        # The template ignores add_generation_prompt: what it writes after the last message
        # anyway, if anything, is its generation prompt (the trailer every reading agrees on).
        found = {kind: _turn_before_a_trailer(r.history, r.full, user, boundaries)
                 for kind, r in renders.items()}
        trailers = {f[1] for f in found.values() if f is not None}
        readings = {kind: f for kind, f in found.items() if f is not None}
        if len(readings) == len(found) and len(trailers) == 1 and trailers != {""}:
            added = trailers.pop()
            texts = {kind: f[0] for kind, f in readings.items()}
        else:
            # ... or it writes the generation prompt after a last user message only (which an
            # assistant turn's render does not end with): what history writes after the user's
            # text is the generation prompt, and what each render writes there is its turn.
            at = first.history.rfind(user) + len(user) if user in first.history else -1
            if at > 0 and first.history[at:].strip() and all(r.full.startswith(first.history[:at])
                                                            for r in renders.values()):
                added = first.history[at:]
                texts = {kind: r.full[at:] for kind, r in renders.items()}
    split = min(boundaries.split_common_prefix(added, text) for text in texts.values())
    lead = added[: len(added) - len(added.lstrip())]
    if lead and split < len(lead):
        # The generation prompt writes whitespace before the header that some turns' renders
        # do not (a newline before `<|header_start|>assistant` in the prompt and in a call
        # turn, none before a content turn's): that whitespace is the prompt's, and the header
        # is what every turn writes after its own leading whitespace.
        shared = min(boundaries.split_common_prefix(added.lstrip(), text.lstrip())
                     for text in texts.values())
        if added.lstrip()[:shared].strip():
            return (added[: len(lead) + shared], added[len(lead) + shared:],
                    {kind: text.lstrip()[shared:] for kind, text in texts.items()})
    return added[:split], added[split:], {kind: text[split:] for kind, text in texts.items()}


def layout_of(span: str, values: dict[str, str],
              droppable=("reasoning", "content")) -> list[Piece] | None:
    """The span with each (non-empty) slot value replaced by its slot.

    A reasoning or content value missing from the span is one the template drops (some
    drop reasoning from history, some drop content beside calls): its slot is left out.
    Any other missing value means the span is not understood: None.
    """
    found = []
    for name, value in values.items():
        if not value:
            continue
        at = span.find(value)
        if at == -1:
            if name in droppable:
                continue
            return None
        found.append((at, name, value))
    found.sort()
    pieces: list[Piece] = []
    cursor = 0
    for at, name, value in found:
        if at < cursor:
            return None  # overlapping values
        if span[cursor:at]:
            pieces.append(span[cursor:at])
        pieces.append(slot(name))
        cursor = at + len(value)
    if span[cursor:]:
        pieces.append(span[cursor:])
    return pieces
