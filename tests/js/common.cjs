// AWS's MD5OfMessageAttributes / MD5OfMessageSystemAttributes algorithm (SQS developer guide):
// for each attribute, sorted by name: 4-byte big-endian length + UTF-8 name, length + data type,
// a transport byte (1 String/Number, 2 Binary), length + value bytes; MD5 hex of the whole.
const crypto = require("crypto");

function lenPrefixed(buf) {
  const l = Buffer.alloc(4);
  l.writeUInt32BE(buf.length, 0);
  return Buffer.concat([l, buf]);
}

function md5OfAttributes(attrs) {
  const names = Object.keys(attrs || {}).sort();
  if (!names.length) return undefined;
  const parts = [];
  for (const name of names) {
    const a = attrs[name];
    const type = a.DataType;
    parts.push(lenPrefixed(Buffer.from(name, "utf8")));
    parts.push(lenPrefixed(Buffer.from(type, "utf8")));
    if (a.StringValue !== undefined && a.StringValue !== null) {
      parts.push(Buffer.from([1]));
      parts.push(lenPrefixed(Buffer.from(a.StringValue, "utf8")));
    } else {
      let b = a.BinaryValue;
      if (typeof b === "string") b = Buffer.from(b, "base64");
      parts.push(Buffer.from([2]));
      parts.push(lenPrefixed(Buffer.from(b)));
    }
  }
  return crypto.createHash("md5").update(Buffer.concat(parts)).digest("hex");
}

function md5(s) {
  return crypto.createHash("md5").update(Buffer.from(s, "utf8")).digest("hex");
}

// The scripts' assertions: each prints "  pass: …" or "  FAIL: …" and counts its failures;
// describe(e) gives what a step that threw prints of its error.
function canon(v) {
  if (Array.isArray(v)) return v.map(canon);
  if (v && typeof v === "object" && !(v instanceof Uint8Array)) {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
  }
  return v;
}

function checker(describe) {
  let failures = 0;
  function check(cond, label, detail) {
    if (cond) { console.log("  pass:", label); return true; }
    failures++;
    console.log("  FAIL:", label, detail === undefined ? "" : "-> " + (typeof detail === "string" ? detail : JSON.stringify(detail)));
    return false;
  }
  function eq(actual, expected, label) {
    return check(JSON.stringify(canon(actual)) === JSON.stringify(canon(expected)), label, { actual, expected });
  }
  async function step(name, fn) {
    console.log("[" + name + "]");
    try { await fn(); } catch (e) {
      failures++;
      console.log("  FAIL: " + name + " threw", ...describe(e));
    }
  }
  return { check, eq, step, failures: () => failures };
}

// The command line and environment every script reads: the endpoint, the root key's secret
// (FORQ_AUTH_SECRET), AWS_REGION, SQS_ACCESS_KEY_ID and SQS_ACCOUNT_ID.
function settings(script) {
  const endpoint = process.argv[2];
  if (!endpoint) { console.error(`usage: node ${script} <endpoint-url>`); process.exit(2); }
  const secret = process.env.FORQ_AUTH_SECRET;
  if (!secret) { console.error("FORQ_AUTH_SECRET must be set"); process.exit(2); }
  return { endpoint, secret, region: process.env.AWS_REGION || "us-east-1",
           accessKeyId: process.env.SQS_ACCESS_KEY_ID || "forq-root",
           account: process.env.SQS_ACCOUNT_ID || "000000000000" };
}

module.exports = { md5OfAttributes, md5, checker, settings };
