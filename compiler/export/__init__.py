"""Exports: a family's protocol written for another tool (`tplparse export ...`).

`vllm_plugin`: a vLLM plugin. Nothing here imports the target tool (the tests run it, to
prove an export reads the template's renders as tplparse does).
"""
