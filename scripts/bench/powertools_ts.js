// Powertools for AWS Lambda (TypeScript) side of `make bench`: BatchProcessor + idempotency
// (DynamoDBPersistenceLayer) with their defaults, on the batches compare.py hands it.
//
// Protocol (the same for every worker): read the event file, create the table, run the warm-up
// batch, print "ready", wait for a line on stdin, process every timed batch, print one JSON line
// with the wall time of each batch and the CPU (user+sys) the process spent on them.
// Run by compare.py with NODE_PATH=.bench/node/node_modules; plain CommonJS, no compile step.
'use strict';

const fs = require('node:fs');
const readline = require('node:readline');
const { BatchProcessor, EventType, processPartialResponse } = require('@aws-lambda-powertools/batch');
const { makeIdempotent, IdempotencyConfig } = require('@aws-lambda-powertools/idempotency');
const { DynamoDBPersistenceLayer } = require('@aws-lambda-powertools/idempotency/dynamodb');
const { DynamoDBClient, CreateTableCommand, ResourceInUseException } = require('@aws-sdk/client-dynamodb');

// The peak resident set in KiB (VmHWM: getrusage's maxrss keeps the forking parent's mark).
function peakRssKib() {
  const m = /^VmHWM:\s+(\d+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) : null;
}

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

async function main() {
  const input = JSON.parse(fs.readFileSync(arg('--events'), 'utf8'));
  const tableName = arg('--table');
  const client = new DynamoDBClient({
    endpoint: process.env.AWS_ENDPOINT_URL_DYNAMODB,
    region: process.env.AWS_REGION || 'us-east-1',
  });
  try {
    await client.send(new CreateTableCommand({
      TableName: tableName,
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
    }));
  } catch (e) {
    if (!(e instanceof ResourceInUseException)) throw e;
  }

  const persistenceStore = new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client });
  // The same key as sqs-claim's KeySource::JsonPointer("/order_id"): the body's order id.
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'powertools_json(body).order_id' });
  const processor = new BatchProcessor(EventType.SQS);
  // The trivial handler every implementation runs: parse the body, nothing else.
  const recordHandler = async (record) => {
    JSON.parse(record.body);
  };
  const idempotentHandler = makeIdempotent(recordHandler, { persistenceStore, config });
  const context = {
    functionName: 'bench',
    awsRequestId: 'bench',
    getRemainingTimeInMillis: () => 900000,
  };
  const handler = async (event) => {
    config.registerLambdaContext(context);
    return processPartialResponse(event, idempotentHandler, processor, { context });
  };

  await handler(input.warmup);
  process.stdout.write('ready\n');
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => rl.once('line', resolve));
  rl.close();

  const walls = [];
  let failed = 0;
  const cpu0 = process.cpuUsage();
  for (const event of input.batches) {
    const t0 = process.hrtime.bigint();
    const response = await handler(event);
    walls.push(Number(process.hrtime.bigint() - t0) / 1e9);
    failed += response.batchItemFailures.length;
  }
  const cpu = process.cpuUsage(cpu0);
  process.stdout.write(JSON.stringify({
    walls,
    cpu: (cpu.user + cpu.system) / 1e6,
    // Powertools does not tell a duplicate from a fresh success: both are "not failed".
    ok: input.batches.reduce((n, e) => n + e.Records.length, 0) - failed,
    failed,
    vmhwm_kib: peakRssKib(),
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`powertools-ts: ${e.stack || e}\n`);
  process.exit(1);
});
