// Drives one headless Chromium page for tests/web, over a line protocol so
// the Rust test keeps the servers in hand: each stdin line is one JSON request,
// answered by one stdout line {"ok": true, "value": ...} or {"ok": false, "error": ...}.
//   {"op": "open", "url": U}                     load U
//   {"op": "wait", "js": E, "timeout_ms": N}     until E is truthy in the page; its value
//   {"op": "eval", "js": E}                      E's value now
//   {"op": "screenshot", "path": P}              a PNG of the viewport at P
// Usage: node browser.mjs CHROMIUM_BINARY PROFILE_DIR
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const [executablePath, profile] = process.argv.slice(2);
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  viewport: { width: 1100, height: 700 },
  // The page is static and local: nothing else may reach out (no updates,
  // sync or QUIC probes), and a container has no sandbox or GPU.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = context.pages()[0] || await context.newPage();
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
say({ ok: true, value: `chromium ${context.browser()?.version() ?? "(persistent)"}` });

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  try {
    const req = JSON.parse(line);
    let value = null;
    if (req.op === "open") {
      await page.goto(req.url, { waitUntil: "load" });
    } else if (req.op === "wait") {
      // Polled with evaluate rather than waitForFunction, which compiles the
      // expression with eval inside the page: echomq-web's Content-Security-Policy
      // forbids that, as it should, and the page is tested under its real policy.
      const timeout = req.timeout_ms ?? 10000;
      const deadline = Date.now() + timeout;
      while (!(value = await page.evaluate(req.js))) {
        if (Date.now() > deadline) throw new Error(`Timeout ${timeout}ms exceeded waiting for ${req.js}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } else if (req.op === "eval") {
      value = await page.evaluate(req.js);
    } else if (req.op === "screenshot") {
      // The viewport, as a person sees it: cards far below are not laid out
      // until scrolled to (content-visibility), so a full page would be blank there.
      await page.screenshot({ path: req.path });
    } else {
      throw new Error(`unknown op ${req.op}`);
    }
    say({ ok: true, value });
  } catch (e) {
    say({ ok: false, error: String(e && e.message || e) });
  }
}
await context.close();
