// stages.mjs — stage-gated tool sets through fedgate with the official TypeScript SDK (v1,
// handshake era), the workspace named by the `Fedgate-Workspace` header: the collector's list,
// the reviewer's move, the list_changed the collector's session receives and its new list;
// and a session whose header names no valid workspace.
//
//   node stages.mjs --url URL --collector KEY --reviewer KEY --workspace ID
//
// Prints ONE JSON object on stdout.
import { createRequire } from 'node:module';

const req = createRequire(new URL('../../node/package.json', import.meta.url));
const argv = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const { Client } = req('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = req('@modelcontextprotocol/sdk/client/streamableHttp.js');
const T = req('@modelcontextprotocol/sdk/types.js');
const TIMEOUT = 20_000;

async function connect(key, workspace, onChanged) {
  const client = new Client({ name: 'fedgate-stages', version: '1.0.0' }, { capabilities: {} });
  if (onChanged) client.setNotificationHandler(T.ToolListChangedNotificationSchema, onChanged);
  const headers = { Authorization: `Bearer ${key}`, 'Fedgate-Workspace': workspace };
  await client.connect(new StreamableHTTPClientTransport(new URL(argv.url), { requestInit: { headers } }), {
    timeout: TIMEOUT,
  });
  return client;
}

async function names(client) {
  try {
    return (await client.listTools(undefined, { timeout: TIMEOUT })).tools.map((t) => t.name).sort();
  } catch (e) {
    return { error: String(e?.message ?? e), data: e?.data ?? null };
  }
}

async function outcome(client, name, args) {
  try {
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: TIMEOUT });
    const text = r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
    return { is_error: !!r.isError, text, structured: r.structuredContent ?? null };
  } catch (e) {
    return { is_error: true, rpc_error: true, text: String(e?.message ?? e), data: e?.data ?? null };
  }
}

let changed;
const gotChange = new Promise((resolve) => (changed = resolve));
const collector = await connect(argv.collector, argv.workspace, () => changed(true));
const before = await names(collector);
const reviewer = await connect(argv.reviewer, argv.workspace);
const advance = await outcome(reviewer, 'fedgate__stage_advance', {
  workspace: argv.workspace,
  to: 'verifying',
  reason: 'collected',
});
const notified = await Promise.race([gotChange, new Promise((r) => setTimeout(() => r(false), TIMEOUT))]);
const after = await names(collector);
const bad = await connect(argv.collector, 'no spaces allowed');
const badList = await names(bad);
const badCall = await outcome(bad, 'research__collect', { workspace: 'x' });
for (const c of [collector, reviewer, bad]) await c.close();
console.log(JSON.stringify({ before, advance, notified, after, badList, badCall }));
// The race's timer would keep the process alive for TIMEOUT.
process.exit(0);
