import { createHash } from "node:crypto";

// The six keys of a queue, under one hash tag so a cluster keeps them on one slot.
export function queueKeys(name) {
  if (typeof name !== "string" || name === "") throw new TypeError("a queue name is a non-empty string");
  const key = (suffix) => `{${name}}:${suffix}`;
  return {
    schedule: key("schedule"),
    pending: key("pending"),
    dead: key("dead"),
    jobs: key("jobs"),
    attempts: key("attempts"),
    errors: key("errors"),
  };
}

// Server TIME reply ([seconds, microseconds]) as Unix ms.
export function timeMs(reply) {
  return Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000);
}

// A script run with EVALSHA, loaded with EVAL when the server does not know it yet.
export class Script {
  constructor(lua, keyCount) {
    this.lua = lua;
    this.keyCount = keyCount;
    this.sha = createHash("sha1").update(lua).digest("hex");
  }

  // Loads the script (before a pipeline of EVALSHAs, so they do not each fall back to EVAL).
  async load(connection) {
    await connection.script("LOAD", this.lua);
  }

  async run(connection, keys, args) {
    try {
      return await connection.evalsha(this.sha, this.keyCount, ...keys, ...args);
    } catch (e) {
      if (!String(e && e.message).startsWith("NOSCRIPT")) throw e;
      return connection.eval(this.lua, this.keyCount, ...keys, ...args);
    }
  }
}
