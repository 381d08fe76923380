// AWS SDK for JavaScript v2 (aws-sdk 2.x) against forqapp's SQS endpoint.
// Usage: FORQ_AUTH_SECRET=... node tests/js/sqs-v2.js http://127.0.0.1:9482 (tests/test_sqs_js.py runs it)
//   AWS_SDK_MODULE=aws-sdk (default: the current 2.x, which speaks SQS's JSON protocol since late 2023)
//   AWS_SDK_MODULE=aws-sdk-query (npm alias of aws-sdk@2.1450.0, the query protocol with XML answers)
//   optional: AWS_REGION (default us-east-1), SQS_ACCESS_KEY_ID (default forq-root), SQS_ACCOUNT_ID
//   (default 000000000000). It prints "ok" and exits 0 when every assertion holds (exit 1: some failed).
const AWS = require(process.env.AWS_SDK_MODULE || "aws-sdk");
const { md5OfAttributes, md5, checker, settings } = require("./common.cjs");

const { endpoint, secret, region, accessKeyId, account } = settings("sqs-v2.js");
const base = endpoint.replace(/\/$/, "");

function mkClient(secretAccessKey, keyId = accessKeyId) {
  const c = new AWS.SQS({ endpoint, region, accessKeyId: keyId, secretAccessKey, maxRetries: 0 });
  return c;
}
const sqs = mkClient(secret);
const protocol = sqs.api.protocol; // "json" or "query"
const hasSysNames = !!sqs.api.operations.receiveMessage.input.members.MessageSystemAttributeNames;
console.log(`aws-sdk ${AWS.VERSION}, protocol ${protocol}`);

const { check, eq, step, failures } = checker((e) => [e.code, e.message, e.statusCode, e.requestId]);
// exp.code: accepted error.code values (the query-protocol code: on the JSON protocol the SDK takes it from
// the x-amzn-query-error header); exp.name: error.name expected on the JSON protocol (the shape's name).
async function expectError(promise, exp, label) {
  try {
    const r = await promise;
    return check(false, label + " (expected an error)", r);
  } catch (e) {
    const got = { code: e.code, name: e.name, statusCode: e.statusCode, message: e.message, requestId: e.requestId, retryable: e.retryable };
    const codes = exp.code;
    check(codes.includes(e.code), `${label}: code ${e.code} in ${codes}`, got);
    if (exp.name && protocol === "json") check(e.name === exp.name, `${label}: name ${exp.name}`, got);
    if (exp.status) check(e.statusCode === exp.status, `${label}: statusCode ${exp.status}`, got);
    check(typeof e.message === "string" && e.message.length > 0, `${label}: has a message`, got);
    check(!!e.requestId, `${label}: requestId`, got);
    check(e.retryable === false, `${label}: not retryable`, got);
    return e;
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const call = (op, params) => sqs[op](params).promise();
const sysNames = (names) => (hasSysNames ? { MessageSystemAttributeNames: names } : { AttributeNames: names });

const p = "h3v2" + protocol[0] + "-" + Date.now().toString(36);
const names = { std: `${p}-std`, dlq: `${p}-dlq`, fifo: `${p}-f.fifo`, poll: `${p}-poll`, delay: `${p}-delay` };
const urls = {};

(async () => {
  try { await call("listQueues", { MaxResults: 1 }); } catch (e) {
    if (e.code === "RequestThrottled") { console.log("the server throttles this address (failed authentications of earlier runs): " + e.message); process.exit(3); }
  }
  await step("CreateQueue", async () => {
    for (const k of ["std", "dlq", "poll", "delay"]) {
      const r = await call("createQueue", { QueueName: names[k], Attributes: k === "std" ? { VisibilityTimeout: "30" } : undefined,
        tags: k === "std" ? { team: "h3" } : undefined });
      urls[k] = r.QueueUrl;
      eq(r.QueueUrl, `${base}/${account}/${names[k]}`, `CreateQueue ${k} url`);
      check(!!r.$response?.requestId, "$response.requestId", r.$response?.requestId);
    }
    const r = await call("createQueue", { QueueName: names.fifo, Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" } });
    urls.fifo = r.QueueUrl;
    eq(r.QueueUrl, `${base}/${account}/${names.fifo}`, "CreateQueue fifo url");
    const again = await call("createQueue", { QueueName: names.std, Attributes: { VisibilityTimeout: "30" } });
    eq(again.QueueUrl, urls.std, "CreateQueue again, same attributes");
    await expectError(call("createQueue", { QueueName: names.std, Attributes: { VisibilityTimeout: "31" } }),
      { code: ["QueueAlreadyExists"], name: "QueueNameExists", status: 400 }, "CreateQueue existing, other attributes");
  });

  await step("GetQueueUrl", async () => {
    eq((await call("getQueueUrl", { QueueName: names.std })).QueueUrl, urls.std, "GetQueueUrl std");
    eq((await call("getQueueUrl", { QueueName: names.fifo, QueueOwnerAWSAccountId: account })).QueueUrl, urls.fifo, "GetQueueUrl fifo");
  });

  await step("ListQueues", async () => {
    const r = await call("listQueues", { QueueNamePrefix: p });
    eq([...(r.QueueUrls || [])].sort(), Object.values(urls).sort(), "prefix lists exactly ours");
    check(r.NextToken === undefined, "no NextToken without MaxResults", r.NextToken);
    const all = []; let token; let pages = 0;
    do {
      const pg = await call("listQueues", { QueueNamePrefix: p, MaxResults: 2, NextToken: token });
      check((pg.QueueUrls || []).length <= 2, "page of at most 2", pg.QueueUrls);
      all.push(...(pg.QueueUrls || [])); token = pg.NextToken; pages++;
    } while (token && pages < 10);
    eq(all.sort(), Object.values(urls).sort(), "pagination collects all");
    eq(pages, 3, "3 pages");
    const viaEach = await new Promise((resolve, reject) => {
      const acc = [];
      sqs.listQueues({ QueueNamePrefix: p, MaxResults: 1 }).eachPage((err, data) => {
        if (err) { reject(err); return false; }
        if (data === null) { resolve(acc); return false; }
        acc.push(...(data.QueueUrls || [])); return true;
      });
    });
    eq(viaEach.sort(), Object.values(urls).sort(), "eachPage MaxResults 1");
    const none = await call("listQueues", { QueueNamePrefix: p + "-nothing" });
    check(!none.QueueUrls || none.QueueUrls.length === 0, "no match: empty", none.QueueUrls);
  });

  let dlqArn;
  await step("GetQueueAttributes", async () => {
    const a = (await call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["All"] })).Attributes || {};
    for (const k of ["QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed",
      "CreatedTimestamp", "LastModifiedTimestamp", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod", "DelaySeconds",
      "ReceiveMessageWaitTimeSeconds"]) check(k in a, "All has " + k, Object.keys(a));
    eq(a.VisibilityTimeout, "30", "VisibilityTimeout 30");
    eq(a.QueueArn, `arn:aws:sqs:${region}:${account}:${names.std}`, "QueueArn");
    const s = await call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["VisibilityTimeout", "QueueArn"] });
    eq(Object.keys(s.Attributes || {}).sort(), ["QueueArn", "VisibilityTimeout"], "specific names only");
    const f = (await call("getQueueAttributes", { QueueUrl: urls.fifo, AttributeNames: ["All"] })).Attributes || {};
    eq([f.FifoQueue, f.ContentBasedDeduplication], ["true", "true"], "fifo attributes");
    dlqArn = (await call("getQueueAttributes", { QueueUrl: urls.dlq, AttributeNames: ["QueueArn"] })).Attributes.QueueArn;
    await expectError(call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["NoSuchAttribute"] }),
      { code: ["InvalidAttributeName"], status: 400 }, "GetQueueAttributes unknown name");
  });

  await step("SetQueueAttributes", async () => {
    await call("setQueueAttributes", { QueueUrl: urls.std, Attributes: { VisibilityTimeout: "45" } });
    eq((await call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["VisibilityTimeout"] })).Attributes, { VisibilityTimeout: "45" }, "VisibilityTimeout 45");
    await call("setQueueAttributes", { QueueUrl: urls.std, Attributes: { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }) } });
    const rp = JSON.parse((await call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["RedrivePolicy"] })).Attributes.RedrivePolicy);
    check(rp.deadLetterTargetArn === dlqArn && Number(rp.maxReceiveCount) === 2, "RedrivePolicy read back", rp);
    const src = await call("listDeadLetterSourceQueues", { QueueUrl: urls.dlq });
    eq(src.queueUrls, [urls.std], "ListDeadLetterSourceQueues");
    await expectError(call("setQueueAttributes", { QueueUrl: urls.std, Attributes: { VisibilityTimeout: "abc" } }),
      { code: ["InvalidAttributeValue"], status: 400 }, "SetQueueAttributes VisibilityTimeout=abc");
    await expectError(call("setQueueAttributes", { QueueUrl: urls.std, Attributes: { NoSuch: "1" } }),
      { code: ["InvalidAttributeName"], status: 400 }, "SetQueueAttributes unknown attribute");
  });

  const msgAttrs = {
    s: { DataType: "String", StringValue: "héllo ✓" },
    n: { DataType: "Number", StringValue: "-12.5e3" },
    b: { DataType: "Binary", BinaryValue: Buffer.from([0, 1, 2, 250, 255]) },
    "c.custom": { DataType: "String.Custom", StringValue: "x" },
  };
  const body1 = "body one ✓ <&> \"quoted\" ]]> \t\n\r";
  let sent1;
  await step("SendMessage", async () => {
    sent1 = await call("sendMessage", { QueueUrl: urls.std, MessageBody: body1, MessageAttributes: msgAttrs });
    check(!!sent1.MessageId, "MessageId", sent1);
    eq(sent1.MD5OfMessageBody, md5(body1), "MD5OfMessageBody (also checked by the SDK)");
    eq(sent1.MD5OfMessageAttributes, md5OfAttributes(msgAttrs), "MD5OfMessageAttributes per AWS's algorithm");
  });

  await step("ReceiveMessage (attributes, md5, visibility)", async () => {
    const r = await call("receiveMessage", { QueueUrl: urls.std, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, AttributeNames: ["All"],
      ...(hasSysNames ? { MessageSystemAttributeNames: ["All"] } : {}), MessageAttributeNames: ["All"], VisibilityTimeout: 2 });
    eq(r.Messages?.length, 1, "one message");
    const m = r.Messages?.[0] || {};
    eq(m.Body, body1, "Body round-trips (incl. \\r, <&>, ]]>)");
    eq(m.MessageId, sent1.MessageId, "MessageId");
    eq(m.MD5OfBody, md5(body1), "MD5OfBody");
    eq(m.MD5OfMessageAttributes, md5OfAttributes(msgAttrs), "MD5OfMessageAttributes on receive");
    // (aws-sdk v2 adds StringListValues: [] and BinaryListValues: [] itself, as it does with AWS)
    const sv = (a) => a && { DataType: a.DataType, StringValue: a.StringValue };
    eq(sv(m.MessageAttributes?.s), { DataType: "String", StringValue: "héllo ✓" }, "String attribute");
    eq(sv(m.MessageAttributes?.n), { DataType: "Number", StringValue: "-12.5e3" }, "Number attribute");
    eq(sv(m.MessageAttributes?.["c.custom"]), { DataType: "String.Custom", StringValue: "x" }, "custom type attribute");
    check(m.MessageAttributes?.b?.DataType === "Binary" && Buffer.isBuffer(m.MessageAttributes.b.BinaryValue) &&
      m.MessageAttributes.b.BinaryValue.equals(Buffer.from([0, 1, 2, 250, 255])), "Binary attribute bytes", m.MessageAttributes?.b);
    const a = m.Attributes || {};
    for (const k of ["SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"]) check(k in a, "system attribute " + k, a);
    eq(a.ApproximateReceiveCount, "1", "ApproximateReceiveCount 1");
    const none = await call("receiveMessage", { QueueUrl: urls.std, WaitTimeSeconds: 0 });
    check(!none.Messages?.length, "invisible during VisibilityTimeout 2", none.Messages);
    await sleep(2600);
    const again = await call("receiveMessage", { QueueUrl: urls.std, WaitTimeSeconds: 2, MessageAttributeNames: ["s"], ...sysNames(["ApproximateReceiveCount"]) });
    const m2 = again.Messages?.[0] || {};
    eq(m2.MessageId, sent1.MessageId, "visible again");
    eq(Object.keys(m2.MessageAttributes || {}), ["s"], "MessageAttributeNames [s] only");
    eq(m2.Attributes, { ApproximateReceiveCount: "2" }, "ApproximateReceiveCount 2 only");
    eq(m2.MD5OfMessageAttributes, md5OfAttributes({ s: msgAttrs.s }), "MD5OfMessageAttributes of the subset");
    await call("deleteMessage", { QueueUrl: urls.std, ReceiptHandle: m2.ReceiptHandle });
  });

  await step("SendMessage DelaySeconds", async () => {
    const s = await call("sendMessage", { QueueUrl: urls.delay, MessageBody: "later", DelaySeconds: 2 });
    const r0 = await call("receiveMessage", { QueueUrl: urls.delay, WaitTimeSeconds: 0 });
    check(!r0.Messages?.length, "not receivable during its delay", r0.Messages);
    const t = Date.now();
    const r1 = await call("receiveMessage", { QueueUrl: urls.delay, WaitTimeSeconds: 5 });
    eq(r1.Messages?.[0]?.MessageId, s.MessageId, "received after its delay");
    check(Date.now() - t < 4500, "long poll returned once the delay ended", Date.now() - t);
    if (r1.Messages?.[0]) await call("deleteMessage", { QueueUrl: urls.delay, ReceiptHandle: r1.Messages[0].ReceiptHandle });
  });

  await step("SendMessageBatch (one failing entry)", async () => {
    const entries = [
      { Id: "a", MessageBody: "batch a", MessageAttributes: { k: { DataType: "Number", StringValue: "1" } } },
      { Id: "b", MessageBody: "batch b" },
      { Id: "bad", MessageBody: "bad \u0001 char" },
    ];
    const r = await call("sendMessageBatch", { QueueUrl: urls.std, Entries: entries });
    eq((r.Successful || []).map((e) => e.Id).sort(), ["a", "b"], "Successful a, b");
    eq((r.Failed || []).map((e) => e.Id), ["bad"], "Failed bad");
    const f = r.Failed?.[0] || {};
    check(f.SenderFault === true && f.Code === "InvalidMessageContents", "Failed entry SenderFault true (boolean), Code InvalidMessageContents", f);
    const a = (r.Successful || []).find((e) => e.Id === "a") || {};
    eq(a.MD5OfMessageAttributes, md5OfAttributes(entries[0].MessageAttributes), "batch MD5OfMessageAttributes");
    await expectError(call("sendMessageBatch", { QueueUrl: urls.std, Entries: [{ Id: "x", MessageBody: "1" }, { Id: "x", MessageBody: "2" }] }),
      { code: ["AWS.SimpleQueueService.BatchEntryIdsNotDistinct"], name: "BatchEntryIdsNotDistinct", status: 400 }, "duplicate ids");
  });

  await step("ReceiveMessage 10, ChangeMessageVisibility(+Batch), DeleteMessage(+Batch)", async () => {
    await call("sendMessageBatch", { QueueUrl: urls.std, Entries: Array.from({ length: 8 }, (_, i) => ({ Id: "e" + i, MessageBody: "msg " + i })) });
    const got = [];
    for (let i = 0; i < 5 && got.length < 10; i++) {
      const r = await call("receiveMessage", { QueueUrl: urls.std, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60 });
      got.push(...(r.Messages || []));
    }
    eq(got.length, 10, "10 messages");
    await call("changeMessageVisibility", { QueueUrl: urls.std, ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0 });
    const back = await call("receiveMessage", { QueueUrl: urls.std, WaitTimeSeconds: 1, VisibilityTimeout: 60, ...sysNames(["ApproximateReceiveCount"]) });
    eq(back.Messages?.[0]?.MessageId, got[0].MessageId, "ChangeMessageVisibility 0 makes it receivable");
    eq(back.Messages?.[0]?.Attributes?.ApproximateReceiveCount, "2", "ApproximateReceiveCount 2");
    got[0] = back.Messages?.[0] || got[0];
    const cb = await call("changeMessageVisibilityBatch", { QueueUrl: urls.std, Entries: [
      { Id: "ok1", ReceiptHandle: got[1].ReceiptHandle, VisibilityTimeout: 0 },
      { Id: "ok2", ReceiptHandle: got[2].ReceiptHandle, VisibilityTimeout: 120 },
      { Id: "bad", ReceiptHandle: "not-a-receipt-handle", VisibilityTimeout: 0 }] });
    eq((cb.Successful || []).map((e) => e.Id).sort(), ["ok1", "ok2"], "ChangeMessageVisibilityBatch Successful");
    check(cb.Failed?.length === 1 && cb.Failed[0].Id === "bad" && cb.Failed[0].Code === "ReceiptHandleIsInvalid" && cb.Failed[0].SenderFault === true,
      "ChangeMessageVisibilityBatch Failed bad ReceiptHandleIsInvalid", cb.Failed);
    const back2 = await call("receiveMessage", { QueueUrl: urls.std, WaitTimeSeconds: 1, VisibilityTimeout: 60 });
    eq(back2.Messages?.[0]?.MessageId, got[1].MessageId, "batch visibility 0 makes it receivable");
    got[1] = back2.Messages?.[0] || got[1];
    await call("deleteMessage", { QueueUrl: urls.std, ReceiptHandle: got[0].ReceiptHandle });
    const db = await call("deleteMessageBatch", { QueueUrl: urls.std, Entries: [
      ...got.slice(1).map((m, i) => ({ Id: "d" + i, ReceiptHandle: m.ReceiptHandle })), { Id: "bad", ReceiptHandle: "garbage" }] });
    eq((db.Successful || []).length, 9, "DeleteMessageBatch 9 successful");
    check(db.Failed?.length === 1 && db.Failed[0].Code === "ReceiptHandleIsInvalid", "DeleteMessageBatch bad entry", db.Failed);
    const q = await call("getQueueAttributes", { QueueUrl: urls.std, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"] });
    eq(q.Attributes, { ApproximateNumberOfMessages: "0", ApproximateNumberOfMessagesNotVisible: "0" }, "queue empty");
  });

  await step("Long poll woken by a send", async () => {
    const t0 = Date.now();
    const recv = call("receiveMessage", { QueueUrl: urls.poll, WaitTimeSeconds: 15, MaxNumberOfMessages: 10 });
    await sleep(1500);
    const s = await call("sendMessage", { QueueUrl: urls.poll, MessageBody: "wake up" });
    const r = await recv;
    const dt = Date.now() - t0;
    eq(r.Messages?.[0]?.MessageId, s.MessageId, "the long poll got the message");
    check(dt >= 1400 && dt < 6000, "woken soon after the send (ms " + dt + ")", dt);
  });

  await step("PurgeQueue", async () => {
    await call("sendMessageBatch", { QueueUrl: urls.poll, Entries: [{ Id: "1", MessageBody: "p1" }, { Id: "2", MessageBody: "p2" }] });
    await call("purgeQueue", { QueueUrl: urls.poll });
    await sleep(300);
    const q = await call("getQueueAttributes", { QueueUrl: urls.poll, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"] });
    eq(q.Attributes, { ApproximateNumberOfMessages: "0", ApproximateNumberOfMessagesNotVisible: "0" }, "empty after purge");
  });

  await step("Tags", async () => {
    eq((await call("listQueueTags", { QueueUrl: urls.std })).Tags, { team: "h3" }, "CreateQueue tags");
    await call("tagQueue", { QueueUrl: urls.std, Tags: { env: "test", "k:x": "v/1" } });
    eq((await call("listQueueTags", { QueueUrl: urls.std })).Tags, { env: "test", "k:x": "v/1", team: "h3" }, "TagQueue");
    await call("untagQueue", { QueueUrl: urls.std, TagKeys: ["team", "k:x"] });
    eq((await call("listQueueTags", { QueueUrl: urls.std })).Tags, { env: "test" }, "UntagQueue");
  });

  await step("FIFO", async () => {
    const s1 = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "f1", MessageGroupId: "g1" });
    const s2 = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "f2", MessageGroupId: "g1", MessageDeduplicationId: "dd-2" });
    const s2dup = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "f2 other", MessageGroupId: "g1", MessageDeduplicationId: "dd-2" });
    const s1dup = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "f1", MessageGroupId: "g1" });
    const s3 = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "f3", MessageGroupId: "g1" });
    const o1 = await call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "o1", MessageGroupId: "g2" });
    for (const [n, s] of [["s1", s1], ["s2", s2], ["s3", s3], ["o1", o1]]) check(/^\d{20}$/.test(s.SequenceNumber || ""), "SequenceNumber " + n, s);
    eq(s2dup.MessageId, s2.MessageId, "MessageDeduplicationId dedup");
    eq(s1dup.MessageId, s1.MessageId, "content-based dedup");
    const r = await call("receiveMessage", { QueueUrl: urls.fifo, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, AttributeNames: ["All"], VisibilityTimeout: 30 });
    const msgs = r.Messages || [];
    eq(msgs.filter((m) => m.Attributes?.MessageGroupId === "g1").map((m) => m.Body), ["f1", "f2", "f3"], "g1 in order, no duplicates");
    eq(msgs.length, 4, "4 messages");
    const m1 = msgs.find((m) => m.Body === "f1") || {};
    eq(m1.Attributes?.SequenceNumber, s1.SequenceNumber, "received SequenceNumber");
    eq(msgs.find((m) => m.Body === "f2")?.Attributes?.MessageDeduplicationId, "dd-2", "received MessageDeduplicationId");
    await call("deleteMessageBatch", { QueueUrl: urls.fifo, Entries: msgs.map((m, i) => ({ Id: "d" + i, ReceiptHandle: m.ReceiptHandle })) });
    await expectError(call("sendMessage", { QueueUrl: urls.fifo, MessageBody: "no group" }),
      { code: ["MissingParameter"], status: 400 }, "FIFO send without MessageGroupId");
  });

  await step("Errors", async () => {
    await expectError(call("getQueueUrl", { QueueName: `${p}-missing` }),
      { code: ["AWS.SimpleQueueService.NonExistentQueue"], name: "QueueDoesNotExist", status: 400 }, "GetQueueUrl missing");
    await expectError(call("sendMessage", { QueueUrl: `${base}/${account}/${p}-missing`, MessageBody: "x" }),
      { code: ["AWS.SimpleQueueService.NonExistentQueue"], name: "QueueDoesNotExist", status: 400 }, "SendMessage to missing queue");
    await expectError(call("deleteMessage", { QueueUrl: urls.std, ReceiptHandle: "not-a-receipt-handle" }),
      { code: ["ReceiptHandleIsInvalid"], status: 404 }, "DeleteMessage bad handle");
    await expectError(call("setQueueAttributes", { QueueUrl: urls.std, Attributes: { MessageRetentionPeriod: "10" } }),
      { code: ["InvalidAttributeValue"], status: 400 }, "SetQueueAttributes MessageRetentionPeriod=10");
    await expectError(call("receiveMessage", { QueueUrl: urls.std, MaxNumberOfMessages: 11 }),
      { code: ["InvalidParameterValue", "ReadCountOutOfRange"], status: 400 }, "ReceiveMessage MaxNumberOfMessages 11");
  });

  await step("DeleteQueue", async () => {
    for (const k of Object.keys(urls)) await call("deleteQueue", { QueueUrl: urls[k] });
    const r = await call("listQueues", { QueueNamePrefix: p });
    check(!r.QueueUrls || r.QueueUrls.length === 0, "no queues left", r.QueueUrls);
  });

  // Last: wrong credentials (each counts toward forqapp's failed-authentication throttle, 5 per address
  // within 60 s by default, which then refuses everything from the address for 60 s).
  await step("Wrong credentials", async () => {
    await expectError(mkClient(secret + "x").listQueues({}).promise(),
      { code: ["SignatureDoesNotMatch", "InvalidSignatureException"], status: 403 }, "wrong secret key");
    await expectError(mkClient("x", "AKIDNOSUCHKEY").listQueues({}).promise(),
      { code: ["InvalidClientTokenId", "UnrecognizedClientException"], status: 403 }, "unknown access key id");
  });

  if (failures()) { console.log(`${failures()} assertion(s) failed`); process.exit(1); }
  console.log("ok");
})();
