// A host on the official TypeScript SDK connecting with OAuth: an OAuthClientProvider as the
// Streamable HTTP transport's authProvider, the consent page filled in as a user would (open it,
// paste the key, allow), the code handed to finishAuth; then tools listed and called, and one more
// call after the access token expired, which the SDK answers with a refresh.
//
//   node ts_oauth.mjs '{"url": ..., "key": ..., "redirect": ..., "wait_ms": ...}'
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const scenario = JSON.parse(process.argv[2]);
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");

class Provider {
  constructor() { this.saved = {}; this.code = undefined; }
  get redirectUrl() { return scenario.redirect; }
  get clientMetadata() {
    return { client_name: "TS SDK host", redirect_uris: [scenario.redirect], response_types: ["code"],
             grant_types: ["authorization_code", "refresh_token"], token_endpoint_auth_method: "none" };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) { this.saved.tokens = tokens; say({ saved_tokens: true }); }
  saveCodeVerifier(verifier) { this.saved.verifier = verifier; }
  codeVerifier() { return this.saved.verifier; }
  async redirectToAuthorization(url) {  // the user's browser
    const page = await (await fetch(url)).text();
    const request = page.match(/name="request" value="([^"]+)"/)[1];
    const answer = await fetch(new URL("/authorize", url), {
      method: "POST", redirect: "manual", headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ request, key: scenario.key, action: "allow" }) });
    const back = new URL(answer.headers.get("location"));
    this.code = back.searchParams.get("code");
    say({ consent: answer.status, iss: back.searchParams.get("iss"), redirected_to: back.origin + back.pathname });
  }
}

const provider = new Provider();
const connect = async () => {
  const client = new Client({ name: "ts-oauth-host", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(scenario.url), { authProvider: provider }));
  return client;
};
let client;
try {
  client = await connect();
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
  const transport = new StreamableHTTPClientTransport(new URL(scenario.url), { authProvider: provider });
  await transport.finishAuth(provider.code);
  client = await connect();
}
const tools = await client.listTools();
const called = await client.callTool({ name: "echo", arguments: { text: "through OAuth" } });
const first = provider.tokens().access_token;
say({ tools: tools.tools.map((t) => t.name), text: called.content[0].text });
await new Promise((resolve) => setTimeout(resolve, scenario.wait_ms));  // the access token expires
const again = await client.callTool({ name: "echo", arguments: { text: "after a refresh" } });
say({ refreshed: provider.tokens().access_token !== first, text: again.content[0].text });
await client.close();
process.exit(0);
