"""The bridge's planner: the grammars it remembers are only ever the ones an equal request
would build, it forgets the oldest past its size, and the app plans a short conversation on
the event loop (a worker thread only for a grammar not built yet, or a long conversation)."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")
pytest.importorskip("starlette", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

import tplparse.serve.app as app_module  # noqa: E402
from test_serve import ASK, CALL, MODEL, TEMPLATE, TOOLS, Scripted  # noqa: E402
from tplparse.serve import Finished, create_app, parse_request  # noqa: E402
from tplparse.serve.plan import QUICK_CHARACTERS, Planner, plan, quick  # noqa: E402

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"]}}}


def _reordered(tools: list[dict]) -> list[dict]:
    """The same tools with each one's properties in the other order (the grammar writes them
    in the order given, so this is another grammar)."""
    tools = copy.deepcopy(tools)
    for tool in tools:
        parameters = tool["function"]["parameters"]
        parameters["properties"] = dict(reversed(parameters["properties"].items()))
    return tools


SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}

# Requests whose grammars differ from each other in one field each.
VARIANTS = {
    "auto": {"messages": ASK, "tools": TOOLS},
    "required": {"messages": ASK, "tools": TOOLS, "tool_choice": "required"},
    "named": {"messages": ASK, "tools": TOOLS + [SEARCH],
              "tool_choice": {"type": "function", "function": {"name": "search"}}},
    "one call": {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
    "other order": {"messages": ASK, "tools": _reordered(TOOLS), "tool_choice": "required"},
    "two tools": {"messages": ASK, "tools": TOOLS + [SEARCH], "tool_choice": "required"},
    "thinking off": {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "thinking": False},
    "schema": {"messages": ASK, "response_format": SCHEMA},
}


def _grammar_text(planned) -> str | None:
    return None if planned.grammar is None else planned.grammar.text


def test_a_remembered_grammar_is_the_one_its_own_request_builds():
    """A planner that has built every variant's grammar answers each variant with what a
    fresh planner builds for it: no request gets another's grammar."""
    warm = Planner(TEMPLATE)
    for body in VARIANTS.values():
        warm.plan(parse_request(body))
    texts = {}
    for name, body in VARIANTS.items():
        fresh = plan(TEMPLATE, parse_request(body))
        remembered = warm.plan(parse_request(body))
        assert fresh.grammar is not None and _grammar_text(remembered) == _grammar_text(fresh), name
        assert remembered.grammar.fields == fresh.grammar.fields and remembered.notes == fresh.notes, name
        texts[name] = fresh.grammar.text
    # the variants are different grammars, so the comparison above could have failed
    assert len(set(texts.values())) == len(texts)


def test_a_grammar_is_built_once_per_request_and_the_oldest_forgotten():
    planner = Planner(TEMPLATE, remembered=2)
    built = []
    build = planner.build
    planner.build = lambda wanted: built.append(wanted) or build(wanted)
    first, second, third = (parse_request(VARIANTS[name]) for name in ("auto", "required", "two tools"))
    for request in (first, first, second, first):
        planner.plan(request)
    assert len(built) == 2  # the repeats were remembered
    planner.plan(third)  # a third: the least recently used (second) is forgotten
    assert len(built) == 3
    for request, kept in ((first, True), (third, True), (second, False)):
        wanted = planner.wanted(request, planner.prompt(request))
        assert (planner.remembered(wanted) is not None) == kept


def test_a_plan_without_a_grammar_builds_none():
    planner = Planner(TEMPLATE)
    planner.build = lambda wanted: pytest.fail("built a grammar for a request that needs none")
    assert planner.plan(parse_request({"messages": ASK})).grammar is None
    no_grammar = Planner(TEMPLATE, form=None).plan(parse_request(VARIANTS["required"]))
    assert no_grammar.grammar is None and any("no grammar" in note for note in no_grammar.notes)


def test_quick_counts_every_string_of_the_conversation():
    assert quick(ASK)
    assert not quick([{"role": "user", "content": "x" * (QUICK_CHARACTERS + 1)}])
    parts = [{"type": "text", "text": "y" * (QUICK_CHARACTERS // 2)}] * 3  # content as parts
    assert not quick([{"role": "user", "content": parts}])
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "f", "arguments": json.dumps({"text": "z" * QUICK_CHARACTERS})}}]}
    assert not quick(ASK + [call])
    assert quick([{"role": "user", "content": "x" * (QUICK_CHARACTERS - 100)}])


def test_the_app_plans_a_short_conversation_on_the_event_loop(monkeypatch):
    """Worker threads only for the first build of a grammar and for a long conversation: the
    second request with the same tools is planned without one."""
    threaded = []
    in_thread = app_module.run_in_threadpool

    async def recording(function, *args, **kwargs):
        threaded.append(getattr(function, "__name__", repr(function)))
        return await in_thread(function, *args, **kwargs)

    monkeypatch.setattr(app_module, "run_in_threadpool", recording)
    request = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "stream": True}
    long = {**request, "messages": [{"role": "user", "content": "Weather? " * QUICK_CHARACTERS}]}
    upstream = Scripted(*([CALL, Finished("stop", 20, 30)] for _ in range(3)), context=1 << 20)

    async def run():
        transport = httpx.ASGITransport(app=create_app(TEMPLATE, upstream, MODEL))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse") as client:
            for body in (request, request, long):
                response = await client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200 and "get_weather" in response.text
                threaded.append("|")

    asyncio.run(run())
    planned = [name for name in threaded if name in ("build", "plan", "|")]
    assert planned == ["build", "|", "|", "plan", "|"]
    assert len({completion.grammar.text for completion in upstream.asked}) == 1

