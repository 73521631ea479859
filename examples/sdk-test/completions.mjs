// Drives OpenAI's legacy completions endpoint (POST /v1/completions) at
// $PHASELESS_BASE_URL with the official OpenAI SDK, unchanged, and prints one
// JSON line per call: what came back, not whether it is right.
// transport/httpapi/completions_test.go runs it against a scripted engine,
// agent/completions_test.go against an agent serving the stories260K model.
import OpenAI from "openai";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused-on-device", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const req = { model: "auto", prompt: "", max_tokens: 60, temperature: 0 };

{
  const { data, response } = await openai.completions.create(req).withResponse();
  out("create", { object: data.object, text: data.choices[0].text, finish: data.choices[0].finish_reason, usage: data.usage, route: response.headers.get("x-phaseless-route") });
}
{
  const stream = await openai.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const c of stream) {
    if (c.choices.length) { text += c.choices[0].text; finish = c.choices[0].finish_reason ?? finish; chunks++; }
    if (c.usage) usage = c.usage;
  }
  out("stream", { text, usage, finish, chunks });
}
try {
  await openai.completions.create({ ...req, prompt: [1, 2, 3] });
  out("invalid", { threw: false });
} catch (e) {
  out("invalid", { threw: true, name: e.constructor.name, status: e.status, type: e.type, param: e.param });
}
