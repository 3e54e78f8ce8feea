// kafkajs on a secured listener: produce N messages, consume them in a group, commit, and
// report the committed total. Prints one JSON line; exits 1 on any error.
//   node secured_group.js BROKER TOPIC GROUP N
// Environment: KCOORD_CA (PEM file: TLS trusted CA; unset: no TLS), KCOORD_CERT + KCOORD_KEY
// (a client certificate), and KCOORD_SCRAM_USER + KCOORD_SCRAM_PASSWORD (SCRAM-SHA-512) or
// KCOORD_TOKEN (OAUTHBEARER) or neither (no SASL).
const fs = require('fs');
const { Kafka, logLevel, Partitioners } = require('kafkajs');

const [broker, topic, groupId, count] = process.argv.slice(2);
const N = Number(count);
const env = process.env;
let sasl;
if (env.KCOORD_TOKEN) {
  sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: env.KCOORD_TOKEN }) };
} else if (env.KCOORD_SCRAM_USER) {
  sasl = { mechanism: 'scram-sha-512', username: env.KCOORD_SCRAM_USER, password: env.KCOORD_SCRAM_PASSWORD };
}
let ssl = false;
if (env.KCOORD_CA) {
  ssl = { ca: [fs.readFileSync(env.KCOORD_CA)] };
  if (env.KCOORD_CERT) {
    ssl.cert = fs.readFileSync(env.KCOORD_CERT);
    ssl.key = fs.readFileSync(env.KCOORD_KEY);
  }
}
const kafka = new Kafka({
  clientId: 'kcoord-secured', brokers: [broker], ssl, sasl, logLevel: logLevel.ERROR,
  retry: { retries: 2 },
});

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < N; i++) messages.push({ key: `k${i % 7}`, value: `v${i}` });
  await producer.send({ topic, messages });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const values = new Set();
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out with ${values.size} of ${N}`)), 60000);
    consumer.run({
      autoCommit: true,
      eachMessage: async ({ message }) => {
        values.add(message.value.toString());
        if (values.size === N) { clearTimeout(timer); resolve(); }
      },
    });
  });
  await consumer.disconnect(); // commits what it consumed, then leaves the group
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0);
  console.log(JSON.stringify({ consumed: values.size, committed }));
  await producer.disconnect();
  await admin.disconnect();
}

main().catch((e) => { console.error(e); process.exit(1); });
