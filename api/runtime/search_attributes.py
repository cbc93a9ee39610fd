"""The session search attributes on a Temporal server: the flags that declare them to a
new dev server, and their registration on a namespace that lacks them."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

from api.runtime.devserver_setup import DevServerError
from workflows.search_attributes import SEARCH_ATTRIBUTES, cli_type_name


def search_attribute_args() -> list[str]:
    """``--search-attribute NAME=Type`` for every session search attribute."""
    args: list[str] = []
    for key in SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{key.name}={cli_type_name(key)}"]
    return args


async def register_search_attributes(client: Client, namespace: str) -> list[str]:
    """Register the session search attributes that ``namespace`` lacks; return their names.

    ``start-dev --search-attribute`` only applies when it creates the namespace, i.e. to
    a new database; a data directory from before keeps its old set until this runs.
    Works against any Temporal server (e.g. the docker-compose cluster). Raises
    DevServerError when a name is registered with another type.
    """
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    existing = {**resp.system_attributes, **resp.custom_attributes}
    missing: dict[str, IndexedValueType.ValueType] = {}
    for key in SEARCH_ATTRIBUTES:
        wanted = IndexedValueType.ValueType(key.indexed_value_type.value)
        if key.name not in existing:
            missing[key.name] = wanted
        elif existing[key.name] != wanted:
            raise DevServerError(
                f"search attribute {key.name} is registered in namespace {namespace} as "
                f"{IndexedValueType.Name(existing[key.name])}, but sessions need "
                f"{IndexedValueType.Name(wanted)}"
            )
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    return sorted(missing)
