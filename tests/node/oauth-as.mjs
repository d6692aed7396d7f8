// Test-only OAuth 2.1 / OpenID authorization server (oidc-provider) for fedgate's tests.
//
//   node tests/node/oauth-as.mjs --client-id ID --client-secret SECRET --redirect-uri URL
//        [--redirect-uri URL ...] [--access-ttl SECONDS (600)] [--port N (0 = any free)]
//        [--registration]   (RFC 7591 dynamic registration open at /reg)
//
// Listens on 127.0.0.1 only and prints exactly one stdout line, `oauth-as-listening <port>`,
// once ready (everything else goes to stderr; tokens are never printed). Logins and consents
// are automatic: the "browser" names the person in an `X-Test-User: <name>` header (`deny`
// refuses). Test hooks, plain JSON outside the provider's routes:
//   POST /test/expire-access?sub=NAME  -> {"expired": n}   drops NAME's access tokens
//   POST /test/revoke-all?sub=NAME     -> {"revoked": n}   drops NAME's access + refresh tokens
//                                                         (n counts those) and grants
//   POST /test/fail-token?times=N&status=S -> {"failing": N}  the next N token requests are
//                                                         answered S (a provider's bad minute)
//   POST /test/withhold-scope?scope=S  -> {"withheld": S}  sign-ins no longer grant scope S
//   GET  /test/live?sub=NAME           -> {"access": n, "refresh": n}  NAME's live tokens
//   GET  /test/stats -> {"token_requests": {"authorization_code": n, "refresh_token": n},
//                        "refresh_reuse": n, "revocations": n, "failed_token_requests": n,
//                        "registrations": n}
import crypto from "node:crypto";
import http from "node:http";
import { parseArgs } from "node:util";

// oidc-provider prints its notices with console.info (stdout); the tests read stdout for the
// ready line alone, so every console output goes to stderr.
console.log = console.info = console.debug = console.error;
const { default: Provider } = await import("oidc-provider");

const { values: opt } = parseArgs({
  options: {
    "client-id": { type: "string" },
    "client-secret": { type: "string" },
    "redirect-uri": { type: "string", multiple: true },
    "access-ttl": { type: "string", default: "600" },
    port: { type: "string", default: "0" },
    registration: { type: "boolean", default: false },
  },
});
if (!opt["client-id"] || !opt["client-secret"] || !opt["redirect-uri"]?.length) {
  console.error("usage: oauth-as.mjs --client-id ID --client-secret SECRET --redirect-uri URL"
    + " [--redirect-uri URL ...] [--access-ttl SECONDS] [--port N]");
  process.exit(2);
}
const accessTtl = Number(opt["access-ttl"]);
if (!(accessTtl > 0)) { console.error("oauth-as: --access-ttl must be a positive number"); process.exit(2); }

// In-memory storage, one Map per model name, so the /test/ hooks can reach every token.
// Expiry is checked lazily on read.
const stores = new Map();
const storeOf = (model) => stores.get(model) ?? stores.set(model, new Map()).get(model);
const live = (entry) => entry && (!entry.expiresAt || entry.expiresAt > Date.now());
class MemoryAdapter {
  constructor(model) { this.store = storeOf(model); }
  async upsert(id, payload, expiresIn) {
    this.store.set(id, { payload, expiresAt: expiresIn ? Date.now() + expiresIn * 1000 : 0 });
  }
  async find(id) {
    const entry = this.store.get(id);
    if (live(entry)) return entry.payload;
    this.store.delete(id);
    return undefined;
  }
  async findBy(key, value) {
    for (const [id, entry] of this.store) if (entry.payload[key] === value) return this.find(id);
    return undefined;
  }
  findByUid(uid) { return this.findBy("uid", uid); }
  findByUserCode(userCode) { return this.findBy("userCode", userCode); }
  async consume(id) {
    const entry = this.store.get(id);
    if (entry) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }
  async destroy(id) { this.store.delete(id); }
  async revokeByGrantId(grantId) {
    for (const [id, entry] of this.store) if (entry.payload.grantId === grantId) this.store.delete(id);
  }
}
// Deletes `model` entries of account `sub`, answering how many.
function dropFor(model, sub) {
  let n = 0;
  for (const [id, entry] of storeOf(model)) {
    if (entry.payload.accountId === sub) { storeOf(model).delete(id); if (live(entry)) n += 1; }
  }
  return n;
}

const stats = {
  token_requests: { authorization_code: 0, refresh_token: 0 },
  refresh_reuse: 0,
  revocations: 0,
  failed_token_requests: 0,
  registrations: 0,
};
// Scopes sign-ins do not grant, whatever is asked.
const withheld = new Set();
// Token requests still to fail, and with which status.
const failing = { times: 0, status: 503 };
// Live `model` entries of account `sub`.
function liveFor(model, sub) {
  let n = 0;
  for (const [, entry] of storeOf(model)) if (entry.payload.accountId === sub && live(entry)) n += 1;
  return n;
}

// Listen first: the issuer must carry the real port, and the Provider is built from it.
let handleProvider = (req, res) => { res.writeHead(503).end(); };
const server = http.createServer((req, res) => {
  route(req, res).catch((err) => {
    // oidc-provider's own errors (e.g. an expired interaction) carry a 4xx status.
    const status = err?.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) console.error("oauth-as: request failed:", err?.stack ?? err);
    if (!res.headersSent) res.writeHead(status, { "content-type": "text/plain" });
    res.end(status === 500 ? "internal error" : `${err.error}: ${err.error_description ?? ""}`);
  });
});
await new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(Number(opt.port), "127.0.0.1", resolve);
});
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const provider = new Provider(issuer, {
  adapter: MemoryAdapter,
  jwks: { keys: [{ ...privateKey.export({ format: "jwk" }), kid: "test", use: "sig", alg: "RS256" }] },
  clients: [{
    client_id: opt["client-id"],
    client_secret: opt["client-secret"],
    redirect_uris: opt["redirect-uri"],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    // oidc-provider registers one method per client, but a client registered for
    // client_secret_basic is also let in with client_secret_post (both are shared-secret).
    token_endpoint_auth_method: "client_secret_basic",
  }],
  scopes: ["openid", "offline_access", "profile"],
  claims: { openid: ["sub"], profile: ["name"] },
  async findAccount(_ctx, sub) {
    return { accountId: sub, async claims() { return { sub, name: sub }; } };
  },
  cookies: { names: { session: "_session" } }, // stripped from /auth requests, see route()
  pkce: { required: () => true }, // oidc-provider only implements S256
  // A refresh token for every code exchange, offline_access or not, rotated on each use.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: true,
  // Tokens outlive the browser session (it only exists for the automatic login).
  expiresWithSession: async () => false,
  ttl: {
    AccessToken: accessTtl,
    AuthorizationCode: 60,
    IdToken: 3600,
    RefreshToken: 86400,
    Grant: 86400,
    Session: 86400,
    Interaction: 600,
  },
  features: {
    devInteractions: { enabled: false }, // ours is the X-Test-User handler below
    revocation: { enabled: true, allowedPolicy: async () => true },
    registration: { enabled: opt.registration },
    // Off, so an RFC 8707 `resource` parameter is ignored instead of failing with
    // invalid_target, and access tokens stay opaque tokens for the userinfo endpoint.
    resourceIndicators: { enabled: false },
    dPoP: { enabled: false }, // plain Bearer tokens only
  },
  async renderError(ctx, out) { ctx.type = "json"; ctx.body = out; },
});

provider.on("server_error", (_ctx, err) => console.error("oauth-as: server_error:", err?.stack ?? err));
const countGrant = (ctx) => {
  const gty = ctx.oidc?.params?.grant_type;
  if (gty in stats.token_requests) stats.token_requests[gty] += 1;
  return gty;
};
provider.on("grant.success", countGrant);
provider.on("grant.error", (ctx, err) => {
  // A reused (consumed) refresh token makes oidc-provider revoke the whole grant; the tokens
  // revoked with it then come back as "not found". Both count as reuse.
  if (countGrant(ctx) === "refresh_token" && err?.error === "invalid_grant"
      && ["refresh token already used", "refresh token not found"].includes(err.error_detail)) {
    stats.refresh_reuse += 1;
  }
});
handleProvider = provider.callback();

function json(res, status, body) {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

async function route(req, res) {
  const url = new URL(req.url, issuer);
  const sub = url.searchParams.get("sub");
  if (url.pathname === "/test/stats" && req.method === "GET") return json(res, 200, stats);
  if (url.pathname === "/test/expire-access" && req.method === "POST" && sub) {
    return json(res, 200, { expired: dropFor("AccessToken", sub) });
  }
  if (url.pathname === "/test/revoke-all" && req.method === "POST" && sub) {
    const revoked = dropFor("AccessToken", sub) + dropFor("RefreshToken", sub);
    dropFor("Grant", sub);
    return json(res, 200, { revoked });
  }
  if (url.pathname === "/test/fail-token" && req.method === "POST") {
    failing.times = Number(url.searchParams.get("times") ?? "1");
    failing.status = Number(url.searchParams.get("status") ?? "503");
    return json(res, 200, { failing: failing.times });
  }
  if (url.pathname === "/test/withhold-scope" && req.method === "POST" && url.searchParams.get("scope")) {
    withheld.add(url.searchParams.get("scope"));
    return json(res, 200, { withheld: url.searchParams.get("scope") });
  }
  if (url.pathname === "/test/live" && req.method === "GET" && sub) {
    return json(res, 200, { access: liveFor("AccessToken", sub), refresh: liveFor("RefreshToken", sub) });
  }
  if (url.pathname === "/token" && req.method === "POST" && failing.times > 0) {
    failing.times -= 1;
    stats.failed_token_requests += 1;
    return json(res, failing.status, { error: "temporarily_unavailable" });
  }
  if (url.pathname === "/token/revocation" && req.method === "POST") stats.revocations += 1;
  if (url.pathname === "/reg" && req.method === "POST") stats.registrations += 1;
  if (url.pathname.startsWith("/test/")) return json(res, 400, { error: "unknown test hook or missing sub" });
  if (url.pathname.startsWith("/interaction/")) return interact(req, res);
  if (url.pathname === "/auth" || url.pathname.startsWith("/auth/")) {
    // No browser session is ever carried into an authorization (nor its resume step), so the
    // login step always runs and X-Test-User decides who logs in: a cookie jar reused for
    // another user would otherwise get oidc-provider's logout-confirmation form.
    req.headers.cookie = req.headers.cookie?.split(/;\s*/).filter((c) => !c.startsWith("_session=")).join("; ");
  }
  if (url.pathname === "/auth" && req.method === "GET" && withheld.size) {
    // A server may grant less than asked (RFC 6749 3.3): withheld scopes are dropped from the
    // request before the provider sees it.
    const asked = url.searchParams.get("scope")?.split(" ") ?? [];
    url.searchParams.set("scope", asked.filter((s) => !withheld.has(s)).join(" "));
    req.url = url.pathname + url.search;
  }
  if (url.pathname === "/auth" && req.method === "GET") {
    // oidc-provider drops offline_access unless prompt=consent is sent (OIDC Core 11); the
    // consent is automatic here anyway, so imply it rather than lose the scope.
    if (url.searchParams.get("scope")?.split(" ").includes("offline_access") && !url.searchParams.has("prompt")) {
      url.searchParams.set("prompt", "consent");
      req.url = url.pathname + url.search;
    }
  }
  // RFC 8414 metadata: the same document as OpenID discovery.
  if (url.pathname === "/.well-known/oauth-authorization-server") {
    req.url = "/.well-known/openid-configuration";
  }
  return handleProvider(req, res);
}

// The login + consent step, in one go: log in X-Test-User and grant all it asked for.
async function interact(req, res) {
  const user = req.headers["x-test-user"];
  if (!user) {
    res.writeHead(400, { "content-type": "text/plain" });
    return res.end("no X-Test-User");
  }
  const { params } = await provider.interactionDetails(req, res);
  if (user === "deny") {
    return provider.interactionFinished(req, res,
      { error: "access_denied", error_description: "the person said no" },
      { mergeWithLastSubmission: false });
  }
  const grant = new provider.Grant({ accountId: user, clientId: params.client_id });
  // Scopes carry all claims here (the `claims` request parameter is off by default).
  if (params.scope) grant.addOIDCScope(params.scope);
  const grantId = await grant.save();
  return provider.interactionFinished(req, res,
    { login: { accountId: user }, consent: { grantId } },
    { mergeWithLastSubmission: false });
}

process.on("SIGTERM", () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
process.stdout.write(`oauth-as-listening ${port}\n`);
