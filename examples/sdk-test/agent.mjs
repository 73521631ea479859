// Drives a running phaseless-agent at $PHASELESS_BASE_URL with the official
// OpenAI and Anthropic SDKs, unchanged, and prints one JSON line per call:
// what came back, not whether it is right (the agent's model decides the
// text). agent/sdk_test.go runs it against a real agent and checks the shape.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused-on-device", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused-on-device", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const prompt = [{ role: "user", content: "turn on the seat heating" }];

{
  const { data, response } = await openai.chat.completions.create({ model: "auto", messages: prompt, max_tokens: 8, temperature: "low" }).withResponse();
  out("openai.create", { text: data.choices[0].message.content, finish: data.choices[0].finish_reason, usage: data.usage, route: response.headers.get("x-phaseless-route") });
}
{
  const stream = await openai.chat.completions.create({ model: "auto", messages: prompt, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null;
  for await (const c of stream) {
    if (c.choices.length) { text += c.choices[0].delta.content ?? ""; finish = c.choices[0].finish_reason ?? finish; }
    if (c.usage) usage = c.usage;
  }
  out("openai.stream", { text, usage, finish });
}
{
  const m = await anthropic.messages.create({ model: "auto", max_tokens: 8, messages: prompt });
  out("anthropic.create", { text: m.content[0].text, stop: m.stop_reason, usage: m.usage });
}
{
  const events = [];
  const s = anthropic.messages.stream({ model: "auto", max_tokens: 8, messages: prompt });
  s.on("streamEvent", (e) => events.push(e.type));
  const m = await s.finalMessage();
  out("anthropic.stream", { text: m.content[0].text, stop: m.stop_reason, usage: m.usage, events });
}
{
  const models = await openai.models.list();
  out("openai.models", { ids: models.data.map((m) => m.id) });
}
try { await anthropic.messages.create({ model: "auto", max_tokens: 5000, messages: prompt }); out("anthropic.too_many_tokens", { threw: false }); }
catch (e) { out("anthropic.too_many_tokens", { threw: true, name: e?.constructor?.name, status: e?.status ?? null, type: e?.error?.error?.type ?? null }); }
