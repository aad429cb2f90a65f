// The OpenAPI document's lint (Redocly CLI, tests/openapi/redocly.yaml) and its validation
// (swagger-parser): any error or warning from either fails. Exit 77 (CTest's skip) when the pinned
// packages are not installed (scripts/install-deps), unless AIRLOCK_REQUIRE_ALL_TIERS=1.
// Usage: node tests/openapi/check.mjs OPENAPI.json
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const doc = process.argv[2];
if (!doc) {
  console.error('usage: check.mjs OPENAPI.json');
  process.exit(2);
}
const redocly = join(here, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js');
const parser = join(here, 'node_modules', '@apidevtools', 'swagger-parser', 'package.json');
if (!existsSync(redocly) || !existsSync(parser)) {
  console.error('check.mjs: @redocly/cli or @apidevtools/swagger-parser is missing: run scripts/install-deps');
  process.exit(process.env.AIRLOCK_REQUIRE_ALL_TIERS === '1' ? 1 : 77);
}

let failed = false;

// Redocly: the JSON report's totals, not only its exit status, so that a warning fails too.
const lint = spawnSync(process.execPath, [redocly, 'lint', '--config', join(here, 'redocly.yaml'), '--format=json', doc], {
  encoding: 'utf8',
  // No telemetry, no update check: the test needs no network.
  env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
});
let report;
try {
  report = JSON.parse(lint.stdout);
} catch {
  console.error(`redocly lint printed no JSON report (status ${lint.status}):\n${lint.stdout}${lint.stderr}`);
  process.exit(1);
}
const { errors = 0, warnings = 0 } = report.totals ?? {};
for (const p of report.problems ?? [])
  for (const at of p.location ?? [])
    console.error(`redocly: ${p.severity} ${p.ruleId} at ${at.pointer}: ${p.message}`);
if (lint.status !== 0 || errors + warnings > 0) {
  console.error(`redocly lint: ${errors} errors, ${warnings} warnings (status ${lint.status})`);
  failed = true;
} else {
  console.log(`redocly lint ${report.version ?? ''}: no problems`);
}

// swagger-parser: the document against the OpenAPI 3.0 schema, every $ref resolved.
const { default: SwaggerParser } = await import('@apidevtools/swagger-parser');
try {
  const api = await SwaggerParser.validate(doc);
  console.log(`swagger-parser: valid (${api.info.title}, OpenAPI ${api.openapi})`);
} catch (e) {
  console.error(`swagger-parser: ${e.message}`);
  failed = true;
}
process.exit(failed ? 1 : 0);
