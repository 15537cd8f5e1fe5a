// The page's translator: the ONNX export in ONNX Runtime (WebAssembly, one thread), the tokenizer in JavaScript,
// paragraphs split by sentencex, greedy decoding as transformers' generate() does it. Nothing it is given leaves
// the browser: after loading it fetches nothing.
import * as ort from "onnxruntime-web";
import { Tokenizer } from "@huggingface/tokenizers";
import segment from "sentencex";

const GRAPHS = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"];

async function fetchBytes(url, integrity) {
  const response = await fetch(url, integrity ? { integrity } : {});
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

export class Translator {
  static async load(base = new URL(".", document.baseURI)) {
    const page = await (await fetch(new URL("translator.json", base))).json();
    // the WebAssembly binary through our own fetch, so that its integrity hash is checked as the modules' are
    const wasm = page.assets.wasm;
    const model = new URL(page.model_folder + "/", base);
    // every file fetched at once, the runtime's binary among them: the page is ready sooner
    const [wasmBinary, tokenizerJson, tokenizerConfig, weights, ...graphs] = await Promise.all([
      fetchBytes(new URL(wasm.url, base), wasm.integrity),
      fetch(new URL("tokenizer.json", model)).then((r) => r.json()),
      fetch(new URL("tokenizer_config.json", model)).then((r) => r.json()),
      fetchBytes(new URL(page.weights_file, model)),
      ...GRAPHS.map((name) => fetchBytes(new URL(name, model))),
    ]);
    ort.env.wasm.wasmBinary = wasmBinary;
    ort.env.wasm.numThreads = 1;
    const options = {
      executionProviders: ["wasm"],
      graphOptimizationLevel: "all",
      externalData: [{ path: page.weights_file, data: weights }],
    };
    const sessions = await Promise.all(graphs.map((graph) => ort.InferenceSession.create(graph, options)));
    return new Translator(page, new Tokenizer(tokenizerJson, tokenizerConfig), sessions);
  }

  constructor(page, tokenizer, [encoder, firstStep, laterStep]) {
    Object.assign(this, { page, tokenizer, encoder, firstStep, laterStep });
    this.config = page.config;
  }

  // token ids of each text (the tokenizer's special tokens added, as in Python), right-padded into one batch
  batch(texts) {
    const limit = this.page.max_input_tokens, eos = this.config.eos_token_id;
    // cut as translate() cuts in Python: the end-of-sentence token the encoder was trained to see last is kept
    const rows = texts.map((text) => {
      const ids = this.tokenizer.encode(text).ids;
      if (ids.length <= limit) return ids;
      return ids.at(-1) === eos ? [...ids.slice(0, limit - 1), eos] : ids.slice(0, limit);
    });
    const width = Math.max(...rows.map((row) => row.length));
    const ids = new BigInt64Array(rows.length * width).fill(BigInt(this.config.pad_token_id));
    const mask = new BigInt64Array(rows.length * width);
    rows.forEach((row, r) => row.forEach((id, c) => {
      ids[r * width + c] = BigInt(id);
      mask[r * width + c] = 1n;
    }));
    const dims = [rows.length, width];
    return { rows, input_ids: new ort.Tensor("int64", ids, dims), attention_mask: new ort.Tensor("int64", mask, dims) };
  }

  // greedy decoding of a batch: each row's new token ids, the end-of-sentence token included when it came
  async generate(texts, maxNewTokens) {
    const { rows, input_ids, attention_mask } = this.batch(texts);
    const { last_hidden_state } = await this.encoder.run({ input_ids, attention_mask });
    const batch = rows.length, eos = this.config.eos_token_id, pad = this.config.pad_token_id;
    const limit = maxNewTokens ?? this.page.max_new_tokens ?? Math.max(...rows.map((r) => r.length)) + 50;
    const shortest = this.page.min_new_tokens ?? 0; // no end of sentence before it, as generate()'s minimum length
    const output = rows.map(() => []);
    const done = new Array(batch).fill(false);
    let step = new BigInt64Array(batch).fill(BigInt(this.config.decoder_start_token_id));
    let feeds = { encoder_attention_mask: attention_mask, encoder_hidden_states: last_hidden_state };
    let session = this.firstStep;
    for (let position = 0; position < limit && done.includes(false); position++) {
      feeds.input_ids = new ort.Tensor("int64", step, [batch, 1]);
      const results = await session.run(feeds);
      const logits = results.logits.data, vocabulary = results.logits.dims[2];
      step = new BigInt64Array(batch);
      for (let r = 0; r < batch; r++) {
        const row = r * vocabulary, ended = (v) => position < shortest && v === eos;
        let best = ended(0) ? 1 : 0;
        for (let v = best + 1; v < vocabulary; v++) if (!ended(v) && logits[row + v] > logits[row + best]) best = v;
        const token = done[r] ? pad : best; // a finished row is padded, as generate() pads it
        step[r] = BigInt(token);
        if (!done[r]) output[r].push(token);
        if (token === eos) done[r] = true;
      }
      const next = { encoder_attention_mask: attention_mask };
      for (const [name, value] of Object.entries(results)) {
        if (name === "logits") continue;
        next[name.replace("present", "past_key_values")] = value;
      }
      if (session === this.firstStep) session = this.laterStep;
      else for (const name of Object.keys(feeds)) if (name.includes(".encoder.")) next[name] = feeds[name];
      feeds = next;
    }
    return output;
  }

  decode(ids) {
    return this.tokenizer.decode(ids, { skip_special_tokens: true }).trim();
  }

  // a paragraph: its sentences (sentencex, the rules of the Python side) translated as one batch, joined in the
  // paragraph's own spacing and line breaks
  async translate(text) {
    const started = performance.now();
    const sentences = [], gaps = [];
    let position = 0;
    for (const piece of segment(this.page.language, text)) {
      const sentence = piece.trim();
      if (!sentence) continue;
      const start = text.indexOf(sentence, position);
      if (start < 0) break; // not in the text as it is: the rest is one sentence, as common/paragraphs.py does
      gaps.push(text.slice(position, start));
      sentences.push(sentence);
      position = start + sentence.length;
    }
    const rest = text.slice(position);
    if (rest.trim()) {
      const start = position + rest.length - rest.trimStart().length;
      gaps.push(text.slice(position, start));
      sentences.push(rest.trim());
      position = start + rest.trim().length;
    }
    gaps.push(text.slice(position));
    const ids = sentences.length ? await this.generate(sentences) : [];
    let translation = gaps[0];
    ids.forEach((row, index) => (translation += this.decode(row) + gaps[index + 1]));
    return { translation, sentences, ids, milliseconds: performance.now() - started };
  }
}

// the page: a text box, a button, the translation, its time and what the browser fetched after loading
async function main() {
  const status = document.getElementById("status");
  const requests = () => performance.getEntriesByType("resource").length;
  try {
    const translator = await Translator.load();
    const loaded = requests();
    window.translator = translator;
    window.readyMilliseconds = performance.now();
    status.textContent = `Ready in ${Math.round(window.readyMilliseconds)} ms. Translations run in this browser.`;
    const button = document.getElementById("translate");
    button.disabled = false;
    button.addEventListener("click", async () => {
      button.disabled = true;
      const time = document.getElementById("time");
      try {
        const { translation, milliseconds } = await translator.translate(document.getElementById("source").value);
        document.getElementById("translation").textContent = translation; // text, never markup
        const sent = requests() - loaded;
        time.textContent =
          `Translated in ${milliseconds.toFixed(0)} ms on this machine; requests since the page loaded: ${sent} ` +
          `(${sent ? "see the browser's network log" : "nothing you typed left the machine"}).`;
      } catch (error) {
        time.textContent = `The translation failed: ${error.message}`; // said, and the page stays usable
        window.translationError = String(error);
      } finally {
        button.disabled = false;
      }
    });
  } catch (error) {
    status.textContent = `The translator could not load: ${error.message}`;
    window.loadError = String(error);
  }
}

if (typeof document !== "undefined" && document.getElementById("source")) main();
