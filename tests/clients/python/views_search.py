"""Views and tool search through fedgate with the official Python SDK.

Usage: python views_search.py --url URL --view-url URL --word WORD

- view: through `--view-url` (`/mcp/<view>`), the tools listed and a call by exact name of a
  tool outside the view (refused) and inside it (answered);
- search (handshake era, one session): the first `tools/list`, `fedgate__find_tools` for WORD,
  `fedgate__select_tools` of the best match, the `notifications/tools/list_changed` that
  follows, the next `tools/list` and a call of the selected tool by its own name;
- fallback (stateless era, no session): `fedgate__select_tools` refused with the hint,
  `fedgate__call_tool` of the found tool.

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError

TIMEOUT = 20.0


def texts(r: types.CallToolResult) -> str:
    return "".join(c.text for c in r.content if isinstance(c, types.TextContent))


async def outcome(c: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A call's result, or the JSON-RPC error it was refused with."""
    try:
        r = await c.call_tool(name, args)
    except MCPError as e:
        return {"is_error": True, "rpc_error": True, "text": e.message, "data": e.data}
    return {"is_error": bool(r.is_error), "rpc_error": False, "text": texts(r), "structured": r.structured_content}


async def all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def view(url: str) -> dict[str, Any]:
    async with Client(url, mode="legacy", read_timeout_seconds=TIMEOUT) as c:
        names = [t.name for t in await all_tools(c)]
        described = {t.name: t.description for t in await all_tools(c)}
        return {
            "names": names,
            "description": described.get("u01__tool_001"),
            "outside": await outcome(c, "u02__tool_001", {}),
            "inside": await outcome(c, "u01__tool_001", {}),
        }


async def search(url: str, word: str) -> dict[str, Any]:
    notes: list[Any] = []
    changed = anyio.Event()

    async def on_message(m: IncomingMessage) -> None:
        if isinstance(m, types.ToolListChangedNotification):
            notes.append("tools/list_changed")
            changed.set()

    async with Client(url, mode="legacy", message_handler=on_message, read_timeout_seconds=TIMEOUT) as c:
        first = [t.name for t in await all_tools(c)]
        found = await c.call_tool("fedgate__find_tools", {"query": word, "limit": 5})
        hits = (found.structured_content or {}).get("tools", [])
        best = hits[0]["name"] if hits else None
        selected = await outcome(c, "fedgate__select_tools", {"names": [best]}) if best else None
        with anyio.move_on_after(TIMEOUT):
            await changed.wait()
        after = await all_tools(c)
        listed = next((t for t in after if t.name == best), None)
        answer = await outcome(c, best, {"n": 1}) if best else None
        unknown = await outcome(c, "fedgate__select_tools", {"names": ["u00__no_such_tool"]})
        missing = await outcome(c, "u03__tool_no_such", {})
        return {
            "first": first,
            "hits": [{"name": h["name"], "description": h.get("description"), "schema": h.get("inputSchema")} for h in hits],
            "selected": selected,
            "notes": notes,
            "after": [t.name for t in after],
            "listed_schema": None if listed is None else listed.input_schema,
            "answer": answer,
            "unknown": unknown,
            "missing": missing,
        }


async def fallback(url: str, word: str) -> dict[str, Any]:
    async with Client(url, mode="auto", read_timeout_seconds=TIMEOUT) as c:
        found = await c.call_tool("fedgate__find_tools", {"query": word, "limit": 1})
        hits = (found.structured_content or {}).get("tools", [])
        best = hits[0]["name"] if hits else "none"
        return {
            "best": best,
            "selected": await outcome(c, "fedgate__select_tools", {"names": [best]}),
            "called": await outcome(c, "fedgate__call_tool", {"name": best, "arguments": {"n": 2}}),
            "bad": await outcome(c, "fedgate__call_tool", {"name": best, "arguments": {"n": "two"}}),
        }


async def main(a: argparse.Namespace) -> dict[str, Any]:
    return {
        "view": await view(a.view_url),
        "search": await search(a.url, a.word),
        "fallback": await fallback(a.url, a.word),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--view-url", required=True)
    p.add_argument("--word", required=True)
    print(json.dumps(anyio.run(main, p.parse_args())))
