"""An MCP server set up as the official Python SDK documents an OAuth resource server:
`MCPServer(auth=AuthSettings(...), token_verifier=...)` over Streamable HTTP. Every request
needs a bearer token (401 with the RFC 9728 challenge otherwise); the SDK serves the
protected-resource metadata naming the authorization server.

Usage: python oauth_upstream.py --issuer URL

The token verifier asks the authorization server's userinfo endpoint who a token belongs to
(the test server issues opaque tokens). Tools:
- `whoami`: "acting as <subject>", for everyone;
- `notes`: listed, and callable, only for `alice` — a server that shows each person their own
  tools.

Prints exactly one stdout line, `oauth-upstream-listening <url>`, once it listens on
127.0.0.1 (a free port).
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import anyio
import httpx2
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer


class Userinfo:
    """A `TokenVerifier`: a token is whoever the authorization server's userinfo names."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.endpoint: str | None = None

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx2.AsyncClient(timeout=10.0) as http:
            if self.endpoint is None:
                meta = await http.get(f"{self.issuer}/.well-known/openid-configuration")
                self.endpoint = meta.json()["userinfo_endpoint"]
            r = await http.get(self.endpoint, headers={"authorization": f"Bearer {token}"})
        if r.status_code != 200:
            return None
        return AccessToken(token=token, client_id="fedgate", scopes=[], subject=r.json().get("sub"))


def subject() -> str | None:
    token = get_access_token()
    return token.subject if token else None


class PerPerson(MCPServer):
    """Lists `notes` to alice alone."""

    async def _handle_list_tools(self, ctx: Any, params: Any) -> Any:
        result = await super()._handle_list_tools(ctx, params)
        if subject() != "alice":
            result.tools = [t for t in result.tools if t.name != "notes"]
        return result


def build(issuer: str, port: int) -> PerPerson:
    server = PerPerson(
        name="python-oauth-upstream",
        token_verifier=Userinfo(issuer),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=f"http://127.0.0.1:{port}/mcp",
            # The verifier asks the authorization server; its tokens name no resource.
            validate_token_resource=False,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """Who the upstream sees."""
        return f"acting as {subject()}"

    @server.tool()
    def notes() -> str:
        """Alice's notes."""
        if subject() != "alice":
            raise ValueError("no notes for you")
        return "alice's notes"

    return server


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--issuer", required=True)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    app = build(args.issuer, port).streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"oauth-upstream-listening http://127.0.0.1:{port}/mcp", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        sys.exit(0)
