// Drives `airlock mcp` with the official MCP TypeScript SDK as a client without elicitation: a call
// held for approval is approved from the command line (`airlock approve`, as the user would), runs
// once; the same tool with an argument changed is held again; an approval that expired never runs.
// Prints what came back as one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { execFileSync } from "node:child_process";

const [airlock, stateDir, policy, workspace] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: airlock,
  args: ["--state-dir", stateDir, "mcp", "--policy", policy, "--workspace", workspace, "--run-id", "sdk-run"],
  stderr: "inherit",
});
const client = new Client({ name: "airlock-approvals-test", version: "1.0.0" });
await client.connect(transport);
const release = (v) => client.callTool({ name: "release", arguments: { args: { v } } });
const held = (result) => /approval request ([0-9a-f]{32})/.exec(result.content[0].text)?.[1] ?? null;
const approve = (id, ...more) =>
  JSON.parse(execFileSync(airlock, ["--state-dir", stateDir, "approve", "--json", ...more, id]).toString());
const out = {};
out.held = await release(1);
out.held_id = held(out.held);
out.approved = approve(out.held_id);
out.changed = await release(2);
out.changed_id = held(out.changed);
out.ran = await release(1);
out.again = await release(1);
out.again_id = held(out.again);
approve(out.again_id, "--expires-in", "1");
await new Promise((done) => setTimeout(done, 1500));
out.expired = await release(1);
out.expired_id = held(out.expired);
await client.close();
console.log(JSON.stringify(out));
