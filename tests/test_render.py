"""The renderer: transformers' environment, inside a sandbox with limits."""

from __future__ import annotations

import time

import pytest

from tplparse import ChatTemplate, RenderLimits, TemplateError
from tplparse.errors import InputError

USER = [{"role": "user", "content": "hi"}]


def tpl(source: str, **kwargs) -> ChatTemplate:
    return ChatTemplate(source=source, name="t", family="t", origin="test", **kwargs)


def test_trim_and_lstrip_blocks():
    source = "{% for m in messages %}\n    {% if true %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert tpl(source).render(USER * 2) == "[hi]\n[hi]\n"


def test_tojson_accepts_transformers_arguments_and_does_not_escape_html():
    source = "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':'), sort_keys=true) }}|{{ 'é' | tojson(ensure_ascii=true) }}"
    out = tpl(source).render(USER, x={"b": "<a & 'b'>", "a": 1})
    assert out == (
        '{"b": "<a & \'b\'>", "a": 1}|{\n  "b": "<a & \'b\'>",\n  "a": 1\n}|{"a":1,"b":"<a & \'b\'>"}|"\\u00e9"'
    )


def test_loop_controls_and_generation_block():
    source = "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}"
    assert tpl(source).render([{"role": "user", "content": str(i)} for i in range(5)]) == "<0><1>"


def test_globals_and_named_tokens():
    source = "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ dict(a=1).a }}{% set ns = namespace(n=2) %}{{ ns.n }}{{ eos_token }}"
    out = tpl(source, named_tokens={"bos_token": "<s>", "eos_token": "</s>"}).render(USER)
    assert out == "<s>412</s>"


def test_extra_variables_and_generation_prompt_flag():
    source = "{{ enable_thinking }}/{{ reasoning_effort }}/{{ add_generation_prompt }}"
    assert tpl(source).render(USER, enable_thinking=False, reasoning_effort="high") == "False/high/True"
    assert tpl(source).render(USER, add_generation_prompt=False, enable_thinking=1, reasoning_effort=None) == "1/None/False"


def test_messages_prepared_like_transformers():
    # None values are dropped (not rendered as "None"), reasoning is offered under both names.
    source = "{% for m in messages %}{{ 'content' in m }} {{ m.reasoning_content }} {{ m.thinking }}{% endfor %}"
    out = tpl(source).render([{"role": "assistant", "content": None, "reasoning": "why"}])
    assert out == "False why why"


def test_the_callers_messages_are_not_changed():
    messages = [{"role": "assistant", "content": None, "thinking": "t", "tool_calls": [{"function": {"arguments": {"a": 1}}}]}]
    before = repr(messages)
    tpl("{% for m in messages %}{% set _ = m.tool_calls[0].function.arguments.update({'b': 2}) if false %}{% endfor %}").render(messages)
    assert repr(messages) == before


def test_raise_exception_reports_message_and_line():
    source = "line one\n{% if messages | length > 0 %}\n{{ raise_exception('Roles must alternate') }}\n{% endif %}"
    with pytest.raises(TemplateError) as info:
        tpl(source).render(USER)
    assert info.value.line == 3
    assert "Roles must alternate" in str(info.value)
    assert str(info.value).startswith("t, line 3:")


def test_runtime_error_has_template_line():
    with pytest.raises(TemplateError, match=r"line 2: UndefinedError: .*'nope'"):
        tpl("ok\n{{ messages[0].nope.deeper }}").render(USER)


def test_syntax_error_has_line():
    with pytest.raises(TemplateError, match=r"line 2: Jinja syntax error"):
        tpl("fine\n{% if %}").check()


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "{{ messages.append(1) }}",  # immutable sandbox: no mutation of inputs
])
def test_sandbox_blocks_escapes(source):
    with pytest.raises(TemplateError, match="sandbox|unsafe|SecurityError|underscore"):
        tpl(source).render(USER)


def test_unsafe_attributes_are_undefined():
    # The sandbox answers a lookup of an internal attribute with "undefined" (renders empty).
    assert tpl("[{{ messages.__class__ }}][{{ messages[0].__init__ }}]").render(USER) == "[][]"


def test_wall_clock_limit_stops_a_hanging_template():
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    started = time.monotonic()
    with pytest.raises(TemplateError, match="longer than 0.5 s"):
        tpl(source, limits=RenderLimits(seconds=0.5)).render(USER)
    assert time.monotonic() - started < 5


def test_an_interrupt_lost_in_a_finalizer_is_sent_again():
    # An asynchronous exception that lands in a finalizer (a __del__, a generator the garbage
    # collector closes) is ignored there; the render must still stop. Here the first one is
    # swallowed as a finalizer would: the watchdog must send another.
    from tplparse.source.render import _WATCHDOG, _RenderInterrupted

    interrupts = 0
    started = time.monotonic()
    with pytest.raises(_RenderInterrupted):
        with _WATCHDOG.watch(RenderLimits(seconds=0.05)):
            while time.monotonic() - started < 5:
                try:
                    while time.monotonic() - started < 5:
                        pass
                except _RenderInterrupted:
                    interrupts += 1
                    if interrupts == 2:
                        raise
    assert interrupts == 2 and time.monotonic() - started < 2


def test_an_interrupt_that_lands_as_a_render_unregisters_does_not_wedge_the_watchdog():
    # The worst moment for the interrupt: the render is done and waits for the watchdog's lock
    # to unregister; the watchdog (here a helper holding that lock) interrupts it, then lets go.
    # The lock must not stay held (a Python-level __enter__ can be interrupted after taking it),
    # and the watch must be gone, so later renders are still watched and nothing more lands.
    import threading

    from tplparse.source.render import _WATCHDOG, _RenderInterrupted, _async_raise

    render_thread = threading.get_ident()
    holding = threading.Event()

    def hold_the_lock_then_interrupt():
        with _WATCHDOG._lock:
            holding.set()
            time.sleep(0.2)  # (the render now waits for the lock in watch()'s finally)
            _async_raise(render_thread, _RenderInterrupted)

    helper = threading.Thread(target=hold_the_lock_then_interrupt)
    with pytest.raises(_RenderInterrupted):
        with _WATCHDOG.watch(RenderLimits(seconds=60)):
            helper.start()
            holding.wait()
    helper.join()
    assert not _WATCHDOG._active  # unregistered: nothing more is raised in this thread
    outcome = []

    def hanging():
        source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        try:
            tpl(source, limits=RenderLimits(seconds=0.3)).render(USER)
        except TemplateError as e:
            outcome.append(str(e))

    thread = threading.Thread(target=hanging, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the watchdog no longer interrupts renders"
    assert outcome and "longer than 0.3 s" in outcome[0]


def test_output_limit():
    source = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"
    with pytest.raises(TemplateError, match="exceeds 100000 characters"):
        tpl(source, limits=RenderLimits(max_output_chars=100_000)).render(USER)


@pytest.mark.parametrize("source", [
    "{{ 'x' * 10000000000 }}",
    "{{ [1] * 10000000000 }}",
    "{{ 10 ** 10000000000 }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ 'x'.center(10000000000) }}",
    "{{ '{:>9999999999}'.format(1) }}",
    "{{ 'x' | center(10000000000) }}",
])
def test_single_step_blowups_are_refused(source):
    with pytest.raises(TemplateError, match="blocked by the sandbox"):
        tpl(source).render(USER)


def test_memory_growth_limit():
    # Doubling a string is not one big operation, so the watchdog catches it by memory.
    source = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}"
    limits = RenderLimits(seconds=30, max_memory_growth_bytes=64 << 20)
    with pytest.raises(TemplateError, match="memory|exceeds|out of memory"):
        tpl(source, limits=limits).render(USER)


def test_recursion_is_an_error_not_a_crash():
    source = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    with pytest.raises(TemplateError, match="recursion"):
        tpl(source).render(USER)


def test_limits_do_not_leak_into_the_next_render():
    slow = tpl("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               limits=RenderLimits(seconds=0.2))
    with pytest.raises(TemplateError):
        slow.render(USER)
    fast = tpl("{% for i in range(3000) %}{% endfor %}ok")
    for _ in range(50):
        assert fast.render(USER) == "ok"
    time.sleep(0.3)
    assert fast.render(USER) == "ok"


@pytest.mark.parametrize("messages, tools, message", [
    ("hello", None, "messages must be a list"),
    (["hello"], None, "message 0 must be an object"),
    ([{"role": "user", "content": object()}], None, "message 0: object values"),
    (USER, {"name": "x"}, "tools must be a list"),
    (USER, ["x"], "each tool must be an object"),
])
def test_bad_inputs(messages, tools, message):
    with pytest.raises(InputError, match=message):
        tpl("x").render(messages, tools=tools)


def test_documents_are_always_defined():
    source = "{{ documents is none }}{% for d in documents or [] %}|{{ d.title }}{% endfor %}"
    assert tpl(source).render(USER) == "True"
    assert tpl(source).render(USER, documents=[{"title": "a", "text": "b"}]) == "False|a"


def test_watchdog_interrupts_only_the_slow_render_among_threads():
    import threading

    from tplparse.source.render import _WATCHDOG

    slow = tpl("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               limits=RenderLimits(seconds=0.3))
    fast = tpl("{% for i in range(2000) %}{% endfor %}ok")
    outcomes = {}

    def run(name, template):
        try:
            outcomes[name] = [template.render(USER) for _ in range(100 if template is fast else 1)][-1]
        except TemplateError as e:
            outcomes[name] = e

    threads = [threading.Thread(target=run, args=("slow", slow))]
    threads += [threading.Thread(target=run, args=(f"fast{i}", fast)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert isinstance(outcomes["slow"], TemplateError) and "longer than 0.3 s" in str(outcomes["slow"])
    assert [outcomes[f"fast{i}"] for i in range(3)] == ["ok"] * 3
    assert _WATCHDOG._active == {}


def test_a_fixed_clock_pins_strftime_now():
    from datetime import datetime

    from tplparse.source.render import fixed_clock

    template = tpl("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}")
    with fixed_clock(datetime(2030, 5, 6, 7, 8, 9)):
        assert template.render(USER) == "2030-05-06 07:08:09"
    assert template.render(USER) != "2030-05-06 07:08:09"


def test_a_watchdog_that_cannot_start_stops_the_render_and_starts_on_the_next(monkeypatch):
    # The machine out of threads when the watchdog starts: not the template refusing its input
    # (which a probe would read as "this shape does not render" and move past), but a limit
    # error naming the cause; and the next render starts the watchdog, never runs unwatched.
    import threading

    from tplparse.source import render

    watchdog = render._Watchdog()
    monkeypatch.setattr(render, "_WATCHDOG", watchdog)
    real_start = threading.Thread.start
    refused = []

    def start(thread):
        if thread.name == "tplparse-render-watchdog" and not refused:
            refused.append(thread)
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(TemplateError) as info:
        tpl("ok").render(USER)
    assert info.value.limit
    assert "outside the template's code: RuntimeError: can't start new thread" in str(info.value)
    assert watchdog._pid is None
    assert tpl("ok").render(USER) == "ok"
    assert watchdog._pid is not None


@pytest.mark.parametrize("failing_render", [1, 7, 30])
def test_a_render_failing_outside_the_template_stops_the_probe(monkeypatch, failing_render):
    # Whichever render of the probe it hits, an error that is not the template's own stops
    # the probe with its cause; it never yields a spec with a conversation silently missing.
    from contextlib import contextmanager

    from tplparse.probe import probe
    from tplparse.source import render

    real_watch = render._WATCHDOG.watch
    count = [0]

    @contextmanager
    def watch(limits):
        count[0] += 1
        if count[0] == failing_render:
            raise RuntimeError("can't start new thread")
        with real_watch(limits) as w:
            yield w

    monkeypatch.setattr(render._WATCHDOG, "watch", watch)
    source = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(TemplateError, match="probing stopped: rendering failed outside the "
                                            "template's code: RuntimeError"):
        probe(tpl(source))
    assert count[0] >= failing_render
