// A kafkajs run against kcoord: create a topic, produce N keyed messages, consume them all in a
// group, then report what the admin API sees. Prints one JSON line; exits 1 on any error.
//   node group_consumer.js BROKER TOPIC GROUP N
const { Kafka, logLevel, Partitioners } = require('kafkajs');

const [broker, topic, groupId, count] = process.argv.slice(2);
const N = Number(count);
const kafka = new Kafka({ clientId: 'kcoord-test', brokers: [broker], logLevel: logLevel.ERROR });

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  for (let i = 0; i < N; i += 100) {
    const messages = [];
    for (let j = i; j < Math.min(N, i + 100); j++) messages.push({ key: `k${j % 11}`, value: `v${j}` });
    await producer.send({ topic, messages });
  }
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
  const described = await admin.describeGroups([groupId]);
  const live = described.groups[0];
  await consumer.disconnect(); // commits what it consumed, then leaves the group
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0);
  const after = (await admin.describeGroups([groupId])).groups[0];
  console.log(JSON.stringify({
    consumed: values.size, committed, liveState: live.state, liveMembers: live.members.length,
    protocol: live.protocol, afterState: after.state,
  }));
  await producer.disconnect();
  await admin.disconnect();
}

main().catch((e) => { console.error(e); process.exit(1); });
