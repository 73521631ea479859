// Runs the official OpenAI and Anthropic SDKs, unchanged, against a Phaseless
// HTTP API at $PHASELESS_BASE_URL whose streams carry Phaseless' own SSE
// field (per-token generation latency, the end-of-stream prefix-cache
// efficiency) and whose usage reports cached prompt tokens. The SDKs must
// read the streams exactly as without the field, and find the cached tokens
// in their own usage fields. transport/httpapi's TestOfficialSDKsStats and
// the agent's TestAgentOfficialSDKs run it; one JSON line per check.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-local", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "sk-local", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const model = process.env.PHASELESS_MODEL ?? "auto";

{
  const stream = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  let text = "", chunks = 0, usage = null, finish = null;
  for await (const c of stream) {
    chunks++;
    if (c.choices.length) { text += c.choices[0].delta.content ?? ""; finish = c.choices[0].finish_reason ?? finish; }
    if (c.usage) usage = c.usage;
  }
  out("openai.stream", { text, chunks, usage, finish });
}
{
  const { data, response } = await openai.chat.completions
    .create({ model, messages: [{ role: "user", content: "hello" }], max_output_tokens: 8 })
    .withResponse();
  out("openai.create", { text: data.choices[0].message.content, usage: data.usage, efficiency: response.headers.get("x-phaseless-prefix-cache-efficiency"), genMax: response.headers.get("x-phaseless-gen-us-max") });
}
{
  const events = [];
  const s = anthropic.messages.stream({ model, max_tokens: 8, messages: [{ role: "user", content: "hello" }] });
  s.on("streamEvent", (e) => events.push(e.type));
  const m = await s.finalMessage();
  out("anthropic.stream", { text: m.content.map((b) => b.text ?? "").join(""), usage: m.usage, events });
}
{
  const m = await anthropic.messages.create({ model, max_tokens: 8, messages: [{ role: "user", content: "hello" }] });
  out("anthropic.create", { text: m.content.map((b) => b.text ?? "").join(""), usage: m.usage });
}
