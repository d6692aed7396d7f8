"""Exercise one fedgate upstream through one MCP protocol era with the official Python SDK.

Usage: python era_matrix.py --url URL --mode legacy|modern --upstream old|new

`--mode legacy` connects with the 2025-11-25 initialize handshake (`Client(mode="legacy")`);
`--mode modern` probes `server/discover` (`Client(mode="auto")`) and insists that the server
negotiated a 2026-07-28 (stateless) version. Each feature check runs on its own fresh client
session, bounded by a timeout, and one failing check never stops the others. Prints exactly one
JSON object on stdout and exits 0; diagnostics (if any) go to stderr.

Run the combinations for one upstream one after another, not concurrently: fedgate relays a
handshake-era stdio upstream's sampling/elicitation/roots requests and log messages only while
exactly one call is in flight on it (README "What is forwarded"), and the cancellation check reads
per-process counters.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.subscriptions import ResourceUpdated, ServerEvent, Subscription, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import FileUrl

FEATURE_TIMEOUT = 15.0
ROOT_URI = "file:///work/project"
Outcome = dict[str, Any]

# The demo tools deliberately use features the 2026-07-28 spec deprecates (sampling, roots, logging...).
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


@dataclass
class Run:
    """One script run: where to connect, how, and which upstream's tools to call."""

    url: str
    mode: str
    upstream: str
    protocols: set[str] = field(default_factory=set)
    notes: list[types.ServerNotification] = field(default_factory=list)

    def tool(self, name: str) -> str:
        return f"{self.upstream}__{name}"

    async def on_message(self, message: IncomingMessage) -> None:
        if not isinstance(message, Exception):
            self.notes.append(message)


async def on_sampling(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text="hi from python"), model="era-matrix", stop_reason="endTurn"
    )


async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "ada"})


async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri=FileUrl(ROOT_URI), name="project")])


def connect(run: Run) -> Client:
    """A fresh client with every callback installed; the mode picks the protocol era."""
    run.notes = []
    return Client(
        run.url,
        mode="legacy" if run.mode == "legacy" else "auto",
        sampling_callback=on_sampling,
        elicitation_callback=on_elicit,
        list_roots_callback=on_roots,
        message_handler=run.on_message,
        client_info=types.Implementation(name="era-matrix-python", version="1.0.0"),
        read_timeout_seconds=FEATURE_TIMEOUT,
    )


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def call_text(client: Client, name: str, args: dict[str, Any], **kw: Any) -> str:
    result = await client.call_tool(name, args, **kw)
    if result.is_error:
        raise RuntimeError(f"{name} returned isError: {text_of(result)!r}")
    return text_of(result)


def expect(got: str, want: str) -> Outcome:
    return {"ok": got == want, "detail": f"result {got!r}" + ("" if got == want else f", expected {want!r}")}


async def repeat_until(action: Callable[[], Awaitable[object]], done: Callable[[], bool], every: float = 0.5) -> int:
    """Run `action` every `every` seconds until `done()`; returns how many times it ran."""
    attempts = 0
    while not done():
        await action()
        attempts += 1
        with anyio.move_on_after(every):
            while not done():
                await anyio.sleep(0.02)
    return attempts


async def collect(sub: Subscription, into: list[ServerEvent]) -> None:
    async for event in sub:
        into.append(event)


# --- feature checks -----------------------------------------------------------------------------


async def check_progress(run: Run, client: Client) -> Outcome:
    seen: list[float] = []

    async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
        seen.append(progress)

    result = await call_text(client, run.tool("progress"), {"steps": 3}, progress_callback=on_progress)
    count = len(seen)  # snapshot at the moment the call returned
    return {"ok": count == 3, "detail": f"{count} progress notifications {seen} before result {result!r}"}


async def check_sampling(run: Run, client: Client) -> Outcome:
    return expect(await call_text(client, run.tool("sample"), {}), "sampled: hi from python")


async def check_elicitation(run: Run, client: Client) -> Outcome:
    return expect(await call_text(client, run.tool("ask"), {}), "hello ada")


async def check_roots(run: Run, client: Client) -> Outcome:
    return expect(await call_text(client, run.tool("roots"), {}), ROOT_URI)


async def check_resource_updates(run: Run, client: Client) -> Outcome:
    uri = f"{run.upstream}://notes/k"

    async def write() -> None:
        await call_text(client, run.tool("write_note"), {"key": "k", "value": "v"})

    if run.mode == "legacy":
        await client.subscribe_resource(uri)
        writes = await repeat_until(
            write,
            lambda: any(isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == uri for n in run.notes),
        )
        return {"ok": True, "detail": f"resources/updated for {uri} after {writes} write(s) (resources/subscribe)"}
    events: list[ServerEvent] = []
    async with client.listen(resource_subscriptions=[uri]) as sub, anyio.create_task_group() as tg:
        tg.start_soon(collect, sub, events)
        writes = await repeat_until(write, lambda: ResourceUpdated(uri) in events)
        tg.cancel_scope.cancel()
    return {"ok": True, "detail": f"ResourceUpdated({uri}) after {writes} write(s); honored {sub.honored}"}


async def check_list_changed(run: Run, client: Client) -> Outcome:
    async def toggle() -> None:
        await call_text(client, run.tool("toggle_extra"), {})

    if run.mode == "legacy":
        toggles = await repeat_until(
            toggle, lambda: any(isinstance(n, types.ToolListChangedNotification) for n in run.notes)
        )
        return {"ok": True, "detail": f"tools/list_changed after {toggles} toggle(s) (session GET stream)"}
    events: list[ServerEvent] = []
    async with client.listen(tools_list_changed=True) as sub, anyio.create_task_group() as tg:
        tg.start_soon(collect, sub, events)
        toggles = await repeat_until(toggle, lambda: ToolsListChanged() in events)
        tg.cancel_scope.cancel()
    return {"ok": True, "detail": f"ToolsListChanged after {toggles} toggle(s); honored {sub.honored}"}


async def check_logging(run: Run, client: Client) -> Outcome:
    if run.mode == "legacy":
        await client.set_logging_level("info")
        want, kw = {"log-info", "log-warning"}, {}
    else:
        want, kw = {"log-warning"}, {"meta": {LOG_LEVEL_META_KEY: "warning"}}
    await call_text(client, run.tool("log"), {}, **kw)
    await anyio.sleep(0.5)  # grace for notifications that trail the response
    got = [str(n.params.data) for n in run.notes if isinstance(n, types.LoggingMessageNotification)]
    return {"ok": set(got) == want and len(got) == len(want), "detail": f"received {got}, expected {sorted(want)}"}


async def check_cancellation(run: Run, client: Client) -> Outcome:
    async def stats() -> dict[str, int]:
        counters: dict[str, int] = json.loads(await call_text(client, run.tool("stats"), {}))
        return counters

    before = await stats()  # `calls` counts every tools/call, the stats calls included
    scope = anyio.CancelScope()
    finished: list[str] = []

    async def slow() -> None:
        with scope:
            finished.append(await call_text(client, run.tool("slow"), {"ms": 10000}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        polls, now = 0, before
        while now["calls"] < before["calls"] + polls + 1:  # +1: the slow call itself
            await anyio.sleep(0.1)
            polls, now = polls + 1, await stats()
        await anyio.sleep(0.2)  # margin in case another client's calls moved the counter
        scope.cancel()  # the SDK's cancellation: abandon the awaiting call_tool
    if finished:
        return {"ok": False, "detail": f"slow call completed before the cancel: {finished[0]!r}"}
    while now["cancelled"] <= before["cancelled"]:
        await anyio.sleep(0.1)
        now = await stats()
    return {"ok": True, "detail": f"stats before {before}, after cancel {now}"}


CHECKS: dict[str, Callable[[Run, Client], Awaitable[Outcome]]] = {
    "progress": check_progress,
    "sampling": check_sampling,
    "elicitation": check_elicitation,
    "roots": check_roots,
    "resource_updates": check_resource_updates,
    "list_changed": check_list_changed,
    "logging": check_logging,
    "cancellation": check_cancellation,
}


def describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, TimeoutError):
        return f"timed out after {FEATURE_TIMEOUT:.0f}s"
    return f"{type(exc).__name__}: {exc}"


async def run_check(run: Run, name: str) -> Outcome:
    try:
        with anyio.fail_after(FEATURE_TIMEOUT):
            async with connect(run) as client:
                run.protocols.add(client.protocol_version)
                if run.mode == "modern" and client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    raise RuntimeError(f"server negotiated {client.protocol_version}, not a 2026-07-28 era version")
                return await CHECKS[name](run, client)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a result row
        print(f"[{name}] {exc!r}", file=sys.stderr)
        return {"ok": False, "detail": describe(exc)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=["legacy", "modern"], required=True)
    parser.add_argument("--upstream", choices=["old", "new"], required=True)
    args = parser.parse_args()
    run = Run(url=args.url, mode=args.mode, upstream=args.upstream)
    results = {name: await run_check(run, name) for name in CHECKS}
    report = {
        "client": "python mcp 2.3.0",
        "mode": run.mode,
        "protocol": ",".join(sorted(run.protocols)) or None,
        "upstream": run.upstream,
        "results": results,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
