// from_client_config.mjs — connect to the server a client config file names, as that client
// would, with the official TypeScript SDK (@modelcontextprotocol/sdk), and print its tool names
// as JSON on stdout.
//
//   node from_client_config.mjs FILE KEY NAME
//
// KEY is `mcpServers` (Claude Desktop, Cursor) or `servers` (VS Code). An entry with `url` is
// reached over Streamable HTTP; one with `command` is started over stdio with its `args`.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const req = createRequire(new URL('../../node/package.json', import.meta.url));
const { Client } = req('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = req('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { StdioClientTransport } = req('@modelcontextprotocol/sdk/client/stdio.js');

const [file, key, name] = process.argv.slice(2);
const entry = JSON.parse(readFileSync(file, 'utf8'))[key][name];
const transport = entry.url
  ? new StreamableHTTPClientTransport(new URL(entry.url))
  : new StdioClientTransport({ command: entry.command, args: entry.args ?? [] });
const client = new Client({ name: 'from-client-config', version: '0' });
await client.connect(transport, { timeout: 30_000 });
const { tools } = await client.listTools();
console.log(JSON.stringify({ tools: tools.map((t) => t.name).sort() }));
await client.close();
