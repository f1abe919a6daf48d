// The Node peer of benchmarks/ingest.py: @octokit/webhooks' own receiver, one process.
//
//   THE_LOOP_WEBHOOK_SECRET=s PORT=8002 node benchmarks/node_peer/server.mjs
//
// createNodeMiddleware verifies X-Hub-Signature-256 (HMAC-SHA256 of the raw body), parses
// the JSON body and runs the handlers registered for the event; it answers 200 by itself
// once they resolve, so the one handler here only marks the answer 202, as the-loop's
// receiver answers a queued delivery. No Redis, no logging: the peer of the bare app.
import { createServer } from "node:http";
import { Webhooks, createNodeMiddleware } from "@octokit/webhooks";

const secret = (process.env.THE_LOOP_WEBHOOK_SECRET || "").split(",")[0].trim();
if (!secret) {
  console.error("node_peer: set THE_LOOP_WEBHOOK_SECRET");
  process.exit(2);
}
const port = Number(process.env.PORT || 8002);
const webhooks = new Webhooks({ secret });
const middleware = createNodeMiddleware(webhooks, { path: "/webhook" });

const server = createServer((req, res) => {
  // The middleware writes its own status line; a wrapper turns its 200 into 202.
  const writeHead = res.writeHead.bind(res);
  res.writeHead = (status, ...rest) => writeHead(status === 200 ? 202 : status, ...rest);
  middleware(req, res, () => {
    res.writeHead(404);
    res.end();
  });
});
server.listen(port, "127.0.0.1", () => console.log(`node_peer listening on ${port}`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
