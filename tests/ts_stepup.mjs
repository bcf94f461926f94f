// A host on the official TypeScript client (v2) granted read-only tools that then needs to write:
// the consent page filled in as a user would (choosing "read-only" the first time, and what the
// host then asks for the second), a tool call refused with 403 insufficient_scope, the client's
// step-up (a new authorization for every scope the challenge names, past its refresh token), and
// the same call again.
//
//   node ts_stepup.mjs '{"url": ..., "key": ..., "redirect": ..., "first": "read", "tool": ..., "arguments": {...}}'
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from "@modelcontextprotocol/client";

const scenario = JSON.parse(process.argv[2]);
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");

class Provider {
  constructor() { this.saved = {}; this.code = this.iss = undefined; this.consents = 0; }
  get redirectUrl() { return scenario.redirect; }
  get clientMetadata() {
    return { client_name: "TS client host", redirect_uris: [scenario.redirect], response_types: ["code"],
             grant_types: ["authorization_code", "refresh_token"], token_endpoint_auth_method: "none" };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) { this.saved.tokens = tokens; say({ granted: tokens.scope }); }
  saveCodeVerifier(verifier) { this.saved.verifier = verifier; }
  codeVerifier() { return this.saved.verifier; }
  saveDiscoveryState(state) { this.saved.discovery = state; }
  discoveryState() { return this.saved.discovery; }
  invalidateCredentials(scope) { if (scope === "all" || scope === "tokens") delete this.saved.tokens; }
  async redirectToAuthorization(url) {  // the user's browser: the first time, the user narrows the grant
    this.consents += 1;
    const page = await (await fetch(url)).text();
    const request = page.match(/name="request" value="([^"]+)"/)[1];
    const checked = page.match(/name="grant" value="([a-z-]+)" checked/)[1];
    const grant = this.consents === 1 ? scenario.first : checked;
    say({ asked: url.searchParams.get("scope"), preselected: checked, chose: grant });
    const answer = await fetch(new URL("/authorize", url), {
      method: "POST", redirect: "manual", headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ request, key: scenario.key, action: "allow", grant }) });
    const back = new URL(answer.headers.get("location")).searchParams;
    [this.code, this.iss] = [back.get("code"), back.get("iss")];
  }
}

const provider = new Provider();
const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(scenario.url), { authProvider: provider });
  const client = new Client({ name: "ts-stepup-host", version: "1.0.0" });
  await client.connect(transport);
  return [client, transport];
};
let client, transport;
try {
  [client, transport] = await connect();
} catch (error) {  // the first authorization: finish it, then connect again
  if (!(error instanceof UnauthorizedError)) throw error;
  await new StreamableHTTPClientTransport(new URL(scenario.url), { authProvider: provider })
    .finishAuth(provider.code, provider.iss);
  [client, transport] = await connect();
}
// what a host does when a request needs the user to authorize more: finish with the code, then ask again
const authorized = async (step) => {
  try {
    return await step();
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    await transport.finishAuth(provider.code, provider.iss);
    return await step();
  }
};
const tools = await client.listTools();
say({ listed: tools.tools.map((t) => t.name) });
const called = await authorized(() => client.callTool({ name: scenario.tool, arguments: scenario.arguments }));
say({ called: called.isError ?? false, text: called.content[0].text, consents: provider.consents });
const after = await client.listTools();
say({ listed_after: after.tools.map((t) => t.name) });
await client.close();
process.exit(0);
