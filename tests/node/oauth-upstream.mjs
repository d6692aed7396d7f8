// An MCP server set up as the official TypeScript SDK documents an OAuth resource server:
// `requireBearerAuth` in front of a stateful Streamable HTTP endpoint, and
// `mcpAuthMetadataRouter` serving the RFC 9728 protected-resource metadata.
//
//   node tests/node/oauth-upstream.mjs --issuer URL
//
// Every request needs a bearer token (401 with the metadata challenge otherwise); a token is
// whoever the authorization server's userinfo endpoint names. Each session belongs to the
// person who opened it: a request on it with another person's token is refused (403), as a
// server that binds sessions to their user does. Tools: `whoami` ("acting as <sub>") for
// everyone, `notes` only in alice's sessions; `hold`/`held`/`release` keep a call in flight.
//
// Prints exactly one stdout line, `oauth-upstream-listening <url>`, once it listens on
// 127.0.0.1 (a free port); everything else goes to stderr.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import {
  mcpAuthMetadataRouter,
  getOAuthProtectedResourceMetadataUrl,
} from "@modelcontextprotocol/sdk/server/auth/router.js";

console.log = console.info = console.debug = console.error;
const { values: opt } = parseArgs({ options: { issuer: { type: "string" } } });
if (!opt.issuer) {
  console.error("usage: oauth-upstream.mjs --issuer URL");
  process.exit(2);
}
const oauthMetadata = await (await fetch(`${opt.issuer}/.well-known/oauth-authorization-server`)).json();

// A token is valid while userinfo answers for it; it is checked on every request.
const verifier = {
  async verifyAccessToken(token) {
    const r = await fetch(oauthMetadata.userinfo_endpoint, { headers: { authorization: `Bearer ${token}` } });
    if (!r.ok) {
      const { InvalidTokenError } = await import("@modelcontextprotocol/sdk/server/auth/errors.js");
      throw new InvalidTokenError("the authorization server does not know this token");
    }
    const { sub } = await r.json();
    return { token, clientId: "fedgate", scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 60, extra: { sub } };
  },
};

// `hold` answers once `release` is called (by anyone): a call kept in flight for as long as
// a test needs; `held` says how many wait.
let waiting = [];
function serverFor(sub) {
  const server = new McpServer({ name: "ts-oauth-upstream", version: "1.0.0" });
  server.registerTool("whoami", { description: "Who the upstream sees" }, async (extra) => ({
    content: [{ type: "text", text: `acting as ${extra.authInfo?.extra?.sub}` }],
  }));
  server.registerTool("hold", { description: "Answers once release is called" }, () =>
    new Promise((resolve) => waiting.push(() => resolve({ content: [{ type: "text", text: "released" }] }))));
  server.registerTool("held", { description: "How many holds wait" }, async () => ({
    content: [{ type: "text", text: String(waiting.length) }],
  }));
  server.registerTool("release", { description: "Ends every hold" }, async () => {
    const n = waiting.length;
    for (const done of waiting) done();
    waiting = [];
    return { content: [{ type: "text", text: String(n) }] };
  });
  if (sub === "alice") {
    server.registerTool("notes", { description: "Alice's notes" }, async () => ({
      content: [{ type: "text", text: "alice's notes" }],
    }));
  }
  return server;
}

const app = createMcpExpressApp();
const listener = app.listen(0, "127.0.0.1", () => {
  const { port } = listener.address();
  const resource = new URL(`http://127.0.0.1:${port}/mcp`);
  app.use(mcpAuthMetadataRouter({ oauthMetadata, resourceServerUrl: resource }));
  const auth = requireBearerAuth({ verifier, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(resource) });
  // session id -> { transport, sub }
  const sessions = new Map();
  const handle = async (req, res) => {
    const sub = req.auth.extra.sub;
    const id = req.headers["mcp-session-id"];
    if (id) {
      const s = sessions.get(id);
      if (!s) return res.status(404).json({ jsonrpc: "2.0", error: { code: -32001, message: "no such session" }, id: null });
      if (s.sub !== sub) return res.status(403).json({ jsonrpc: "2.0", error: { code: -32003, message: "this session belongs to someone else" }, id: null });
      return s.transport.handleRequest(req, res, req.body);
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => sessions.set(sid, { transport, sub }),
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await serverFor(sub).connect(transport);
    return transport.handleRequest(req, res, req.body);
  };
  app.post("/mcp", auth, handle);
  app.get("/mcp", auth, handle);
  app.delete("/mcp", auth, handle);
  process.stdout.write(`oauth-upstream-listening ${resource.href}\n`);
});
