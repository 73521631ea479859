// Reference tokenizer for models/lm/tokenizer's TestHFTokenizerMatchesReference: the
// @lenml/tokenizers port of Hugging Face's tokenizers (transformers.js)
// encodes each stdin line (a JSON string) with the vocabulary named by
// argv[2] (llama3 or qwen3) and prints its ids space-separated, without BOS.
// argv[3], when given, is a JSON pre_tokenizer that replaces the vocabulary's
// own (to check the GPT-2 and SmolLM splits on a real vocabulary).
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { TokenizerLoader } from "@lenml/tokenizers";

const dir = new URL(`./node_modules/@lenml/tokenizer-${process.argv[2]}/models/`, import.meta.url);
const tokenizerJSON = JSON.parse(readFileSync(new URL("tokenizer.json", dir), "utf8"));
if (process.argv[3]) tokenizerJSON.pre_tokenizer = JSON.parse(process.argv[3]);
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON,
  tokenizerConfig: JSON.parse(readFileSync(new URL("tokenizer_config.json", dir), "utf8")),
});
const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line === "") continue;
  out.push(tokenizer.encode(JSON.parse(line), { add_special_tokens: false }).join(" "));
}
process.stdout.write(out.join("\n") + "\n");
