// Runs the official OpenAI and Anthropic SDKs, unchanged, against a Phaseless
// HTTP API at $PHASELESS_BASE_URL (e.g. http://127.0.0.1:7070) and prints one
// JSON line per check. transport/httpapi's TestOfficialSDKs runs it against a
// real handler whose generator answers the magic prompts below; agent.mjs is
// the one to point at a running agent.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-local", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "sk-local", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const caught = (e) => ({ threw: true, name: e?.constructor?.name, status: e?.status ?? null, type: e?.error?.error?.type ?? e?.error?.type ?? null, message: String(e?.message ?? e) });

// OpenAI, non-streaming, with the raw response for the x-phaseless-* headers.
{
  const { data, response } = await openai.chat.completions
    .create({ model: "auto", messages: [{ role: "user", content: "hello" }], max_tokens: 16, temperature: 0.2 })
    .withResponse();
  out("openai.create", { text: data.choices[0].message.content, finish: data.choices[0].finish_reason, usage: data.usage, route: response.headers.get("x-phaseless-route") });
}

// OpenAI, streaming with usage in the final chunk.
{
  const stream = await openai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "hello" }], stream: true, stream_options: { include_usage: true } });
  let text = "", chunks = 0, usage = null, finish = null;
  for await (const c of stream) {
    chunks++;
    if (c.choices.length) { text += c.choices[0].delta.content ?? ""; finish = c.choices[0].finish_reason ?? finish; }
    if (c.usage) usage = c.usage;
  }
  out("openai.stream", { text, chunks, usage, finish });
}

// Anthropic, non-streaming.
{
  const m = await anthropic.messages.create({ model: "auto", max_tokens: 16, system: "Be brief.", messages: [{ role: "user", content: "hello" }] });
  out("anthropic.create", { text: m.content[0].text, stop: m.stop_reason, usage: m.usage });
}

// Anthropic, streaming through the SDK's helper, which checks the event order.
{
  const events = [];
  const s = anthropic.messages.stream({ model: "auto", max_tokens: 16, messages: [{ role: "user", content: "hello" }] });
  s.on("streamEvent", (e) => events.push(e.type));
  const m = await s.finalMessage();
  out("anthropic.stream", { text: m.content[0].text, stop: m.stop_reason, usage: m.usage, events });
}

// Errors in each API's own shape become each SDK's typed exceptions.
try { await openai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "hi" }], max_tokens: 0 }); out("openai.invalid", { threw: false }); }
catch (e) { out("openai.invalid", caught(e)); }
try { await anthropic.messages.create({ model: "auto", max_tokens: 0, messages: [{ role: "user", content: "hi" }] }); out("anthropic.invalid", { threw: false }); }
catch (e) { out("anthropic.invalid", caught(e)); }
try { await openai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "OVERLOADED" }] }); out("openai.overloaded", { threw: false }); }
catch (e) { out("openai.overloaded", caught(e)); }

// A failure after tokens were streamed must surface as an exception, after
// the tokens that did arrive, never as a silently short answer.
{
  let text = "";
  try {
    const stream = await openai.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "FAIL-MIDSTREAM" }], stream: true });
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? "";
    out("openai.midstream", { threw: false, text });
  } catch (e) { out("openai.midstream", { ...caught(e), text }); }
}
{
  let text = "";
  try {
    const stream = await anthropic.messages.create({ model: "auto", max_tokens: 16, messages: [{ role: "user", content: "FAIL-MIDSTREAM" }], stream: true });
    for await (const e of stream) if (e.type === "content_block_delta") text += e.delta.text;
    out("anthropic.midstream", { threw: false, text });
  } catch (e) { out("anthropic.midstream", { ...caught(e), text }); }
}
