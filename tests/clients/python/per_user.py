"""Per-user credentials through fedgate with the official Python SDK, in either era.

Usage: python per_user.py --url URL --key API_KEY (--token UPSTREAM_TOKEN | --sign-in-as NAME)
       --mode legacy|modern

The client declares URL-mode elicitation (the SDK does when an elicitation callback is set).
Asked to connect, it does what its person would: opens the link (httpx stands in for the
browser) and either pastes the token on fedgate's page, or (`--sign-in-as`, an OAuth upstream)
follows the redirects to the authorization server, signs in there as NAME (the test server
reads an `X-Test-User` header) and back to fedgate's callback; then accepts. Then it calls
`gh__whoami` again.

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.streamable_http import streamable_http_client

TIMEOUT = 30.0


class Person:
    """Answers URL elicitations by connecting on the page; remembers what it saw."""

    def __init__(self, key: str, token: str | None, sign_in_as: str | None) -> None:
        # The person's own fedgate key: the page asks for it before it connects anything.
        self.key = key
        self.token = token
        self.sign_in_as = sign_in_as
        self.asked: list[dict[str, Any]] = []
        self.pages: list[int] = []
        self.completed: list[str] = []

    async def on_elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if getattr(params, "mode", None) != "url":
            return types.ElicitResult(action="decline")
        url = params.url
        self.asked.append({"url": url, "elicitation_id": params.elicitation_id, "message": params.message})
        parts = urlsplit(url)
        state = parse_qs(parts.query)["state"][0]
        if self.sign_in_as is not None:
            headers = {"X-Test-User": self.sign_in_as}
            async with httpx2.AsyncClient(timeout=TIMEOUT, follow_redirects=True, headers=headers) as browser:
                page = await browser.get(url)
                self.pages.append(page.status_code)
                # Confirming on the page sends the browser on to sign in, and back.
                signed_in = await browser.post(
                    f"{parts.scheme}://{parts.netloc}{parts.path}",
                    data={"state": state, "proof": self.key},
                )
                self.pages.append(signed_in.status_code)
            return types.ElicitResult(action="accept")
        async with httpx2.AsyncClient(timeout=TIMEOUT) as browser:
            page = await browser.get(url)
            self.pages.append(page.status_code)
            posted = await browser.post(
                f"{parts.scheme}://{parts.netloc}{parts.path}",
                data={"state": state, "proof": self.key, "token": self.token},
            )
            self.pages.append(posted.status_code)
        return types.ElicitResult(action="accept")

    async def on_message(self, m: IncomingMessage) -> None:
        if isinstance(m, types.ElicitCompleteNotification):
            self.completed.append(m.params.elicitation_id)


def texts(r: types.CallToolResult) -> str:
    return "".join(c.text for c in r.content if isinstance(c, types.TextContent))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--token")
    ap.add_argument("--sign-in-as")
    ap.add_argument("--mode", choices=["legacy", "modern"], required=True)
    a = ap.parse_args()
    person = Person(a.key, a.token, a.sign_in_as)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.key}"}, timeout=TIMEOUT)
    report: dict[str, Any] = {"client": "python"}
    try:
        async with Client(
            streamable_http_client(a.url, http_client=http),
            mode="legacy" if a.mode == "legacy" else "auto",
            elicitation_callback=person.on_elicit,
            message_handler=person.on_message,
            read_timeout_seconds=TIMEOUT,
        ) as c:
            report["protocol"] = c.protocol_version
            first = await c.call_tool("gh__whoami", {})
            report["first"] = {"text": texts(first), "is_error": bool(first.is_error)}
            second = await c.call_tool("gh__whoami", {})
            report["second"] = {"text": texts(second), "is_error": bool(second.is_error)}
            # The completion notification may trail the result on the stream.
            with anyio.move_on_after(5):
                while a.mode == "legacy" and not person.completed:
                    await anyio.sleep(0.05)
    except Exception as exc:  # noqa: BLE001 - the report says what failed
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["asked"] = person.asked
    report["pages"] = person.pages
    report["completed"] = person.completed
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
