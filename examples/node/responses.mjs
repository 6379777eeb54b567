// Calls the REST gateway's Responses API with the official OpenAI Node SDK (npm `openai`): a
// streamed response, the stored response fetched back, a forced function call answered over
// `previous_response_id`, and an error. Prints one `KEYWORD value` line per fact, like openai.mjs.
//
//   node responses.mjs http://127.0.0.1:8000/v1
//
// The base URL comes from the first argument, else UR_GATEWAY_URL, else http://127.0.0.1:8000/v1;
// UR_CHAT_MODEL overrides the model name; UR_API_KEY is sent as the bearer key.
import OpenAI from "openai";

const baseURL = process.argv[2] ?? process.env.UR_GATEWAY_URL ?? "http://127.0.0.1:8000/v1";
const model = process.env.UR_CHAT_MODEL ?? "smollm2-135m-instruct";
// The SDK insists on a key; the gateway only checks it when it was started with keys.
const client = new OpenAI({ baseURL, apiKey: process.env.UR_API_KEY ?? "unused", maxRetries: 0 });

async function streamedResponse() {
  const stream = await client.responses.create({
    model,
    input: "Count from one to five.",
    max_output_tokens: 128,
    temperature: 0,
    stream: true,
  });
  let final = null;
  for await (const event of stream) {
    console.log(`EVENT ${event.type} ${event.sequence_number}`);
    if (event.type === "response.output_text.delta") console.log(`DELTA ${JSON.stringify(event.delta)}`);
    if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
  }
  console.log(`STATUS ${final.status}`);
  console.log(`TEXT ${JSON.stringify(final.output_text ?? final.output[0].content[0].text)}`);
  console.log(`USAGE ${JSON.stringify(final.usage)}`);
  const stored = await client.responses.retrieve(final.id);
  console.log(`STORED ${JSON.stringify(stored.output_text)}`);
}

async function functionCall() {
  const tools = [
    {
      type: "function",
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
        additionalProperties: false,
      },
      strict: true,
    },
  ];
  const first = await client.responses.create({
    model,
    input: "What is the weather in Paris?",
    tools,
    tool_choice: { type: "function", name: "get_weather" },
    temperature: 0,
  });
  const call = first.output.find((item) => item.type === "function_call");
  console.log(`CALL ${call.name} ${call.arguments}`);
  const second = await client.responses.create({
    model,
    previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "Sunny, 22 C" }],
    tools,
    tool_choice: "none",
    max_output_tokens: 32,
    temperature: 0,
  });
  console.log(`ANSWER_ITEMS ${second.output.map((item) => item.type).join(",")}`);
}

async function missingPrevious() {
  try {
    await client.responses.create({ model, input: "Hi", previous_response_id: "resp_0123456789abcdef" });
    throw new Error("a missing previous response was accepted");
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    console.log(`ERROR ${err.status} ${err.code}`);
  }
}

await streamedResponse();
await functionCall();
await missingPrevious();
