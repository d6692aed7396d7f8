// views_search.mjs — tool search through fedgate with the official TypeScript SDK (v1,
// handshake era): the first tools/list, fedgate__find_tools for a word, fedgate__select_tools
// of the best match, the notifications/tools/list_changed that follows, the next tools/list and
// a call of the selected tool by its own name; then a view's list and a call outside it.
//
//   node views_search.mjs --url http://127.0.0.1:PORT/mcp --view-url URL --word WORD
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

async function connect(url, onChanged) {
  const client = new Client({ name: 'fedgate-views-search', version: '1.0.0' }, { capabilities: {} });
  if (onChanged) client.setNotificationHandler(T.ToolListChangedNotificationSchema, onChanged);
  await client.connect(new StreamableHTTPClientTransport(new URL(url)), { timeout: TIMEOUT });
  return client;
}

async function allTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined, { timeout: TIMEOUT });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function outcome(client, name, args) {
  try {
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: TIMEOUT });
    const text = r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
    return { is_error: !!r.isError, rpc_error: false, text, structured: r.structuredContent ?? null };
  } catch (e) {
    return { is_error: true, rpc_error: true, text: String(e?.message ?? e) };
  }
}

let changed;
const gotChange = new Promise((resolve) => (changed = resolve));
const client = await connect(argv.url, () => changed(true));
const first = (await allTools(client)).map((t) => t.name);
const found = await outcome(client, 'fedgate__find_tools', { query: argv.word, limit: 3 });
const hits = found.structured?.tools ?? [];
const best = hits[0]?.name;
const selected = await outcome(client, 'fedgate__select_tools', { names: [best] });
const notified = await Promise.race([gotChange, new Promise((r) => setTimeout(() => r(false), TIMEOUT))]);
const after = await allTools(client);
const listed = after.find((t) => t.name === best);
const answer = await outcome(client, best, { n: 1 });
const reset = await outcome(client, 'fedgate__reset_tools', {});
const afterReset = (await allTools(client)).map((t) => t.name);
await client.close();

const view = await connect(argv['view-url']);
const viewNames = (await allTools(view)).map((t) => t.name);
const outside = await outcome(view, 'u02__tool_001', {});
await view.close();

console.log(
  JSON.stringify({
    first,
    hits: hits.map((h) => ({ name: h.name, description: h.description, schema: h.inputSchema })),
    selected,
    notified,
    after: after.map((t) => t.name),
    listed_schema: listed?.inputSchema ?? null,
    answer,
    reset,
    after_reset: afterReset,
    view: { names: viewNames, outside },
  }),
);
// The race's timer would keep the process alive for TIMEOUT.
process.exit(0);
