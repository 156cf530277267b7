"""A corpus of hostile and odd inputs (issue #51, round 3), each run through the commands a
user runs on a source (`info`, `render`, `probe`, `compile`), one process at a time:

- no traceback, ever: a refusal is one line on stderr, `tplparse: error: ...`, exit status 2,
  naming its cause, and nothing is written;
- an input that is only odd (a template that writes no markers, a '²' in a format string, an
  array nested 200,000 deep under a key tplparse does not read) works;
- probe and compile agree on every input: both exit 0, or both refuse with the same line;
- nothing a file holds reaches the terminal raw: no control character but the line break, no
  bidirectional override, on stdout or stderr.

Each case is built here from bytes (GGUF files are written by hand where the gguf package's
writer will not write the hostile form: a key written twice, arrays nested 200,000 deep).
"""

from __future__ import annotations

import json
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli

MESSAGES = EXAMPLES / "messages.json"
TEMPLATE = (EXAMPLES / "templates" / "chatml-think-tools.jinja").read_text(encoding="utf-8")
# A template that renders a conversation with markers (and so compiles), for the cases whose
# hostile part is elsewhere.
CONVERSATION = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")

# --- GGUF written by hand ---------------------------------------------------------------------

UINT8, UINT32, INT32, STRING, ARRAY = 0, 4, 5, 8, 9


def _string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _entry(key: str, vtype: int, payload: bytes) -> bytes:
    return _string(key) + struct.pack("<I", vtype) + payload


def _tokens(tokens: list[bytes], eos: int) -> list[bytes]:
    """The vocabulary entries: tokens (all control tokens), their types, the eos token's id."""
    return [_entry("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, len(tokens))
                   + b"".join(_string(t) for t in tokens)),
            _entry("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", INT32, len(tokens))
                   + struct.pack(f"<{len(tokens)}i", *[3] * len(tokens))),
            _entry("tokenizer.ggml.eos_token_id", UINT32, struct.pack("<I", eos))]


def gguf_file(path: Path, entries: list[bytes]) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))
    return path


def template_entry(text: str = CONVERSATION, key: str = "tokenizer.chat_template") -> bytes:
    return _entry(key, STRING, _string(text))


def nested_arrays(depth: int) -> bytes:
    """An array of an array of ... (`depth` levels) of no bytes."""
    return struct.pack("<IQ", ARRAY, 1) * (depth - 1) + struct.pack("<IQ", UINT8, 0)


# --- the cases ---------------------------------------------------------------------------------


@dataclass
class Case:
    """A source built in a folder (`make(folder) -> the source's path`), what each command must
    do with it (None: work; a tuple of words: refuse, naming them), and a messages file."""

    name: str
    make: Callable[[Path], Path]
    refused: tuple[str, ...] | None = None
    commands: tuple[str, ...] = ("info", "render", "probe", "compile")
    # the commands that work although the case is refused by others (info reads no render)
    loads: tuple[str, ...] = ()
    messages: Callable[[Path], Path] = field(default=lambda folder: MESSAGES)
    stdin: Callable[[], bytes] | None = None
    # what `render` says instead, where it renders one conversation and names its own error
    render_refused: tuple[str, ...] | None = None


def _write(name: str, text: str | bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        return path
    return make


def _model_folder(config: str, generation: str | None = None) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        model = folder / "model"
        model.mkdir()
        (model / "tokenizer_config.json").write_text(config, encoding="utf-8")
        if generation is not None:
            (model / "generation_config.json").write_text(generation, encoding="utf-8")
        return model
    return make


def _gguf(*entries: bytes) -> Callable[[Path], Path]:
    return lambda folder: gguf_file(folder / "model.gguf", list(entries))


DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = "9" * 5000
CONFIG = json.dumps({"chat_template": CONVERSATION, "eos_token": "</s>"})
GOOD_FOLDER_CONFIG = json.dumps({"chat_template": TEMPLATE, "eos_token": "<|im_end|>",
                                 "added_tokens_decoder": {"7": {"content": "<|im_end|>", "special": True}}})

CASES = [
    # GGUF metadata
    Case("gguf: an unread key holding arrays nested 200,000 deep",
         _gguf(template_entry(), _entry("general.hostile", ARRAY, nested_arrays(200_000)),
               *_tokens([b"</s>"], 0))),
    Case("gguf: the chat template key holding nested arrays",
         _gguf(_entry("tokenizer.chat_template", ARRAY, nested_arrays(200_000))),
         ("'tokenizer.chat_template' holds an array, not a string",)),
    Case("gguf: the chat template key holding a number",
         _gguf(_entry("tokenizer.chat_template", UINT32, struct.pack("<I", 7))),
         ("'tokenizer.chat_template' holds a uint32, not a string",)),
    Case("gguf: the chat template written twice",
         _gguf(template_entry(), template_entry("{{ 'other' }}")),
         ("'tokenizer.chat_template' is written twice", "llama.cpp refuses")),
    Case("gguf: the eos token is not UTF-8",
         _gguf(template_entry(CONVERSATION.replace("</s>", "{{ eos_token }}")), *_tokens([b"<s\xff>"], 0)),
         ("token 0, the eos token", "not valid UTF-8", "0xff")),
    Case("gguf: a model name and variant names that would drive a terminal",
         _gguf(template_entry(), template_entry(CONVERSATION, "tokenizer.chat_template.x\n\x1b[2Jy"),
               _entry("general.name", STRING, _string("evil\x1b[31m\x07\x00\u202ename\u2067")),
               *_tokens([b"</s>"], 0))),
    # JSON beside or as the source
    Case("tokenizer_config.json nested 100,000 deep", _write("tokenizer_config.json", DEEP),
         ("tokenizer_config.json", "nested deeper than Python's recursion limit")),
    Case("tokenizer_config.json with a 5,000-digit number",
         _write("tokenizer_config.json", '{"chat_template": "x", "n": ' + LONG_NUMBER + "}"),
         ("tokenizer_config.json", "more than 4300 digits")),
    Case("generation_config.json nested 100,000 deep", _model_folder(CONFIG, '{"eos_token_id": ' + DEEP + "}"),
         ("generation_config.json", "nested deeper")),
    Case("generation_config.json with a 5,000-digit number",
         _model_folder(CONFIG, '{"eos_token_id": ' + LONG_NUMBER + "}"), ("generation_config.json", "4300 digits")),
    Case("a chat_template holding a lone surrogate",
         _write("tokenizer_config.json", '{"chat_template": "{{ messages }}\\udc00"}'),
         ("chat_template holds a lone surrogate", "'\\udc00'")),
    Case("an eos_token that is a list",
         _write("tokenizer_config.json", json.dumps({"chat_template": CONVERSATION, "eos_token": ["</s>", "<e>"]})),
         ("eos_token is a JSON list",)),
    Case("the messages file nested 100,000 deep", _write("t.jinja", CONVERSATION), ("messages", "nested deeper"),
         commands=("render",), messages=_write("deep.json", DEEP)),
    Case("the messages file with a 5,000-digit number", _write("t.jinja", CONVERSATION), ("messages", "4300 digits"),
         commands=("render",), messages=_write("long.json", f'[{{"role": "user", "content": {LONG_NUMBER}}}]')),
    Case("messages on standard input nested 100,000 deep", _write("t.jinja", CONVERSATION),
         ("<stdin>", "nested deeper"), commands=("render",), stdin=lambda: DEEP.encode()),
    # templates
    Case("a template that writes no markers", _write("t.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}")),
    Case("a lone surrogate in the end-of-turn marker",
         _write("t.jinja", CONVERSATION.replace("</s>", "{{ '\\ud800' }}")),
         ("lone surrogate", "'\\ud800'"), loads=("info",)),
    Case("a template's error holding bidirectional overrides",
         _write("t.jinja", "{{ raise_exception('right\u202eto\u2067left\x1b[2J') }}"),
         ("the template raised an exception", "\\u202e", "\\u2067", "\\x1b"), loads=("info",)),
    Case("a superscript two in format strings",
         _write("t.jinja", "{{ 'area in m²: {}'.format(3) }}{{ 'x² = %d' % 4 }}" + CONVERSATION)),
    Case("a chain of 6,000 elif",  # (Jinja takes seconds to generate its code: two commands)
         _write("t.jinja", "{% if x %}a" + "".join(f"{{% elif x{i} %}}b" for i in range(6000)) + "{% endif %}"),
         ("nests too deeply to compile", "Python's parser"), commands=("probe", "compile")),
    # templates that render nothing to prove a parser on: probe and compile refuse alike
    Case("an empty template", _write("t.jinja", ""), ("renders no assistant turn",), loads=("info", "render")),
    Case("a template of whitespace", _write("t.jinja", "  \n "), ("renders no assistant turn",), loads=("info", "render")),
    Case("a system prompt only", _write("t.jinja", "{{ messages[0].content }}"), ("renders no assistant turn",),
         loads=("info", "render")),
    Case("the generation prompt only", _write("t.jinja", "{% if add_generation_prompt %}<assistant>{% endif %}"),
         ("renders no assistant turn",), loads=("info", "render")),
    Case("messages in reverse order",
         _write("t.jinja", "{% for m in messages|reverse %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"),
         ("renders no assistant turn",), loads=("info", "render")),
    Case("a template that raises on every conversation", _write("t.jinja", "{{ raise_exception('never') }}"),
         ("renders none of the standard turns", "never"), loads=("info",),
         render_refused=("the template raised an exception", "never")),
    Case("a template that lacks a tokenizer variable",
         _write("t.jinja", "{% for m in messages %}{{ m.content }}{{ additional_special_tokens[0] }}{% endfor %}"),
         ("renders none of the standard turns", "'additional_special_tokens' is undefined"), loads=("info",),
         render_refused=("'additional_special_tokens' is undefined",)),
    Case("content only through tojson", _write("t.jinja", "{% for m in messages %}{{ m | tojson }}{% endfor %}"),
         ("the parser does not read back",), loads=("info", "render")),
    Case("a tokenizer whose special tokens include a newline and '<'",
         _model_folder(json.dumps({**json.loads(GOOD_FOLDER_CONFIG), "added_tokens_decoder": {
             "0": {"content": "\n", "special": True}, "1": {"content": "<", "special": True},
             "7": {"content": "<|im_end|>", "special": True}}})),
         ("the parser does not read back",), loads=("info", "render")),
]


# --- running them ------------------------------------------------------------------------------


@dataclass
class Run:
    command: str
    returncode: int
    stdout: str
    stderr: str


def _run(case: Case, command: str, source: Path, folder: Path) -> Run:
    out = folder / f"out-{command}"
    args = {"info": ["info", source], "probe": ["probe", source],
            "compile": ["compile", source, "-o", out],
            "render": ["render", source, "-" if case.stdin else case.messages(folder)]}[command]
    result = run_cli(*args, stdin=case.stdin() if case.stdin and command == "render" else None)
    if result.returncode != 0:
        assert not out.exists(), f"{command} wrote {sorted(p.name for p in out.rglob('*'))} and failed"
    return Run(command, result.returncode, result.stdout, result.stderr)


def _raw_characters(text: str) -> list[str]:
    """The characters of `text` that act on a terminal (all but the line break)."""
    return sorted({repr(ch) for ch in text if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Cs")})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_hostile_input(case: Case, tmp_path):
    source = case.make(tmp_path)
    runs = [_run(case, command, source, tmp_path) for command in case.commands]
    for run in runs:
        assert "Traceback" not in run.stderr, f"{run.command}: {run.stderr[-3000:]}"
        assert not _raw_characters(run.stdout + run.stderr), (run.command, _raw_characters(run.stdout + run.stderr))
        if case.refused is None or run.command in case.loads:
            assert run.returncode == 0, f"{run.command}: {run.stderr[-2000:]}"
            continue
        assert run.returncode == 2, f"{run.command} exited {run.returncode}: {run.stderr[-2000:]}"
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tplparse: error: "), f"{run.command}: {run.stderr[-2000:]}"
        words = case.render_refused if run.command == "render" and case.render_refused else case.refused
        for word in words:
            assert word in lines[0], (run.command, word, lines[0])
    by_command = {run.command: run for run in runs}
    if "probe" in by_command and "compile" in by_command:
        probe, compile_ = by_command["probe"], by_command["compile"]
        assert probe.returncode == compile_.returncode, (probe.stderr, compile_.stderr)
        if compile_.returncode:
            assert probe.stderr == compile_.stderr  # (the same refusal, the same words)


def test_the_names_a_gguf_holds_are_escaped_in_every_grammar_file(tmp_path):
    source = gguf_file(tmp_path / "m.gguf", [template_entry(), _entry("general.name", STRING, _string(
        "evil\x1b[31m\x07\x00\u202ename")), *_tokens([b"</s>"], 0)])
    result = run_cli("compile", source, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    for path in (tmp_path / "out" / "grammars").iterdir():
        text = path.read_text(encoding="utf-8")
        assert not _raw_characters(text), (path.name, _raw_characters(text))
        if path.suffix in (".gbnf", ".lark", ".peg"):
            assert "evil\\x1b[31m\\x07\\x00\\u202ename" in text, path.name


def test_a_template_without_markers_compiles_to_a_parser_that_reads_everything_as_content(tmp_path):
    source = tmp_path / "t.jinja"
    source.write_text("{% for m in messages %}{{ m.content }}{% endfor %}", encoding="utf-8")
    assert run_cli("compile", source, "-o", tmp_path / "out").returncode == 0
    result = run_cli("parse", tmp_path / "out" / "generated" / "t.py", stdin="Hello <b>there</b>, a < b")
    assert json.loads(result.stdout)["content"] == "Hello <b>there</b>, a < b"
