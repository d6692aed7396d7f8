"""Stage-gated tool sets through fedgate with the official Python SDK (handshake era).

Usage: python stages.py --url URL --collector KEY --reviewer KEY --workspace ID

A collector's session and a reviewer's session on one workspace of the research workflow:
- collector, before naming a workspace: its tool list, and a call of a gated tool;
- collector: `fedgate__stage_status` (binds the session; `list_changed` follows), the list,
  calls of `research__decide` (not its role), `research__verify` (another stage),
  `research__collect` (this stage), and a move it may not make;
- reviewer: a move with no transition, one without its reason, then the move with a reason;
- collector: the `list_changed` the move sends, the new list, `research__verify` now.

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
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


class Changes:
    """Counts `notifications/tools/list_changed` and lets the script wait for the next one."""

    def __init__(self) -> None:
        self.count = 0
        self.event = anyio.Event()

    async def __call__(self, m: IncomingMessage) -> None:
        if isinstance(m, types.ToolListChangedNotification):
            self.count += 1
            self.event.set()

    async def next(self) -> bool:
        with anyio.move_on_after(TIMEOUT):
            await self.event.wait()
            self.event = anyio.Event()
            return True
        return False


def connect(url: str, key: str, changes: Changes) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30.0)
    return Client(
        streamable_http_client(url, http_client=http),
        mode="legacy",
        message_handler=changes,
        read_timeout_seconds=TIMEOUT,
    )


async def names(c: Client) -> list[str]:
    return sorted(t.name for t in (await c.list_tools()).tools)


async def main() -> None:
    p = argparse.ArgumentParser()
    for a in ("--url", "--collector", "--reviewer", "--workspace"):
        p.add_argument(a, required=True)
    a = p.parse_args()
    ws = {"workspace": a.workspace}
    report: dict[str, Any] = {}
    seen, theirs = Changes(), Changes()
    async with connect(a.url, a.collector, seen) as c, connect(a.url, a.reviewer, theirs) as r:
        report["unbound_list"] = await names(c)
        report["unbound_call"] = await outcome(c, "research__collect", {"workspace": a.workspace, "claim": "x"})
        report["status"] = await outcome(c, "fedgate__stage_status", ws)
        report["bound_notified"] = await seen.next()
        report["collecting_list"] = await names(c)
        report["decide"] = await outcome(c, "research__decide", {"workspace": a.workspace, "decision": "go"})
        report["verify_early"] = await outcome(c, "research__verify", {"workspace": a.workspace, "evidence_id": 1, "credibility": "high"})
        flow_args = {"workspace": a.workspace, "evidence_id": 1, "credibility": "medium"}
        report["flow_early"] = await outcome(c, "flows__verify_and_compare", flow_args)
        report["collect"] = await outcome(c, "research__collect", {"workspace": a.workspace, "claim": "the sky is blue", "source": "look up"})
        report["collector_advance"] = await outcome(c, "fedgate__stage_advance", {**ws, "to": "verifying", "reason": "done"})
        report["no_transition"] = await outcome(r, "fedgate__stage_advance", {**ws, "to": "decided", "reason": "skip"})
        report["no_reason"] = await outcome(r, "fedgate__stage_advance", {**ws, "to": "verifying"})
        report["advance"] = await outcome(r, "fedgate__stage_advance", {**ws, "to": "verifying", "reason": "enough evidence collected"})
        report["moved_notified"] = await seen.next()
        report["verifying_list"] = await names(c)
        report["verify"] = await outcome(c, "research__verify", {"workspace": a.workspace, "evidence_id": 1, "credibility": "high"})
        report["flow"] = await outcome(c, "flows__verify_and_compare", flow_args)
        report["collect_late"] = await outcome(c, "research__collect", {"workspace": a.workspace, "claim": "late"})
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
