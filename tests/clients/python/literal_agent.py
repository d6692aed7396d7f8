"""An agent that follows examples/envelope/system-prompt.md literally, and nothing else.

Usage: python literal_agent.py --url URL [--key API_KEY] --scenario FILE

It knows nothing of fedgate beyond that rule text: it calls one tool, reads the
`orchestrated_plan` where the rule says to find it, and acts on its `status` as the rule says.
Its "user" is a stub: it answers confirmations with the scenario's yes/no, gives the values the
scenario says it knows, and, when told that a plan waits for someone else, lets the scenario's
`later` step happen (a reviewer or an operator deciding, run by the test through this script).
The scenario file (JSON) holds: `tool`, `args`, `human` ({"confirm": true|false, "knows":
{field: text}, "thinks": true}), `tasks: true` (the client supports the tasks extension, as a
general MCP client would: it polls a task, puts the task's questions to its user as forms and
answers them with `tasks/update`), and optionally `later` ({"reviewer_key": KEY}, {"admin_url":
URL, "admin_token": TOKEN} or {"test": true}). Where the test itself acts meanwhile (`later:
{"test": true}`: an operator clicks in the console; `thinks`: the user takes a while to say yes,
and the test kills a replica then), the agent prints `{"waiting": WHAT}` on a line and waits
for a line on stdin. Last, it prints one JSON report: the steps taken, what the user was told,
and the final answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError as McpError
from pydantic import ConfigDict, Field, TypeAdapter

PLAN_KEY = "io.fedgate/orchestrated_plan"
MAX_STEPS = 12


TASKS = "io.modelcontextprotocol/tasks"
ANY = TypeAdapter(dict[str, Any])


class TaskCreated(types.Result):
    """A tools/call answered with a task (the tasks extension, 2026-07-28)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType", default="task")
    task_id: str = Field(alias="taskId")


class TaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class TaskRequest(types.Request[TaskParams, str]):
    """tasks/get or tasks/update; the SDK mirrors `taskId` into the Mcp-Name header."""

    method: str
    params: TaskParams
    name_param = "taskId"


class Tasks(ClientExtension):
    """The client side of the tasks extension, as any MCP client implements it: poll the task
    at the interval it names, put its questions to the user, answer them with tasks/update,
    and hand the finished task's result to the caller of call_tool."""

    identifier = TASKS

    def __init__(self, human: "Human") -> None:
        self.human = human

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self.resolve)]

    async def resolve(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        task_id = created.task_id
        answered: set[str] = set()
        while True:
            task = await ctx.session.send_request(
                TaskRequest(method="tasks/get", params=TaskParams(task_id=task_id)), ANY
            )
            status = task.get("status")
            if status == "completed":
                return types.CallToolResult.model_validate(task.get("result", {}))
            if status in ("failed", "cancelled"):
                text = task.get("statusMessage") or f"the task {status}"
                return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
            if status == "input_required":
                answers = {}
                for key, request in (task.get("inputRequests") or {}).items():
                    if key in answered or request.get("method") != "elicitation/create":
                        continue
                    answers[key] = self.human.fill_form(request.get("params", {}))
                    answered.add(key)
                if answers:
                    params = TaskParams(task_id=task_id, input_responses=answers)
                    await ctx.session.send_request(TaskRequest(method="tasks/update", params=params), ANY)
                    continue
            await anyio.sleep(min(int(task.get("pollIntervalMs") or 200), 1000) / 1000)


def connect(url: str, key: str | None, tasks: "Tasks | None" = None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30.0)
    return Client(
        streamable_http_client(url, http_client=http),
        read_timeout_seconds=30.0,
        extensions=[tasks] if tasks else None,
    )


def plan_of(result: types.CallToolResult | None, error: McpError | None) -> dict[str, Any] | None:
    """The rule: in the result's _meta, in a JSON-RPC error's data, or as a text block."""
    if error is not None:
        data = error.error.data
        if isinstance(data, dict):
            return data.get(PLAN_KEY)
        return None
    assert result is not None
    meta = result.meta or {}
    if PLAN_KEY in meta:
        return meta[PLAN_KEY]
    for c in result.content:
        if isinstance(c, types.TextContent):
            try:
                v = json.loads(c.text)
            except ValueError:
                continue
            if isinstance(v, dict) and v.get("kind") == "orchestrated_plan":
                return v
    return None


class Human:
    def __init__(self, spec: dict[str, Any], later: dict[str, Any] | None, url: str) -> None:
        self.confirm_answer = bool(spec.get("confirm", False))
        self.thinks = bool(spec.get("thinks", False))
        self.knows: dict[str, str] = spec.get("knows", {})
        self.later = later
        self.url = url
        self.told: list[str] = []
        self.asked: list[str] = []

    def tell(self, text: str) -> None:
        self.told.append(text)

    def confirm(self, instruction: str, safety: Any) -> bool:
        self.asked.append(f"confirm: {instruction} safety={json.dumps(safety)}")
        return self.confirm_answer

    async def think(self, about: str) -> None:
        """The user takes a while: the test acts meanwhile (it may kill a replica)."""
        if self.thinks:
            await test_acts(about)

    def fill_form(self, params: dict[str, Any]) -> dict[str, Any]:
        """A form the client shows its user: the user reads the message and says yes or no."""
        message = params.get("message", "")
        if not self.confirm(message, None):
            return {"action": "decline"}
        props = (params.get("requestedSchema") or {}).get("properties", {})
        content = {k: True for k, v in props.items() if v.get("type") == "boolean"}
        return {"action": "accept", "content": content}

    def answer(self, field: str) -> str | None:
        self.asked.append(f"value of {field}")
        return self.knows.get(field)

    async def meanwhile(self, plan_id: str) -> None:
        """The user was told the plan waits for someone else; that someone decides."""
        if not self.later:
            return
        if self.later.get("test"):
            await test_acts(plan_id)
        elif "reviewer_key" in self.later:
            async with connect(self.url, self.later["reviewer_key"]) as reviewer:
                await reviewer.call_tool(self.later.get("approve_tool", "fedgate__approve"), {"plan_id": plan_id})
        else:
            async with httpx2.AsyncClient() as http:
                r = await http.post(
                    f"{self.later['admin_url']}/admin/plans/{plan_id}/approve",
                    headers={"Authorization": f"Bearer {self.later['admin_token']}"},
                )
                r.raise_for_status()
        self.later = None


async def test_acts(what: str) -> None:
    """Tells the test what the agent waits for, and waits until it has acted."""
    print(json.dumps({"waiting": what}), flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)


def value_for(field: dict[str, Any], text: str) -> Any:
    """A value of the field's type, from what the user said."""
    kind = field.get("type")
    if kind == "number":
        return float(text)
    if kind == "boolean":
        return text.lower() in ("yes", "true", "1")
    if kind == "json":
        # A JSON value that matches the field's schema: for an array of strings, the words.
        schema = field.get("schema") or {}
        try:
            return json.loads(text)
        except ValueError:
            if schema.get("type") == "array":
                return [w.strip() for w in text.split(",") if w.strip()]
            return text
    return text


class Agent:
    def __init__(self, client: Client, human: Human) -> None:
        self.client = client
        self.human = human
        self.steps: list[dict[str, Any]] = []

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[types.CallToolResult | None, McpError | None]:
        self.steps.append({"tool": tool, "args": args})
        if len(self.steps) > MAX_STEPS:
            raise RuntimeError("too many steps: the plans do not lead anywhere")
        try:
            return await self.client.call_tool(tool, args), None
        except McpError as e:
            return None, e

    async def run(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result, error = await self.call(tool, args)
        while True:
            plan = plan_of(result, error)
            if plan is None:
                if error is not None:
                    self.human.tell(error.error.message)
                    return {"outcome": "error", "message": error.error.message}
                return {"outcome": "done", "result": dump(result)}
            status = plan["status"]
            if status == "ok" and plan.get("next_actions"):
                # Not run yet: show the instruction and safety; run the actions in order.
                self.human.tell(plan.get("instruction", ""))
                nxt: tuple[types.CallToolResult | None, McpError | None] | None = None
                for action in plan["next_actions"]:
                    if action.get("confirm"):
                        await self.human.think(action["args"].get("plan_id", action["tool"]))
                    if action.get("confirm") and not self.human.confirm(plan.get("instruction", ""), plan.get("safety")):
                        denied = dict(action["args"], decision="deny")
                        r, e = await self.call(action["tool"], denied)
                        return {"outcome": "denied", "result": dump(r) if r else None}
                    nxt = await self.call(action["tool"], action["args"])
                assert nxt is not None
                result, error = nxt
                continue
            if status == "ok":
                if plan.get("follow_up"):
                    self.human.asked.append(plan["follow_up"])
                return {"outcome": "done", "result": dump(result) if result else None}
            if status == "invalid":
                for e in plan.get("errors", []):
                    self.human.tell(f"{e.get('field')}: {e.get('message')}")
                fixed = dict(args)
                for field in plan.get("ask", {}).get("fields", []):
                    text = self.human.answer(field["name"])
                    if text is None:
                        if field.get("required"):
                            return {"outcome": "stuck", "missing": field["name"]}
                        continue
                    fixed[field["name"]] = value_for(field, text)
                args = fixed
                result, error = await self.call(tool, args)
                continue
            if status == "error":
                errs = plan.get("errors", [])
                for e in errs:
                    self.human.tell(f"{e.get('code')}: {e.get('message')} {e.get('hint', '')}")
                first = errs[0] if errs else {}
                if first.get("code") == "outcome_uncertain" or not first.get("recoverable"):
                    return {"outcome": "reported", "code": first.get("code"), "plan": plan}
                actions = plan.get("recovery_actions") or []
                listed = {t.name: t for t in (await self.client.list_tools()).tools}
                chosen = next((a for a in actions if a["tool"] in listed), None)
                if chosen is None:
                    return {"outcome": "reported", "code": first.get("code"), "plan": plan}
                # Check its arguments in tools/list first: fill what it requires from what we have.
                required = listed[chosen["tool"]].input_schema.get("required", [])
                a = dict(chosen["args"])
                for r in required:
                    if r not in a and r in args:
                        a[r] = args[r]
                tool, args = chosen["tool"], a
                result, error = await self.call(tool, args)
                continue
            if status == "blocked":
                errs = plan.get("errors", [])
                for e in errs:
                    self.human.tell(f"{e.get('code')}: {e.get('message')} {e.get('hint', '')}")
                first = errs[0] if errs else {}
                if first.get("code") == "awaiting_approval":
                    # It runs once a reviewer approved it: call the same approval again later.
                    last = self.steps[-1]
                    await self.human.meanwhile(last["args"].get("plan_id", ""))
                    result, error = await self.call(last["tool"], last["args"])
                    continue
                hint = first.get("hint", "")
                if "retry_after_ms=" in hint:
                    ms = int(hint.split("retry_after_ms=")[1].split(":")[0].split()[0])
                    await anyio.sleep(ms / 1000)
                    result, error = await self.call(tool, args)
                    continue
                return {"outcome": "reported", "code": first.get("code"), "plan": plan}
            if status == "partial":
                for step in plan.get("partial_results", []):
                    self.human.tell(f"{step['step']}: {step['status']}")
                return {"outcome": "partial"}
            return {"outcome": "unknown status", "status": status}


def dump(result: types.CallToolResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
    }


async def main(url: str, key: str, scenario: dict[str, Any]) -> dict[str, Any]:
    human = Human(scenario.get("human", {}), scenario.get("later"), url)
    tasks = Tasks(human) if scenario.get("tasks") else None
    async with connect(url, key, tasks) as client:
        agent = Agent(client, human)
        final = await agent.run(scenario["tool"], scenario.get("args", {}))
        return {"final": final, "steps": agent.steps, "told": human.told, "asked": human.asked}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key")
    parser.add_argument("--scenario", required=True)
    a = parser.parse_args()
    with open(a.scenario) as f:
        spec = json.load(f)
    print(json.dumps(anyio.run(main, a.url, a.key, spec)))
