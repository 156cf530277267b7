"""The serving-bridge side: a prompt tied to its parser, a request's grammar, validation before
acting, retries, transcripts of what a parser was fed and their replay."""

from .grammar import GrammarForm, GrammarRefused, GrammarRequest, RequestGrammar, grammar_for
from .prompt import Prompt, compile_in_memory, parser_for, prompt_for
from .replayer import Change, Replayed, replay
from .retries import Attempt, GaveUp, Success, feedback_messages, reply_errors, with_retries
from .transcripts import (
           Identity,
           Recorder,
           Transcript,
           TranscriptFolder,
           append_transcript,
           read_transcripts,
)
from .validate import ToolCallError, dispatch_check, validate_content, validate_tool_calls

__all__ = ["Attempt", "Change", "GaveUp", "Identity", "Recorder", "Replayed", "Transcript",
           "TranscriptFolder", "append_transcript", "read_transcripts", "replay", "GrammarForm",
           "GrammarRefused", "GrammarRequest", "Prompt", "RequestGrammar", "Success",
           "ToolCallError", "compile_in_memory", "dispatch_check", "feedback_messages",
           "grammar_for", "parser_for", "prompt_for", "reply_errors", "validate_content",
           "validate_tool_calls", "with_retries"]
