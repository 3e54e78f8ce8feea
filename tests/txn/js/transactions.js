// kafkajs transactions against kcoord: one committed transaction (with offsets sent to it) and
// one aborted, then what read_committed and read_uncommitted consumers see. Prints one JSON
// line; exits 1 on any error.
//   node transactions.js BROKER
const { Kafka, logLevel } = require('kafkajs');

const [broker] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kcoord-txn-test', brokers: [broker], logLevel: logLevel.ERROR });

async function readAll(readUncommitted) {
  const consumer = kafka.consumer({ groupId: `reader-${readUncommitted}-${Date.now()}`, readUncommitted });
  await consumer.connect();
  await consumer.subscribe({ topics: ['js-out'], fromBeginning: true });
  const values = [];
  let last = Date.now();
  consumer.run({ eachMessage: async ({ message }) => { values.push(message.value.toString()); last = Date.now(); } });
  await new Promise((resolve) => {
    const check = setInterval(() => { if (Date.now() - last > 4000) { clearInterval(check); resolve(); } }, 200);
  });
  await consumer.disconnect();
  return values.sort();
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    topics: [{ topic: 'js-out', numPartitions: 3 }, { topic: 'js-in', numPartitions: 3 }],
    waitForLeaders: true,
  });
  const producer = kafka.producer({ transactionalId: 'js-tx', maxInFlightRequests: 1, idempotent: true });
  await producer.connect();
  let txn = await producer.transaction();
  await txn.send({ topic: 'js-out', messages: [0, 1, 2, 3, 4, 5].map((i) => ({ value: `c${i}`, partition: i % 3 })) });
  await txn.sendOffsets({ consumerGroupId: 'js-g', topics: [{ topic: 'js-in', partitions: [{ partition: 2, offset: '12' }] }] });
  await txn.commit();
  txn = await producer.transaction();
  await txn.send({ topic: 'js-out', messages: [0, 1, 2].map((i) => ({ value: `a${i}`, partition: i % 3 })) });
  await txn.abort();
  await producer.disconnect();
  const committed = await readAll(false);
  const uncommitted = await readAll(true);
  const offsets = await admin.fetchOffsets({ groupId: 'js-g', topics: ['js-in'] });
  await admin.disconnect();
  console.log(JSON.stringify({ committed, uncommitted, offsets: offsets[0].partitions }));
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
