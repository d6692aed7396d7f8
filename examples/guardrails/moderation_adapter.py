#!/usr/bin/env python3
"""A fedgate guardrail hook in front of a real moderation service.

fedgate POSTs its hook protocol here (README, "Guardrails": version 1, phase, tool, arguments,
result); this adapter sends the text of the call to OpenAI's moderation endpoint
(POST https://api.openai.com/v1/moderations, {"model": "omni-moderation-latest", "input": ...},
answered with {"results": [{"flagged": bool, "categories": {...}}]}) and answers fedgate with
pass, or deny naming the flagged categories. Only the standard library; run it with

    OPENAI_API_KEY=... python3 moderation_adapter.py 127.0.0.1:8940

and point a hook at it:

    [guardrail_hooks.moderation]
    url = "http://127.0.0.1:8940/check"
    timeout_ms = 3000
    failure = "closed"
"""

import json
import os
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODERATION_URL = "https://api.openai.com/v1/moderations"


def text_of(payload):
    """What the model sent (request phase) or what the tool answered (response phase)."""
    if payload.get("phase") == "response":
        blocks = payload.get("result", {}).get("content", [])
        return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    return json.dumps(payload.get("arguments", {}))


def moderate(text):
    req = urllib.request.Request(
        MODERATION_URL,
        data=json.dumps({"model": "omni-moderation-latest", "input": text}).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=2.5) as resp:
        result = json.load(resp)["results"][0]
    if not result["flagged"]:
        return {"decision": "pass"}
    flagged = sorted(k for k, v in result["categories"].items() if v)
    return {"decision": "deny", "reason": "flagged by moderation: " + ", ".join(flagged)}


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        # Any failure here answers 502: fedgate then applies the hook's `failure` mode.
        try:
            body, status = json.dumps(moderate(text_of(payload))).encode(), 200
        except Exception as e:  # noqa: BLE001 - the hook's caller decides what a failure means
            body, status = json.dumps({"error": str(e)}).encode(), 502
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    host, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8940").split(":")
    ThreadingHTTPServer((host, int(port)), Hook).serve_forever()
