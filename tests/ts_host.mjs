// A host built on the official TypeScript SDK (@modelcontextprotocol/sdk), as most desktop hosts are.
//
//   node ts_host.mjs '<json scenario>'
//
// It connects over stdio or Streamable HTTP, then calls one tool the way a host with a fixed cutoff
// does: it never resets its timer on progress and never waits longer than `cutoff_ms`. When a call
// times out it retries the same call; when a result names a continuation (the `com.colabhive/continuation`
// entry of its `_meta`) it makes that call. With `abort_after_ms`, the user presses stop instead
// (an AbortSignal). It prints one JSON line per attempt and a final {"outcome": ...} line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const scenario = JSON.parse(process.argv[2]);
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");

const transport = scenario.transport === "stdio"
  ? new StdioClientTransport({ command: scenario.command, args: scenario.args, env: scenario.env, stderr: "ignore" })
  : new StreamableHTTPClientTransport(new URL(scenario.url),
      { requestInit: { headers: { Authorization: `Bearer ${scenario.key}` } } });
const client = new Client({ name: scenario.client_name ?? "ts-host", version: "1.0.0" });
await client.connect(transport);

let call = { name: scenario.tool, arguments: scenario.arguments };
let outcome = { outcome: "gave up", attempts: scenario.attempts };
for (let attempt = 1; attempt <= scenario.attempts; attempt++) {
  const started = Date.now();
  const options = { timeout: scenario.cutoff_ms, onprogress: () => {} };  // progress is heard, never resets
  if (scenario.abort_after_ms) {
    const stop = new AbortController();
    setTimeout(() => stop.abort("the user pressed stop"), scenario.abort_after_ms);
    options.signal = stop.signal;
  }
  try {
    const result = await client.callTool(call, CallToolResultSchema, options);
    const next = result._meta?.["com.colabhive/continuation"];
    say({ attempt, call: call.name, ms: Date.now() - started, continuation: next ?? null, isError: !!result.isError });
    if (next) {
      call = { name: next.tool, arguments: next.arguments };
      continue;
    }
    outcome = { outcome: "result", attempts: attempt, result };
    break;
  } catch (error) {
    say({ attempt, call: call.name, ms: Date.now() - started, error: String(error), code: error.code ?? null });
    if (scenario.abort_after_ms || error.code !== -32001) {  // only a timeout is retried
      outcome = { outcome: scenario.abort_after_ms ? "aborted" : "error", attempts: attempt, error: String(error) };
      break;
    }
  }
}
say(outcome);
if (scenario.abort_after_ms) await new Promise((done) => setTimeout(done, 500));  // a host lives on after a stop
await client.close();
process.exit(0);
