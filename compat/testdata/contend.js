// A node-redlock contender for dlock's interoperability test
// (redlock/interop_test.go). It takes the lock on RESOURCE ROUNDS times with
// node-redlock over the given Redis nodes and, inside it, increments a
// counter file slowly and appends "NAME ENTER_NS EXIT_NS 0" to a log, as the
// Go contenders do. Overlapping holders lose increments.
//
// usage: node contend.js ADDR[,ADDR...] RESOURCE ROUNDS DIR NAME [RETRIES]
// (ROUNDS 0: until DEADLINE_NS, CLOCK_MONOTONIC, from the environment)
//
// START_NS, if set in the environment, is when to begin (CLOCK_MONOTONIC),
// so that contenders started one after another begin together; THINK_MS is
// how long to work outside the lock between rounds (0 by default).
//
// RETRIES is node-redlock's retryCount: -1 (the default here) retries until
// it wins, 20ms ± 20ms apart; a number keeps node-redlock's own delay (200ms
// ± 200ms), and running out of the retries fails the contender.
"use strict";
const fs = require("fs");
const path = require("path");
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const [addrs, resource, rounds, dir, name, retries] = process.argv.slice(2);

// CLOCK_MONOTONIC, as the Go contenders read it (redlock/process_test.go).
function nowNs() {
  return process.hrtime.bigint();
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function main() {
  // Start with the other contenders: at START_NS on CLOCK_MONOTONIC, if set.
  const start = process.env.START_NS ? BigInt(process.env.START_NS) : 0n;
  while (nowNs() < start) await sleep(1);
  const clients = addrs.split(",").map((a) => {
    const [host, port] = a.split(":");
    return new Redis({ host, port: Number(port), maxRetriesPerRequest: 1, enableOfflineQueue: true });
  });
  const redlock =
    retries && retries !== "-1"
      ? new Redlock(clients, { retryCount: Number(retries) })
      : new Redlock(clients, { driftFactor: 0.01, retryCount: -1, retryDelay: 20, retryJitter: 20 });
  const counter = path.join(dir, "counter");
  const log = path.join(dir, "log");
  try {
    // ROUNDS 0: as many rounds as fit before DEADLINE_NS (CLOCK_MONOTONIC).
    const deadline = process.env.DEADLINE_NS ? BigInt(process.env.DEADLINE_NS) : 0n;
    for (let i = 0; Number(rounds) > 0 ? i < Number(rounds) : nowNs() < deadline; ) {
      // A short TTL: node-redlock keeps the partial keys of a split vote
      // until they expire, and cannot win those nodes back before then.
      const lock = await redlock.acquire([resource], 500);
      if (lock.expiration <= Date.now()) {
        // node-redlock can return a lock whose validity is already spent.
        await lock.release().catch(() => {});
        continue;
      }
      const enter = nowNs();
      let n = 0;
      try {
        n = parseInt(fs.readFileSync(counter, "utf8").trim(), 10) || 0;
      } catch (e) {}
      await sleep(2);
      fs.writeFileSync(counter, String(n + 1));
      const exit = nowNs();
      fs.appendFileSync(log, `${name} ${enter} ${exit} 0\n`);
      await lock.release();
      i++;
      await sleep(Number(process.env.THINK_MS || 0)); // work outside the lock
    }
  } finally {
    await redlock.quit();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
