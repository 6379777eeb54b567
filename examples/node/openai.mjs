// Calls the REST gateway with the official OpenAI Node SDK (npm `openai`): a streamed chat
// completion, embeddings, and an error. Prints one `KEYWORD value` line per fact, like client.mjs.
//
//   node openai.mjs http://127.0.0.1:8000/v1
//
// The base URL comes from the first argument, else UR_GATEWAY_URL, else http://127.0.0.1:8000/v1;
// UR_CHAT_MODEL and UR_EMBED_MODEL override the model names; UR_API_KEY is sent as the bearer key.
import OpenAI from "openai";

const baseURL = process.argv[2] ?? process.env.UR_GATEWAY_URL ?? "http://127.0.0.1:8000/v1";
const chatModel = process.env.UR_CHAT_MODEL ?? "smollm2-135m-instruct";
const embedModel = process.env.UR_EMBED_MODEL ?? "all-minilm-l6-v2";
// The SDK insists on a key; the gateway only checks it when it was started with keys.
const client = new OpenAI({ baseURL, apiKey: process.env.UR_API_KEY ?? "unused", maxRetries: 0 });

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

async function streamedChat() {
  const stream = await client.chat.completions.create({
    model: chatModel,
    messages: [{ role: "user", content: "What is the capital of France?" }],
    max_tokens: 16,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice?.delta?.content) console.log(`TOKEN ${JSON.stringify(choice.delta.content)}`);
    if (choice?.finish_reason) console.log(`FINISH ${choice.finish_reason}`);
    if (chunk.usage) console.log(`USAGE ${JSON.stringify(chunk.usage)}`);
  }
}

async function embeddings() {
  // encoding_format is left to the SDK, which asks for base64 and decodes it.
  const response = await client.embeddings.create({
    model: embedModel,
    input: ["How do I reset my password?", "I forgot my password", "The tide is high today."],
  });
  const [a, b, c] = response.data.map((item) => item.embedding);
  console.log(`DIMENSIONS ${a.length}`);
  console.log(`COSINE_PARAPHRASE ${cosine(a, b)}`);
  console.log(`COSINE_UNRELATED ${cosine(a, c)}`);
}

async function unknownModel() {
  try {
    await client.embeddings.create({ model: "no-such-model", input: "hi" });
    throw new Error("an unknown model was accepted");
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    console.log(`ERROR ${err.status} ${err.code}`);
  }
}

try {
  await streamedChat();
  await embeddings();
  await unknownModel();
} catch (err) {
  console.error(`FAILED ${err?.stack ?? err}`);
  process.exit(1);
}
