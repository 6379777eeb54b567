#!/usr/bin/env node
// Calls Universal Runtime from Node with the .proto contract loaded at runtime (no codegen step):
// health, model list, a streamed chat answer, a cancelled stream, embeddings and a decoded error.
// Usage: node client.mjs [host:port]   (or UR_GRPC_TARGET; default 127.0.0.1:50051)
// Output is one "KEYWORD value" line per fact so scripts and tests can parse it.
import { fileURLToPath } from 'node:url';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

const TARGET = process.argv[2] ?? process.env.UR_GRPC_TARGET ?? '127.0.0.1:50051';
const CHAT_MODEL = process.env.UR_CHAT_MODEL ?? 'smollm2-135m-instruct';
const EMBED_MODEL = process.env.UR_EMBED_MODEL ?? 'all-minilm-l6-v2';
const DEADLINE_MS = 60_000;
const CANCEL_AFTER_TOKENS = 3;

const PROTO_ROOT = fileURLToPath(new URL('../../protos', import.meta.url));
// keepCase: field names as written in the .proto (max_tokens, token_ids); enums as their names.
const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

const contract = grpc.loadPackageDefinition(
  protoLoader.loadSync(
    ['universal_runtime/v1/inference_service.proto', 'universal_runtime/v1/model_service.proto'],
    { ...LOADER_OPTIONS, includeDirs: [PROTO_ROOT] },
  ),
).universal_runtime.v1;

// Health and the google.rpc error model are not in ../../protos. These are the standard
// definitions trimmed to the fields this program reads; same field numbers, so wire-compatible.
const STANDARD_PROTOS = [
  `syntax = "proto3"; package google.protobuf;
   message Any { string type_url = 1; bytes value = 2; }`,
  `syntax = "proto3"; package google.rpc;
   message Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
   message ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }`,
  `syntax = "proto3"; package grpc.health.v1;
   message HealthCheckRequest { string service = 1; }
   message HealthCheckResponse {
     enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
     ServingStatus status = 1;
   }
   service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }`,
];
const standard = new protobuf.Root();
for (const source of STANDARD_PROTOS) protobuf.parse(source, standard, { keepCase: true });
const RpcStatus = standard.lookupType('google.rpc.Status');
const ErrorInfo = standard.lookupType('google.rpc.ErrorInfo');
const { Health } = grpc.loadPackageDefinition(protoLoader.fromJSON(standard.toJSON(), LOADER_OPTIONS))
  .grpc.health.v1;

// Balancing and failover over several replicas (TARGET 'ipv4:10.0.0.1:50051,10.0.0.2:50051' or
// 'dns:///universal-runtime-grpc:50051'): the gateway's service config (gateway/grpc_clients.py)
// and channel options, explained in the README's "Client balancing and failover".
const SERVICE_CONFIG = {
  loadBalancingConfig: [{ round_robin: {} }],
  methodConfig: [
    {
      name: [
        { service: 'universal_runtime.v1.InferenceService' },
        { service: 'universal_runtime.v1.ModelService' },
        { service: 'grpc.health.v1.Health' },
      ],
      retryPolicy: {
        maxAttempts: 3,
        initialBackoff: '0.05s',
        maxBackoff: '0.5s',
        backoffMultiplier: 2,
        retryableStatusCodes: ['UNAVAILABLE'],
      },
    },
  ],
};
const CHANNEL_OPTIONS = {
  'grpc.service_config': JSON.stringify(SERVICE_CONFIG),
  'grpc.max_reconnect_backoff_ms': 5000,
  'grpc.keepalive_time_ms': 30000,
  'grpc.keepalive_timeout_ms': 10000,
};

const deadline = () => new Date(Date.now() + DEADLINE_MS);

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: deadline() }, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

// Resolves when a server stream ends OK, rejects with its gRPC error (status code in error.code).
function consume(call, onMessage) {
  return new Promise((resolve, reject) => {
    call.on('data', (message) => {
      try {
        onMessage(message);
      } catch (error) {
        call.cancel();
        reject(error);
      }
    });
    call.on('error', reject);
    call.on('end', resolve);
  });
}

// The google.rpc.ErrorInfo detail of a failed call, from the grpc-status-details-bin trailer.
function errorInfo(error) {
  const [raw] = error.metadata?.get('grpc-status-details-bin') ?? [];
  if (!raw) return null;
  const detail = RpcStatus.decode(raw).details.find((any) => any.type_url.endsWith('/google.rpc.ErrorInfo'));
  return detail ? ErrorInfo.toObject(ErrorInfo.decode(detail.value)) : null;
}

function cosine(u, v) {
  let dot = 0;
  let uu = 0;
  let vv = 0;
  for (let i = 0; i < u.length; i++) {
    dot += u[i] * v[i];
    uu += u[i] * u[i];
    vv += v[i] * v[i];
  }
  return dot / Math.sqrt(uu * vv);
}

function chatRequest(content, maxTokens) {
  return {
    model: CHAT_MODEL,
    messages: [{ role: 'CHAT_ROLE_USER', content }],
    parameters: { max_tokens: maxTokens, temperature: 0.7 },
  };
}

async function main(clients) {
  const credentials = grpc.credentials.createInsecure();
  const health = new Health(TARGET, credentials, CHANNEL_OPTIONS);
  const models = new contract.ModelService(TARGET, credentials, CHANNEL_OPTIONS);
  const inference = new contract.InferenceService(TARGET, credentials, CHANNEL_OPTIONS);
  clients.push(health, models, inference);

  const { status } = await unary(health, 'Check', { service: '' });
  console.log(`SERVICE_CONFIG ${JSON.stringify(SERVICE_CONFIG)}`);
  console.log(`HEALTH ${status}`);
  if (status !== 'SERVING') throw new Error(`server is ${status}`);

  const listed = await unary(models, 'ListModels', {});
  for (const model of listed.models) console.log(`MODEL ${model.name} ${model.tasks.join(',')}`);

  // Streamed answer: one TOKEN line per stream message, as it arrives.
  let tokenIds = 0;
  let finish = null;
  let usage = null;
  await consume(inference.GenerateStream(chatRequest('Name three colours.', 48), { deadline: deadline() }), (m) => {
    if (m.text || m.token_ids.length) console.log(`TOKEN ${JSON.stringify(m.text)}`);
    tokenIds += m.token_ids.length;
    if (m.finish_reason !== 'FINISH_REASON_UNSPECIFIED') finish = m.finish_reason;
    if (m.usage) usage = m.usage;
  });
  if (!finish || !usage) throw new Error('stream ended without finish_reason and usage');
  console.log(`TOKEN_IDS ${tokenIds}`);
  console.log(`USAGE ${JSON.stringify(usage)}`);
  console.log(`FINISH ${finish}`);

  // A second stream, cancelled by the client: the server stops generating at its next token.
  const long = inference.GenerateStream(chatRequest('Count from one to one hundred in words.', 256), {
    deadline: deadline(),
  });
  let received = 0;
  try {
    await consume(long, (m) => {
      if (received >= CANCEL_AFTER_TOKENS) return; // messages already in flight after cancel()
      received += m.token_ids.length;
      if (received >= CANCEL_AFTER_TOKENS) long.cancel();
    });
  } catch (error) {
    if (error.code !== grpc.status.CANCELLED) throw error;
    console.log(`CANCELLED after ${received} tokens`);
  }
  if (received < CANCEL_AFTER_TOKENS) throw new Error(`stream ended after ${received} tokens, before cancel`);

  const sentences = ['A cat is sleeping on the sofa.', 'A kitten naps on the couch.'];
  const embedded = await unary(inference, 'Embed', { model: EMBED_MODEL, inputs: sentences });
  const [u, v] = embedded.embeddings.map((e) => e.values);
  if (u.length !== embedded.dimensions) throw new Error(`got ${u.length} values, expected ${embedded.dimensions}`);
  console.log(`DIMENSIONS ${embedded.dimensions}`);
  console.log(`COSINE ${cosine(u, v).toFixed(4)}`);

  // Errors: canonical status code plus a google.rpc.ErrorInfo detail in the trailers.
  try {
    await unary(inference, 'Embed', { model: 'no-such-model', inputs: ['hello'] });
  } catch (error) {
    if (error.code === undefined) throw error;
    const info = errorInfo(error);
    console.log(`ERROR ${grpc.status[error.code]} ${info?.reason ?? '(no ErrorInfo)'}`);
    if (error.code !== grpc.status.NOT_FOUND || !info) throw new Error(`unexpected error: ${error.message}`);
    console.log(`ERROR_INFO ${JSON.stringify(info)}`);
    return;
  }
  throw new Error('Embed with an unknown model succeeded');
}

const clients = [];
try {
  await main(clients);
} catch (error) {
  console.error(`FAILED ${error.stack ?? error}`);
  process.exitCode = 1;
} finally {
  for (const client of clients) client.close();
}
