"""Connect to the server a client config file names, as that client would, with the official
Python SDK, and print its tool names as JSON.

    python from_client_config.py FILE KEY NAME

KEY is `mcpServers` (Claude Desktop, Cursor) or `servers` (VS Code). An entry with `url` is
reached over Streamable HTTP; one with `command` is started over stdio with its `args`.
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def main(path: str, key: str, name: str) -> None:
    with open(path, encoding="utf-8") as f:
        entry = json.load(f)[key][name]
    server = entry["url"] if "url" in entry else StdioServerParameters(command=entry["command"], args=entry.get("args", []))
    async with Client(server, read_timeout_seconds=30.0) as client:
        tools = (await client.list_tools()).tools
    print(json.dumps({"tools": sorted(t.name for t in tools)}))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
