"""The serving-bridge side: a prompt tied to its parser, validation before acting, retries."""

from .prompt import Prompt, compile_in_memory, parser_for, prompt_for
from .retries import Attempt, GaveUp, Success, feedback_messages, reply_errors, with_retries
from .validate import ToolCallError, validate_content, validate_tool_calls

__all__ = ["Attempt", "GaveUp", "Prompt", "Success", "ToolCallError", "compile_in_memory", "feedback_messages", "parser_for",
           "prompt_for", "reply_errors", "validate_content", "validate_tool_calls", "with_retries"]
