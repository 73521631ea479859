// Runs the official SDKs' prompt caching, unchanged, against a Phaseless
// HTTP API at $PHASELESS_BASE_URL and prints one JSON line per request:
// Anthropic cache_control on a tool definition (the tools prefix), twice
// with the same tool and another system prompt and question, and OpenAI
// with the x-cache-ttl header, twice with the same prompt. cloud/worker's
// TestOfficialSDKPromptCache runs it against a built-in engine and checks
// the cache writes and reads each SDK parses from its own usage fields.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-local", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "sk-local", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const tools = [{
  name: "set_fan_speed", description: "Set the cabin fan speed.",
  input_schema: { type: "object", properties: { level: { type: "integer" } }, required: ["level"] },
  cache_control: { type: "ephemeral", ttl: "1h" },
}];
for (const [i, [system, question]] of [["Be terse about cars.", "hello"], ["Answer in French.", "and the tyres?"]].entries()) {
  const m = await anthropic.messages.create({ model: "auto", max_tokens: 2, tools, system, messages: [{ role: "user", content: question }] });
  out(`anthropic.tools.${i}`, { usage: m.usage });
}
for (const i of [0, 1]) {
  const c = await openai.chat.completions.create(
    { model: "auto", max_tokens: 2, messages: [{ role: "system", content: "You answer briefly about the car." }, { role: "user", content: "how warm is it" }] },
    { headers: { "x-cache-ttl": "600" } });
  out(`openai.ttl.${i}`, { usage: c.usage });
}
