// Parse LogQL expressions (a JSON array on stdin) with Grafana's LogQL grammar (@grafana/lezer-logql,
// the parser of Grafana's Loki query editor). Prints a JSON array of {expr, errors}; errors are the
// positions where the grammar found no valid continuation.
"use strict";
const { parser } = require("@grafana/lezer-logql");

const exprs = JSON.parse(require("fs").readFileSync(0, "utf8"));
const results = exprs.map((expr) => {
  const errors = [];
  parser.parse(expr).iterate({
    enter: (node) => {
      if (node.type.isError) {
        errors.push(`at ${node.from}: ...${expr.slice(Math.max(0, node.from - 25), node.from + 25)}...`);
      }
    },
  });
  return { expr, errors };
});
process.stdout.write(JSON.stringify(results));
