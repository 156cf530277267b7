"""`ChatTemplate`: one loaded chat template and everything known about the model around it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ..errors import InputError, TemplateError
from .render import (
    DEFAULT_LIMITS,
    RenderLimits,
    compile_template,
    plain_data,
    prepare_messages,
    render_template,
)


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the model facts it is rendered with.

    source          the Jinja text, exactly as loaded
    name            a display name (the model's name when the source has one)
    family          a slug naming the family, used for file names (`qwen3`, `command-r-tool-use`):
                    the model's slug, plus the variant's name for a non-default variant
    model_slug      the slug of the model alone, whatever the variant
    origin          where it came from: path and location inside it
    named_tokens    the named special tokens passed to the template as variables, as
                    transformers does: {"bos_token": "<s>", "eos_token": "</s>", ...}
    token_lists     the listed special tokens passed to the template as lists, as transformers 4
                    did (5 passes only the named ones): {"additional_special_tokens":
                    ("<|role_sep|>", ...)} (a template can take every marker from them:
                    `additional_special_tokens[1]`)
    end_of_turn     token strings besides eos that end an assistant turn (eot, eom)
    special_tokens  the model's control / user-defined tokens (never produced from plain text)
    control_tokens  of those, the control tokens: the ones a tokenizer keeps apart from text
                    (GGUF token type CONTROL; tokenizer_config's tokens marked special), which a
                    constrained-decoding grammar must name as tokens
    variant         which of the source's templates this is ("default", "tool_use", ...)
    variants        every template the source holds, by name
    compat_notes    why a render needed the own-containers sandbox (transformers' sandbox
                    refuses the template; llama.cpp renders it): filled as renders need it
    """

    source: str
    name: str
    family: str
    origin: str
    model_slug: str = ""
    named_tokens: Mapping[str, str] = field(default_factory=dict)
    token_lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    end_of_turn: tuple[str, ...] = ()
    special_tokens: tuple[str, ...] = ()
    control_tokens: tuple[str, ...] = ()
    variant: str = "default"
    variants: Mapping[str, str] = field(default_factory=dict)
    limits: RenderLimits = DEFAULT_LIMITS
    sha256: str = field(init=False)
    compat_notes: set = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self):
        if not self.model_slug:
            object.__setattr__(self, "model_slug", self.family)
        object.__setattr__(self, "sha256", hashlib.sha256(self.source.encode("utf-8")).hexdigest())
        object.__setattr__(self, "named_tokens", MappingProxyType(dict(self.named_tokens)))
        object.__setattr__(self, "token_lists", MappingProxyType(
            {name: tuple(tokens) for name, tokens in self.token_lists.items()}))
        variants = dict(self.variants) or {self.variant: self.source}
        object.__setattr__(self, "variants", MappingProxyType(variants))
        object.__setattr__(self, "end_of_turn", tuple(self.end_of_turn))
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        object.__setattr__(self, "control_tokens", tuple(self.control_tokens))

    def __getstate__(self) -> dict:
        # (plain dicts for the read-only views, which do not pickle: a template crosses to and
        # from a command's child process, tplparse.source.isolation)
        state = dict(self.__dict__)
        state["named_tokens"], state["variants"] = dict(self.named_tokens), dict(self.variants)
        state["token_lists"] = dict(self.token_lists)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "named_tokens", MappingProxyType(state["named_tokens"]))
        object.__setattr__(self, "variants", MappingProxyType(state["variants"]))
        object.__setattr__(self, "token_lists", MappingProxyType(state.get("token_lists", {})))

    @property
    def bos_token(self) -> str | None:
        return self.named_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.named_tokens.get("eos_token")

    def check(self) -> None:
        """Compile the template; a syntax error raises `TemplateError` with its line."""
        compile_template(self.source, self.name, self.limits)

    def with_variant(self, variant: str) -> ChatTemplate:
        """The source's template named `variant` (e.g. "tool_use"), with the same model facts."""
        if variant == self.variant:
            return self
        if variant not in self.variants:
            known = ", ".join(sorted(self.variants)) or "none"
            raise InputError(f"{self.origin}: no chat template named {variant!r} (it has: {known})")
        origin = self.origin.rsplit(" [", 1)[0] + ("" if variant == "default" else f" [{variant}]")
        chosen = replace(
            self,
            source=self.variants[variant],
            variant=variant,
            family=family_slug(self.model_slug, variant),
            origin=origin,
            compat_notes=set(),
        )
        chosen.check()
        return chosen

    def with_tokens(self, **named_tokens: str) -> ChatTemplate:
        """The same template with named special tokens set (bos_token="<s>", ...)."""
        return replace(self, named_tokens={**self.named_tokens, **named_tokens})

    def with_token_lists(self, **token_lists: list[str]) -> ChatTemplate:
        """The same template with lists of special tokens set (additional_special_tokens=[...])."""
        lists = {name: tuple(tokens) for name, tokens in token_lists.items()}
        return replace(self, token_lists={**self.token_lists, **lists})

    def render(
        self,
        messages: list,
        tools: list | None = None,
        add_generation_prompt: bool = True,
        *,
        own_containers: bool = True,
        **extra: Any,
    ) -> str:
        """Render `messages` (OpenAI chat format) the way transformers' `apply_chat_template` does.

        `tools` are OpenAI-style tool definitions; `extra` become template variables
        (`enable_thinking=False`, `reasoning_effort="high"`, `documents=[...]`, ...). A template
        that transformers' sandbox refuses but llama.cpp renders (it mutates containers it
        builds, or prints a filter's iterator with tojson) is rendered in the own-containers
        sandbox, noted in `compat_notes`; `own_containers=False` keeps transformers' refusal.
        """
        try:
            prepared = prepare_messages(messages)
            if tools is not None and not isinstance(tools, (list, tuple)):
                raise TypeError("tools must be a list of tool definitions, not "
                                f"{type(tools).__name__}")
            if tools is not None and not all(isinstance(t, Mapping) for t in tools):
                raise TypeError("each tool must be an object (a JSON schema in OpenAI format)")
            variables = {
                **self.named_tokens,
                **{name: list(tokens) for name, tokens in self.token_lists.items()},
                "documents": None,  # transformers always defines it
                **plain_data(extra, "extra variables"),
                "messages": prepared,
                "tools": plain_data(tools, "tools"),
                "add_generation_prompt": bool(add_generation_prompt),
            }
        except TypeError as e:
            raise InputError(str(e)) from None
        try:
            return render_template(self.source, self.name, variables, self.limits)
        except TemplateError as e:
            if e.own_containers is None or not own_containers:
                raise
            # transformers' sandbox refuses it; llama.cpp renders it: the containers it
            # mutates are its own, so render it where that is allowed (and say so).
            text = render_template(self.source, self.name, variables, self.limits,
                                   own_containers=True)
            self.compat_notes.add(e.own_containers)
            return text


def _slug(text: str) -> str:
    out = []
    for ch in text.lower():
        out.append(ch if ch.isascii() and ch.isalnum() else "-")
    return "-".join(part for part in "".join(out).split("-") if part)


slugify = _slug


def family_slug(model_slug: str, variant: str) -> str:
    """The family name of a model's template variant: `command-r` + `tool_use` ->
    `command-r-tool-use`."""
    return model_slug if variant == "default" else f"{model_slug}-{_slug(variant)}"

__all__ = ["ChatTemplate", "TemplateError", "slugify"]
