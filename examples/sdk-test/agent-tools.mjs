// Drives a running phaseless-agent's built-in engine at $PHASELESS_BASE_URL
// with the official SDKs' tool and structured-output calls, unchanged, and
// prints one JSON line per call. Whatever the model, the engine's grammar
// keeps calls to the offered tools with arguments valid against their
// schemas; agent/sdk_test.go checks that.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused-on-device", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused-on-device", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const messages = [{ role: "user", content: "set the fan to 2" }];
const fan = { type: "object", properties: { level: { type: "integer", minimum: 0, maximum: 5 } }, required: ["level"], additionalProperties: false };
const win = { type: "object", properties: { window: { type: "string", enum: ["driver", "passenger"] }, action: { type: "string", enum: ["open", "close"] } }, required: ["window", "action"], additionalProperties: false };
const oaiTools = [
  { type: "function", function: { name: "set_fan_speed", parameters: fan, strict: true } },
  { type: "function", function: { name: "set_window", parameters: win, strict: true } },
];
{
  const c = await openai.chat.completions.create({ model: "auto", messages, tools: oaiTools, tool_choice: "required", max_tokens: 200, seed: 3 });
  out("openai.tools", { finish: c.choices[0].finish_reason, calls: (c.choices[0].message.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: JSON.parse(t.function.arguments) })) });
}
{
  const s = openai.chat.completions.stream({ model: "auto", messages, tools: oaiTools, tool_choice: { type: "function", function: { name: "set_window" } }, max_tokens: 200, seed: 4 });
  const c = await s.finalChatCompletion();
  out("openai.stream.tools", { finish: c.choices[0].finish_reason, calls: (c.choices[0].message.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.parsed_arguments })) });
}
{
  const c = await openai.chat.completions.parse({ model: "auto", messages, max_tokens: 200, seed: 5,
    response_format: { type: "json_schema", json_schema: { name: "w", strict: true, schema: win } } });
  out("openai.parse", { finish: c.choices[0].finish_reason, parsed: c.choices[0].message.parsed });
}
{
  const s = anthropic.messages.stream({ model: "auto", max_tokens: 200, messages, tool_choice: { type: "any" },
    tools: [{ name: "set_fan_speed", input_schema: fan }, { name: "set_window", input_schema: win }] });
  const m = await s.finalMessage();
  out("anthropic.stream.tools", { stop: m.stop_reason, calls: m.content.filter((b) => b.type === "tool_use").map((b) => ({ name: b.name, arguments: b.input })) });
}
