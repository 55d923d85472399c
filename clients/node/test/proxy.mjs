// A TCP proxy in front of a test server that can lose one reply: the request reaches the
// server, the connection is dropped before its reply comes back, as when a network fails.
import { createServer, connect } from "node:net";

export class DroppingProxy {
  static async start(targetPort) {
    const proxy = new DroppingProxy(targetPort);
    await new Promise((ok, fail) => {
      proxy.server.once("error", fail);
      proxy.server.listen(0, "127.0.0.1", ok);
    });
    proxy.port = proxy.server.address().port;
    return proxy;
  }

  constructor(targetPort) {
    this.targetPort = targetPort;
    this.sockets = new Set();
    this.match = null; // (request chunk as latin1 text) => boolean
    this.beforeDrop = null; // awaited once the server answered the dropped request
    this.armed = false;
    this.matched = 0; // requests seen that match
    this.answeredAfterMatch = 0; // replies passed on after a matching request
    this.server = createServer((client) => this.#pair(client));
  }

  // The next request that matches reaches the server; its reply is held, beforeDrop() is
  // awaited, and the connection is dropped with the reply unsent. Later matches pass.
  dropReplyOnce(match, beforeDrop) {
    this.match = match;
    this.beforeDrop = beforeDrop;
    this.armed = true;
  }

  #pair(client) {
    const upstream = connect(this.targetPort, "127.0.0.1");
    this.sockets.add(client);
    this.sockets.add(upstream);
    let dropping = false;
    let waitingReply = false;
    const close = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on("data", (chunk) => {
      if (this.match && this.match(chunk.toString("latin1"))) {
        this.matched++;
        if (this.armed) {
          this.armed = false;
          dropping = true;
        } else {
          waitingReply = true;
        }
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (dropping) {
        if (dropping === true) {
          dropping = "reply held";
          upstream.pause();
          Promise.resolve().then(() => this.beforeDrop?.()).finally(close);
        }
        return;
      }
      if (waitingReply) {
        waitingReply = false;
        this.answeredAfterMatch++;
      }
      client.write(chunk);
    });
    client.on("error", close);
    upstream.on("error", close);
    client.on("close", close);
    upstream.on("close", close);
  }

  async stop() {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}
