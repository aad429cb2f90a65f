// Drives `airlock mcp` with the official MCP TypeScript SDK: initialize, list tools, read a file,
// provoke a refusal, write a file, call a json-protocol tool, call an unknown tool, close as the
// SDK closes (stdin, then SIGTERM after 2 s, then SIGKILL); prints what came back as one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { execFileSync } from "node:child_process";

const [airlock, stateDir, policy, workspace] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: airlock,
  args: ["--state-dir", stateDir, "mcp", "--policy", policy, "--workspace", workspace],
  stderr: "inherit",
});
const client = new Client({ name: "airlock-integration-test", version: "1.0.0" });
await client.connect(transport);
const out = { server: client.getServerVersion() };
out.tools = (await client.listTools()).tools;
out.read = await client.callTool({ name: "read_file", arguments: { path: "src/app.py" } });
out.refused = await client.callTool({ name: "read_file", arguments: { path: "../../etc/passwd" } });
out.tool = await client.callTool({ name: "count", arguments: {} });
out.wrote = await client.callTool({ name: "write_file", arguments: { path: "reports/sdk.txt", content: "sdk\n" } });
out.deployed = await client.callTool({ name: "deploy", arguments: { args: { v: 1 } } });
// A tool that needs approval: held; the person approves the request it names; called again.
out.held = await client.callTool({ name: "release", arguments: { args: { v: 2 } } });
const named = /approval request ([0-9a-f]{32})/.exec(out.held.content[0].text);
out.approval_id = named ? named[1] : null;
if (named)
  out.approved = JSON.parse(execFileSync(airlock, ["--state-dir", stateDir, "approve", "--json", named[1]]).toString());
out.released = await client.callTool({ name: "release", arguments: { args: { v: 2 } } });
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  out.unknown = "answered";
} catch (e) {
  out.unknown = { code: e.code, message: e.message };
}
await client.ping();
const closing = Date.now();
await client.close();
out.close_ms = Date.now() - closing;
console.log(JSON.stringify(out));
