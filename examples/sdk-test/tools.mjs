// Runs the official SDKs' tool-calling and structured-output helpers,
// unchanged, against a Phaseless HTTP API at $PHASELESS_BASE_URL and prints
// one JSON line per check: OpenAI runTools (plain and streamed), parse with
// a strict json_schema, the chat stream helper assembling tool_calls
// deltas; Anthropic tool_use non-streamed and streamed (input_json_delta
// through the stream helper) and the beta toolRunner loop.
// transport/httpapi's TestOfficialSDKTools runs it against an engine that
// calls set_fan_speed{"level":2} and then answers from the tool's result.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";

const base = process.env.PHASELESS_BASE_URL ?? "http://127.0.0.1:7070";
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-local", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "sk-local", maxRetries: 0 });
const out = (check, v) => console.log(JSON.stringify({ check, ...v }));
const params = { type: "object", properties: { level: { type: "integer", minimum: 0, maximum: 5 } }, required: ["level"], additionalProperties: false };
const calls = [];
const setFan = (args) => { calls.push(args); return `fan at ${args.level}`; };
const messages = [{ role: "user", content: "set the fan to 2" }];

// OpenAI runTools: the helper calls the function with the parsed arguments
// and sends its result back as a tool message until the model answers.
{
  const runner = openai.chat.completions.runTools({ model: "auto", messages,
    tools: [{ type: "function", function: { name: "set_fan_speed", function: setFan, parse: JSON.parse, parameters: params } }] });
  out("openai.runTools", { final: await runner.finalContent(), calls: calls.splice(0), turns: runner.messages.length });
}
{
  const runner = openai.chat.completions.runTools({ model: "auto", messages, stream: true,
    tools: [{ type: "function", function: { name: "set_fan_speed", function: setFan, parse: JSON.parse, parameters: params } }] });
  out("openai.runTools.stream", { final: await runner.finalContent(), calls: calls.splice(0) });
}

// The stream helper assembles the streamed tool_calls deltas.
{
  const s = openai.chat.completions.stream({ model: "auto", messages, tool_choice: "required",
    tools: [{ type: "function", function: { name: "set_fan_speed", parameters: params, strict: true } }] });
  const c = await s.finalChatCompletion();
  const tc = c.choices[0].message.tool_calls?.[0];
  out("openai.stream.tools", { name: tc?.function?.name, arguments: tc?.function?.arguments, parsed: tc?.function?.parsed_arguments ?? null, finish: c.choices[0].finish_reason });
}

// parse() with a strict json_schema response format reads message.parsed.
{
  const c = await openai.chat.completions.parse({ model: "auto", messages: [{ role: "user", content: "weather in Oslo" }],
    response_format: { type: "json_schema", json_schema: { name: "weather", strict: true,
      schema: { type: "object", properties: { city: { type: "string" }, temp: { type: "integer" } }, required: ["city", "temp"], additionalProperties: false } } } });
  out("openai.parse", { parsed: c.choices[0].message.parsed });
}

const antTools = [{ name: "set_fan_speed", description: "Set the fan speed.", input_schema: params }];

// Anthropic tool_use, non-streamed and through the stream helper.
{
  const m = await anthropic.messages.create({ model: "auto", max_tokens: 64, messages, tools: antTools, tool_choice: { type: "any" } });
  const b = m.content.find((x) => x.type === "tool_use");
  out("anthropic.tool_use", { name: b?.name, input: b?.input, id: b?.id, stop: m.stop_reason });
}
{
  const partial = [];
  const s = anthropic.messages.stream({ model: "auto", max_tokens: 64, messages, tools: antTools });
  s.on("inputJson", (delta) => partial.push(delta));
  const m = await s.finalMessage();
  const b = m.content.find((x) => x.type === "tool_use");
  out("anthropic.stream.tool_use", { name: b?.name, input: b?.input, partial, stop: m.stop_reason });
}

// The beta tool runner: calls run() with the input and loops until text.
{
  const runner = anthropic.beta.messages.toolRunner({ model: "auto", max_tokens: 64, messages,
    tools: [betaTool({ name: "set_fan_speed", description: "Set the fan speed.", inputSchema: params, run: setFan })] });
  const m = await runner.runUntilDone();
  out("anthropic.toolRunner", { text: m.content.filter((x) => x.type === "text").map((x) => x.text).join(""), calls: calls.splice(0) });
}
