// pulsar-flex (pure JS) against the broker: run by `make compat` (compat/run.py), which starts the
// brokers and passes PULSAR_URL / PULSAR_HTTP. Each test is named after its scenario id in
// compat/scenarios.py; a scenario pulsar-flex has no API for is skipped with "n/a: ...".
'use strict';
const { test } = require('node:test');
const assert = require('node:assert');
const { randomBytes } = require('node:crypto');
const { Producer, Consumer, logLevel } = require('pulsar-flex');

const URL = process.env.PULSAR_URL;
const HTTP = process.env.PULSAR_HTTP;
if (!URL || !HTTP) throw new Error('PULSAR_URL / PULSAR_HTTP are not set: run the suite with `make compat`');
const SERVERS = [URL.replace(/^pulsar:\/\//, '')];
const quiet = () => () => {};

const topicName = (prefix) => `persistent://public/default/${prefix}-${randomBytes(4).toString('hex')}`;

async function producer(topic) {
  const p = new Producer({ topic, discoveryServers: SERVERS, producerAccessMode: Producer.ACCESS_MODES.SHARED,
    logLevel: logLevel.NOTHING, logCreator: quiet });
  await p.create();
  return p;
}

// A consumer whose messages land in `got` (payload strings, with their redelivery counts).
async function consumer(topic, subType, { autoAck = true, onMessage = null, name = 'c' } = {}) {
  const c = new Consumer({ topic, subscription: 's', subType, consumerName: `${name}-${randomBytes(3).toString('hex')}`,
    discoveryServers: SERVERS, initialPosition: Consumer.INITIAL_POSITION.EARLIEST, receiveQueueSize: 100,
    logLevel: logLevel.NOTHING, logCreator: quiet });
  await c.subscribe();
  c.got = [];
  await c.run({ autoAck, onMessage: async (m) => {
    c.got.push({ payload: m.message.toString(), redeliveryCount: m.redeliveryCount });
    if (onMessage) await onMessage(m);
  } });
  return c;
}

async function until(what, cond, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25)); // polling a condition the client has no event for
  }
}

async function stats(topic) {
  const r = await fetch(`${HTTP}/admin/v2/${topic.replace('://', '/')}/stats`);
  assert.strictEqual(r.status, 200);
  return r.json();
}

const payloads = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

test('connect_lookup', async () => {
  const t = topicName('lookup');
  const p = await producer(t);
  const c = await consumer(t, Consumer.SUB_TYPES.EXCLUSIVE);
  for (const m of payloads('m', 5)) await p.sendMessage({ payload: m });
  await until('5 messages', () => c.got.length >= 5);
  assert.deepStrictEqual(c.got.map((g) => g.payload), payloads('m', 5));
  await c.unsubscribe();
  await p.close();
});

test('sub_exclusive', async () => {
  const t = topicName('excl');
  const c = await consumer(t, Consumer.SUB_TYPES.EXCLUSIVE);
  const second = new Consumer({ topic: t, subscription: 's', subType: Consumer.SUB_TYPES.EXCLUSIVE,
    consumerName: 'second', discoveryServers: SERVERS, logLevel: logLevel.NOTHING, logCreator: quiet });
  await assert.rejects(second.subscribe());
  await c.unsubscribe();
});

test('sub_shared', async () => {
  const t = topicName('shared');
  const c1 = await consumer(t, Consumer.SUB_TYPES.SHARED, { name: 'a' });
  const c2 = await consumer(t, Consumer.SUB_TYPES.SHARED, { name: 'b' });
  const p = await producer(t);
  for (const m of payloads('m', 20)) await p.sendMessage({ payload: m });
  await until('20 messages', () => c1.got.length + c2.got.length >= 20);
  const all = [...c1.got, ...c2.got].map((g) => g.payload).sort();
  assert.deepStrictEqual(all, payloads('m', 20).sort());
  assert.ok(c1.got.length > 0 && c2.got.length > 0, `both consumers got messages: ${c1.got.length}/${c2.got.length}`);
  await p.close();
  await c1.unsubscribe();
});

test('sub_failover', async () => {
  const t = topicName('failover');
  const c1 = await consumer(t, Consumer.SUB_TYPES.FAILOVER, { name: 'a' });
  const c2 = await consumer(t, Consumer.SUB_TYPES.FAILOVER, { name: 'b' });
  const p = await producer(t);
  for (const m of payloads('m', 10)) await p.sendMessage({ payload: m });
  await until('10 messages', () => c1.got.length + c2.got.length >= 10);
  assert.ok(c1.got.length === 0 || c2.got.length === 0, 'one active failover consumer');
  await p.close();
  await c1.unsubscribe();
});

test('sub_key_shared', async () => {
  const t = topicName('keyshared');
  const c1 = await consumer(t, Consumer.SUB_TYPES.KEY_SHARED, { name: 'a' });
  const p = await producer(t);
  for (const m of payloads('m', 10)) await p.sendMessage({ payload: m });
  await until('10 messages', () => c1.got.length >= 10);
  await p.close();
  await c1.unsubscribe();
});

test('batching_codecs', async () => {
  // pulsar-flex batches but does not compress: the codec here is "none"
  const t = topicName('batch');
  const c = await consumer(t, Consumer.SUB_TYPES.EXCLUSIVE);
  const p = await producer(t);
  await p.sendBatch({ messages: payloads('b', 10).map((payload) => ({ payload, properties: { k: 'v' } })) });
  await until('10 batched messages', () => c.got.length >= 10);
  assert.deepStrictEqual(c.got.map((g) => g.payload), payloads('b', 10));
  await p.close();
  await c.unsubscribe();
});

test('negative_ack', async () => {
  const t = topicName('nack');
  let nacked = false;
  const c = await consumer(t, Consumer.SUB_TYPES.SHARED, { autoAck: false, onMessage: async (m) => {
    if (!nacked) {
      nacked = true;
      await m.ack({ type: Consumer.ACK_TYPES.NEGATIVE });
    } else {
      await m.ack();
    }
  } });
  const p = await producer(t);
  await p.sendMessage({ payload: 'x' });
  await until('redelivery', () => c.got.length >= 2);
  assert.deepStrictEqual(c.got.map((g) => [g.payload, g.redeliveryCount]), [['x', 0], ['x', 1]]);
  await p.close();
  await c.unsubscribe();
});

test('out_counters', async () => {
  const t = topicName('counters');
  const c = await consumer(t, Consumer.SUB_TYPES.EXCLUSIVE);
  const p = await producer(t);
  for (const m of payloads('m', 3)) await p.sendMessage({ payload: m });
  await until('3 messages', () => c.got.length >= 3);
  await p.close();
  c._client.getCnx().close(); // leave without unsubscribing (pulsar-flex has no plain close)
  let s = await stats(t);
  const deadline = Date.now() + 10000;
  while (s.subscriptions.s.consumers.length > 0 && Date.now() < deadline) s = await stats(t);
  assert.strictEqual(s.subscriptions.s.consumers.length, 0, 'the consumer left');
  assert.strictEqual(s.subscriptions.s.msgOutCounter, 3);
  assert.strictEqual(s.msgOutCounter, 3);
});

const NA = {
  http_service_url: 'pulsar-flex takes binary host:port discovery servers only',
  partitioned: 'pulsar-flex has no partitioned-topic support',
  partitions_no_autocreate: 'no such API in pulsar-flex',
  schema_avro: 'pulsar-flex has no schemas',
  schema_json: 'pulsar-flex has no schemas',
  reader_earliest: 'pulsar-flex has no readers',
  reader_latest: 'pulsar-flex has no readers',
  reader_message_id: 'pulsar-flex has no readers',
  reader_rollback: 'pulsar-flex has no readers',
  seek: 'pulsar-flex has no seek',
  dlq: 'pulsar-flex has no dead-letter policy',
  retry_topic: 'pulsar-flex has no retry topics',
  delayed_delivery: 'pulsar-flex cannot set deliver_at_time',
  chunking: 'pulsar-flex has no chunking',
  chunking_shared: 'pulsar-flex has no chunking',
  deduplication: 'pulsar-flex sets no producer name or sequence ids of its own',
  regex_new_topic: 'pulsar-flex has no pattern consumers',
  table_view: 'pulsar-flex has no TableView',
  token_tls: 'pulsar-flex has no TLS (JWT over plain TCP only)',
  subscription_properties: 'pulsar-flex does not send subscription properties',
  initial_subscription_refused: 'pulsar-flex does not send initial_subscription_name',
  broker_entry_metadata: 'pulsar-flex does not read broker entry metadata',
  transactions: 'pulsar-flex has no transactions',
};
for (const [id, why] of Object.entries(NA)) {
  test(id, { skip: `n/a: ${why}` }, () => {});
}
