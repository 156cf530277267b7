"""Transcripts and replay (bridge/transcripts.py, bridge/replay.py, `tplparse parse --record`,
`tplparse serve --record`, `tplparse replay`): what a transcript holds, that every writer
writes the one format, that replay reads an output again one-shot and in its recorded
chunks and names each field that changed, the exit codes, retention, and, against the real
llama-server, a recorded run replayed against its own template (nothing changes) and
against a corpus revision that changes the protocol (the change is reported)."""

from __future__ import annotations

import json
import os
import time

import pytest

import tplparse
from conftest import CORPUS, EXAMPLES, REPO, run_cli
from tplparse.bridge import parser_for
from tplparse.bridge.replayer import replay
from tplparse.bridge.transcripts import (TRANSCRIPT_FORMAT, Identity, Recorder, Retention, Transcript, TranscriptFolder,
                                         append_transcript, read_transcripts)

TEMPLATE = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
IDENTITY = Identity(TEMPLATE.sha256, TEMPLATE.name, "chatml-think-tools", "a-model")
OUTPUT = ('<think>The user asks for Paris.</think>Let me check. <tool_call>\n{"name": "get_weather", '
          '"arguments": {"city": "Paris, Île-de-France"}}\n</tool_call>')


def _make(template=TEMPLATE):
    return lambda tools=None, generation_prompt=None, start=None: parser_for(template, tools, generation_prompt, start)


def _recorded(chunks, finish="stop", tools=TOOLS) -> Transcript:
    recorder = Recorder(parser_for(TEMPLATE, tools), IDENTITY, tools=tools, generation_prompt="<|im_start|>assistant\n")
    for chunk in chunks:
        recorder.feed(chunk)
    recorder.end(finish)
    return recorder.transcript()


def test_a_recorder_gives_the_parsers_deltas_and_keeps_the_chunks_as_they_came():
    chunks = [OUTPUT[:7], OUTPUT[7:40], OUTPUT[40:]]
    plain = parser_for(TEMPLATE, TOOLS)
    expected = [d for c in chunks for d in plain.feed(c)] + plain.end("stop")
    recorder = Recorder(parser_for(TEMPLATE, TOOLS), IDENTITY, tools=TOOLS)
    got = [d for c in chunks for d in recorder.feed(c)] + recorder.end("stop")
    assert got == expected
    transcript = recorder.transcript()
    assert transcript.chunks == chunks and transcript.message == plain.message
    assert transcript.start == "content" and transcript.model == "a-model"
    assert transcript.message["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_transcript_round_trips_through_its_json_bytes_chunks_and_all(tmp_path):
    data = OUTPUT.encode("utf-8")
    cut = data.index("Î".encode()) + 1  # inside the two bytes of Î
    transcript = _recorded([data[:cut], data[cut:]])
    assert transcript.message["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris, Île-de-France"}'
    path = tmp_path / "t.jsonl"
    append_transcript(path, transcript)
    append_transcript(path, _recorded([OUTPUT]))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["format"] for line in lines] == [TRANSCRIPT_FORMAT] * 2
    assert lines[0]["chunks"][0] == {"bytes": __import__("base64").b64encode(data[:cut]).decode()}
    back = read_transcripts(path)
    assert back[0] == transcript and back[0].chunks == [data[:cut], data[cut:]]
    assert not replay(back[0], _make()).changed


def test_replay_with_the_same_parser_changes_nothing_and_in_every_field_with_another():
    transcript = _recorded([OUTPUT[i:i + 5] for i in range(0, len(OUTPUT), 5)])
    same = replay(transcript, _make())
    assert not same.changed and not same.deltas_changed
    other = replay(transcript, _make(tplparse.load(EXAMPLES / "bracket-tools.gguf")))
    changed = {c.field: c for c in other.changes}
    assert set(changed) == {"content", "reasoning_content", "tool_calls"}
    assert changed["tool_calls"].recorded == [{"name": "get_weather", "arguments": '{"city": "Paris, Île-de-France"}'}]
    assert changed["tool_calls"].replayed == [] and changed["content"].replayed == OUTPUT


def test_replay_reads_the_recorded_start_state_not_a_default():
    """An output generated after a prompt that opened reasoning carries only the end marker:
    replayed from the recorded state it is the same message."""
    recorder = Recorder(parser_for(TEMPLATE, TOOLS, start="reasoning"), IDENTITY, tools=TOOLS)
    recorder.feed("Short thought.</think>Hello.")
    recorder.end("stop")
    transcript = recorder.transcript()
    assert transcript.start == "reasoning" and transcript.message["reasoning_content"] == "Short thought."
    assert not replay(transcript, _make()).changed
    forced = replay(transcript, _make(), start="content")
    assert {c.field for c in forced.changes} == {"content", "reasoning_content"}


class _ChunkSensitive:
    """A parser that reads a chunked output differently from a whole one (a bug replay must
    report as stream != one-shot)."""

    def __init__(self, **_):
        self.chunks = 0
        self.text = ""

    def feed(self, chunk):
        self.chunks += 1
        self.text += chunk
        return []

    def end(self, finish_reason):
        self.finish = finish_reason
        return []

    @property
    def message(self):
        content = self.text if self.chunks == 1 else self.text[:-1]
        return {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": [], "errors": [],
                "finish_reason": self.finish}


def test_replay_reports_a_stream_that_differs_from_its_one_shot():
    transcript = _recorded(["Hel", "lo."], tools=None)
    result = replay(transcript, _ChunkSensitive)
    assert [c.field for c in result.changes] == ["stream"]
    assert result.changes[0].recorded["content"] == "Hello." and result.changes[0].replayed["content"] == "Hello"


def test_parse_record_then_replay_on_the_command_line(tmp_path):
    record = tmp_path / "record.jsonl"
    for text in ("Hi<|im_end|>", OUTPUT):
        result = run_cli("parse", EXAMPLES / "chatml-think-tools.gguf", "--record", record, "--tools",
                         EXAMPLES / "tools.json", "--stream", stdin=text)
        assert result.returncode == 0, result.stderr
    transcripts = read_transcripts(record)
    assert ["".join(t.chunks) for t in transcripts] == ["Hi<|im_end|>", OUTPUT]
    assert all(len(t.chunks) > 1 and t.writer == "parse" for t in transcripts)  # (--stream feeds 8 characters at a time)
    assert transcripts[0].message["content"] == "Hi" and transcripts[0].template_sha256 == TEMPLATE.sha256

    same = run_cli("replay", EXAMPLES / "chatml-think-tools.gguf", record)
    assert same.returncode == 0, same.stderr
    assert "0 of 2 transcripts changed" in same.stdout and same.stdout.count("unchanged") == 2
    other = run_cli("replay", EXAMPLES / "bracket-tools.gguf", record, "--json")
    assert other.returncode == 1, other.stderr
    report = json.loads(other.stdout)
    assert report["changed"] == 2
    fields = [{c["field"] for c in r["changes"]} for r in report["results"]]
    assert fields[1] == {"content", "reasoning_content", "tool_calls"}
    # a generated module replays as the template does
    module = run_cli("replay", REPO / "generated" / "chatml_think_tools.py", record)
    assert module.returncode == 0, module.stdout + module.stderr


@pytest.mark.parametrize("line, said", [
    ("{not json", "record.jsonl:1: invalid JSON"),
    ('{"format": "something-else"}', "not a transcript (format is 'something-else'"),
    ('{"format": "tplparse-transcript", "version": 99}', "transcript version 99"),
    (json.dumps({**_recorded(["Hi"], tools=None).to_json(), "chunks": [3]}), "chunks[0]: expected a string"),
    (json.dumps({**_recorded(["Hi"], tools=None).to_json(), "message": []}), "message: expected an object, not list"),
    (json.dumps({**_recorded(["Hi"], tools=None).to_json(), "start": "middle"}), "start: expected one of"),
])
def test_replay_refuses_what_is_not_a_transcript_naming_file_line_and_field(tmp_path, line, said):
    path = tmp_path / "record.jsonl"
    path.write_text(line + "\n")
    result = run_cli("replay", EXAMPLES / "chatml-think-tools.gguf", path)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    missing = run_cli("replay", EXAMPLES / "chatml-think-tools.gguf", tmp_path / "none.jsonl")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_a_transcript_folder_keeps_the_newest_and_drops_the_old(tmp_path):
    folder = TranscriptFolder(tmp_path / "t", Retention(keep=3, max_age_days=1))
    transcript = _recorded(["Hi"], tools=None)
    written = [folder.write(transcript, f"r{i}") for i in range(5)]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == sorted(p.name for p in written[-3:])
    old = written[-3]
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    folder.write(transcript, "r5")
    names = {p.name for p in (tmp_path / "t").iterdir()}
    assert old.name not in names and len(names) == 3
    assert all(read_transcripts(p)[0] == transcript for p in (tmp_path / "t").iterdir())


# --- tplparse serve --record ----------------------------------------------------------------

httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")
pytest.importorskip("starlette", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

import asyncio  # noqa: E402

from tplparse.serve import Finished, create_app  # noqa: E402
from test_serve import Scripted  # noqa: E402


def _post(app, body):
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.post("/v1/chat/completions", json=body)
    return asyncio.run(run())


def test_serve_records_every_generation_streamed_or_not(tmp_path):
    pieces = ["<think>Paris.</think>", '<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n',
              "</tool_call>"]
    upstream = Scripted(pieces + [Finished("stop", 20, 9)], pieces[:2] + [Finished("length", 20, 4)])
    folder = TranscriptFolder(tmp_path / "rec", Retention(keep=10, max_age_days=None))
    app = create_app(TEMPLATE, upstream, "example", folder)
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    assert _post(app, {"messages": ask, "tools": TOOLS, "stream": True}).status_code == 200
    assert _post(app, {"messages": ask, "tools": TOOLS}).status_code == 200
    files = sorted((tmp_path / "rec").iterdir())
    transcripts = [read_transcripts(f)[0] for f in files]
    assert [t.chunks for t in transcripts] == [pieces, pieces[:2]]  # the upstream's own pieces
    assert [t.finish_reason for t in transcripts] == ["stop", "length"]
    assert {t.writer for t in transcripts} == {"serve"} and {t.model for t in transcripts} == {"scripted"}
    assert transcripts[0].message["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert transcripts[1].message["tool_calls"] == [] and transcripts[1].message["errors"][0]["kind"] == "truncated_tool_call"
    assert transcripts[0].tools == TOOLS and transcripts[0].generation_prompt.endswith("<|im_start|>assistant\n")
    assert all(not replay(t, _make()).changed for t in transcripts)


# --- against the real llama-server -----------------------------------------------------------

REVISIONS = ("DeepSeek-R1-Distill-Qwen-32B-rev2.jinja", "DeepSeek-R1-Distill-Qwen-32B.jinja")


@pytest.mark.e2e
def test_a_run_recorded_by_serve_replays_unchanged_and_a_protocol_revision_is_reported(llama_server, tmp_path):
    """SmolLM2 behind the real llama-server, under the DeepSeek R1 Distill revision that writes
    tool calls, asked for one: the recorded run replays against that template unchanged, and
    against the first revision (which has no tool-call format) the call is reported gone."""
    if not all((CORPUS / name).is_file() for name in REVISIONS):
        pytest.skip(f"the corpus is not at {CORPUS}")
    from servers import start_tplparse_serve

    openai = pytest.importorskip("openai")
    new, old = (CORPUS / name for name in REVISIONS)
    record = tmp_path / "rec"
    server = start_tplparse_serve(new, llama_server.url, tmp_path / "serve.log", "--record", str(record))
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        answer = client.chat.completions.create(
            model=new.name, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
            tool_choice="required", parallel_tool_calls=False, max_tokens=200, temperature=0, stream=True,
            extra_body={"thinking": False})
        finish = [chunk.choices[0].finish_reason for chunk in answer if chunk.choices][-1]
    finally:
        server.stop()
    files = sorted(record.iterdir())
    assert len(files) == 1, files
    transcript = read_transcripts(files[0])[0]
    assert transcript.template_sha256 == tplparse.load(new).sha256 and finish == "tool_calls"
    assert len(transcript.chunks) > 1 and transcript.message["tool_calls"], transcript.message

    same = run_cli("replay", new, files[0])
    assert same.returncode == 0 and "0 of 1 transcripts changed" in same.stdout, same.stdout + same.stderr
    changed = run_cli("replay", old, files[0], "--json")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    changes = {c["field"]: c for c in json.loads(changed.stdout)["results"][0]["changes"]}
    assert changes["tool_calls"]["replayed"] == [] and changes["tool_calls"]["recorded"]
