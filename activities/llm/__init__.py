"""The LLM activity: one model call, scripted or OpenAI-compatible, with seed 003 payloads.

``llm_call`` returns the model's answer in our terms (text, tool calls, a request
to the person, end of conversation) together with the binding LLM_CALL_STARTED and
LLM_CALL_FINISHED payloads. A failure is raised as an ``ApplicationError`` whose
single detail is the LLM_CALL_FAILED payload (``LLMCallFailed``), whose
``non_retryable`` flag follows the one classification table below and whose
``next_retry_delay`` is the provider's own delay (``retry-after-ms`` /
``Retry-After``) when it gave one: the workflow, not the SDK, decides when to try
again (``workflows/provider_wait.py``).

A tool call whose arguments are not a JSON object or do not fit the tool's input
schema (an invalid ``ask_user`` too) is a model mistake, not a failure: it comes
back with ``arguments_error`` set, and the workflow tells the model.

Providers:

- ``scripted``: plays ``llm.responses[call_index]``; no network, deterministic.
- ``openai``: any OpenAI-compatible chat-completions endpoint through the ``openai``
  SDK (``max_retries=0``), streamed (``stream=True``, usage asked for with
  ``stream_options.include_usage``). The key is read from the environment variable
  *named* by ``api_key_env`` at call time; it is never logged, returned or put in
  an error.

Both stream their text, as it comes, to the worker's ``DeltaBus``
(``activities.deltas``; the scripted provider in a few pieces) and heartbeat
while they do (details: the call id and the characters received so far). The
deltas never reach the history: the result carries the whole text, as before.

The model sees our MCP tools as function tools named ``<server>__<tool>`` (made
safe for the function-name rules, see ``ToolNames``) plus two pseudo tools:
``ask_user`` (its call becomes ``ecs_request``) and ``end_conversation`` (its call
sets ``end``). That mapping, both ways, lives in this module only.

The package, by concern (only ``payloads`` and ``wire`` are free of openai and
jsonschema, so an exporter can recompute a call's LLM_CALL_STARTED without them):

- ``wire``: our tools as the model's functions (``ToolNames``) and the
  chat-completions message format;
- ``payloads``: the LLM_CALL_STARTED payload, hashes, prices and cost;
- ``failures``: the error taxonomy, retry classification, ``Retry-After``, redaction;
- ``answer``: the model's answer in our terms, its tool-call arguments checked;
- ``streaming``: text to the ``DeltaBus`` as it comes, with heartbeats;
- ``providers``: the scripted and the OpenAI-compatible provider;
- ``activity``: ``LlmActivities.llm_call``, the registered activity.
"""
