"""Call a tool with an outputSchema through fedgate's plan envelopes with the official Python SDK.

Usage: python envelope_structured.py --url URL --mode legacy|modern --tool NAME

The SDK checks every successful result against the tool's outputSchema (and raises if it does
not match); fedgate adds its plan only in `_meta` (and a text block in mode `always`), so the
check must pass. Then a call with invalid arguments: fedgate's refusal is an isError result
without structuredContent, which the SDK accepts. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as types
from mcp import Client

PLAN_KEY = "io.fedgate/orchestrated_plan"


def dump(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.meta or {}
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
        "plan": meta.get(PLAN_KEY),
    }


async def main(url: str, mode: str, tool: str) -> dict[str, Any]:
    async with Client(url, mode="legacy" if mode == "legacy" else "auto", read_timeout_seconds=15.0) as client:
        await client.list_tools()  # the SDK learns the output schemas here
        ok = await client.call_tool(tool, {"title": "T", "priority": "high"})
        refused = await client.call_tool(tool, {"priority": "urgent"})
        return {"ok": dump(ok), "refused": dump(refused)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=["legacy", "modern"], required=True)
    parser.add_argument("--tool", required=True)
    a = parser.parse_args()
    print(json.dumps(anyio.run(main, a.url, a.mode, a.tool)))
