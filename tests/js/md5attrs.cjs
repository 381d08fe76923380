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

module.exports = { md5OfAttributes, md5 };
