// Drives `airlock mcp` with the official MCP TypeScript SDK as a client that offers elicitation:
// a call held for approval is asked of "the user" (this script), who approves the first and
// declines the second; prints what came back, and each question asked, as one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [airlock, stateDir, policy, workspace] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: airlock,
  args: ["--state-dir", stateDir, "mcp", "--policy", policy, "--workspace", workspace, "--run-id", "mcp-run",
         "--elicit-approvals"],
  stderr: "inherit",
});
const client = new Client({ name: "airlock-elicitation-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const asked = [];
const answers = [{ action: "accept", content: { approve: true } }, { action: "decline" }];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  return answers[asked.length - 1] ?? { action: "cancel" };
});
await client.connect(transport);
const out = {};
out.approved = await client.callTool({ name: "release", arguments: { args: { v: 3 } } });
out.declined = await client.callTool({ name: "release", arguments: { args: { v: 4 } } });
out.cancelled = await client.callTool({ name: "release", arguments: { args: { v: 5 } } });
out.asked = asked;
await client.close();
console.log(JSON.stringify(out));
