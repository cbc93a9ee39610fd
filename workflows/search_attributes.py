"""The custom search attributes of a session, declared once.

The session workflow upserts them; ``hitlflow up`` (and the test dev server)
registers them at server start, so operators can filter sessions in the
Temporal UI (``SessionStatus = "waiting_user"``) and the API can list them.
Deterministic constants only: safe to import from workflow code.
"""

from __future__ import annotations

from functools import cache

from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributeUpdate,
)

#: The canonical session status (``workflows.statechart.SessionStatus`` values).
SESSION_STATUS = SearchAttributeKey.for_keyword("SessionStatus")
#: When the session started waiting for the person (unset while not waiting).
WAITING_SINCE = SearchAttributeKey.for_datetime("WaitingSince")

#: WaitingSince unset, built once: ``value_set``/``value_unset`` build a generic alias
#: (and fail to set ``__orig_class__`` on a frozen dataclass) per call, and the session
#: upserts twice a turn. The updates are frozen: the same value in every command.
WAITING_SINCE_UNSET = WAITING_SINCE.value_unset()


@cache
def status_update(status: str) -> SearchAttributeUpdate[str]:
    """SessionStatus set to ``status``, built once per status (see WAITING_SINCE_UNSET)."""
    return SESSION_STATUS.value_set(status)


#: Every custom search attribute a session uses: the one list to register.
SEARCH_ATTRIBUTES: tuple[SearchAttributeKey, ...] = (SESSION_STATUS, WAITING_SINCE)

# The type names that `temporal server start-dev --search-attribute NAME=TYPE` accepts.
_CLI_TYPE_NAMES: dict[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def cli_type_name(key: SearchAttributeKey) -> str:
    """The Temporal CLI's name for the key's type, e.g. ``"Keyword"``."""
    return _CLI_TYPE_NAMES[key.indexed_value_type]
