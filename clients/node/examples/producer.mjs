#!/usr/bin/env node
// Adds one job per URL given on the command line to the queue `fetch`:
//
//     node examples/producer.mjs https://example.com/ https://example.org/
//
// ECHOMQ_URL (default redis://127.0.0.1:6379/) names the server, which needs the echomq module.
import Redis from "iovalkey";
import { Queue } from "echomq";

const urls = process.argv.slice(2);
if (!urls.length) {
  console.error("usage: node examples/producer.mjs URL...");
  process.exit(2);
}
const connection = new Redis(process.env.ECHOMQ_URL || "redis://127.0.0.1:6379/");
const queue = new Queue(connection, "fetch");
try {
  const ids = await queue.addMany(urls);
  for (let i = 0; i < ids.length; i++) console.log(`${ids[i]} ${urls[i]}`);
  console.log(await queue.counts());
} finally {
  connection.disconnect();
}
