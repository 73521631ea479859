// llref: llama.cpp itself as the reference for Phaseless's engine (docs/engine.md,
// "Against llama.cpp"). Built by build.sh from the llama.cpp and ggml sources that
// ollama vendors in its Go module (the only copy of llama.cpp reachable here).
//   llref quantize IN OUT TYPE                  llama_model_quantize, llama-quantize's core; TYPE q4_k_m|q8_0|q6_k|q4_0
//   llref bench MODEL THREADS PROMPT GEN REPS   prefill, then batch-1 greedy decode: wall and CPU time
//   llref logits MODEL TOKEN...                 final-position logits as a JSON array
//   llref greedy MODEL N TOKEN...               greedy continuation ids of the prompt ids
//   llref golden MODEL N TEXT                   JSON: llama.cpp's tokens of TEXT (with BOS), its logits at
//                                               every one of their positions (F32 KV cache), and N greedy
//                                               ids from BOS alone (models/lm/testdata/stories260K)
#include "llama.h"
#include <sys/resource.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

static double cpu_s() {
    rusage ru; getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
static double wall_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static void quiet(ggml_log_level, const char *, void *) {}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int j = 1; j < n; j++) if (l[j] > l[b]) b = j;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: see source\n"); return 2; }
    if (!getenv("LLREF_VERBOSE")) llama_log_set(quiet, nullptr);
    llama_backend_init();
    std::string cmd = argv[1];
    if (cmd == "quantize") {
        llama_model_quantize_params p = llama_model_quantize_default_params();
        std::string t = argv[4];
        if (t == "q4_k_m") p.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_M;
        else if (t == "q8_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
        else if (t == "q6_k") p.ftype = LLAMA_FTYPE_MOSTLY_Q6_K;
        else if (t == "q4_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
        else { fprintf(stderr, "type %s\n", t.c_str()); return 2; }
        p.nthread = 2;
        return (int)llama_model_quantize(argv[2], argv[3], &p);
    }
    llama_model_params mp = llama_model_default_params();
    llama_model *m = llama_model_load_from_file(argv[2], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab *v = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(v);
    if (cmd == "logits") { // llref logits MODEL TOKEN...: final-position logits as a JSON array
        std::vector<llama_token> prompt;
        for (int i = 3; i < argc; i++) prompt.push_back(atoi(argv[i]));
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = prompt.size() + 8; cp.n_batch = prompt.size(); cp.n_threads = cp.n_threads_batch = 1;
        llama_context *c = llama_init_from_model(m, cp);
        if (llama_decode(c, llama_batch_get_one(prompt.data(), prompt.size()))) return 1;
        const float *l = llama_get_logits_ith(c, -1);
        printf("[");
        for (int j = 0; j < nv; j++) printf("%s%.9g", j ? "," : "", l[j]);
        printf("]\n");
        return 0;
    }
    if (cmd == "golden") {
        int n = atoi(argv[3]);
        const char *text = argv[4];
        std::vector<llama_token> prompt(strlen(text) + 8);
        int nt = llama_tokenize(v, text, strlen(text), prompt.data(), prompt.size(), true, false);
        if (nt < 0) return 1;
        prompt.resize(nt);
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = std::max(nt, n) + 8; cp.n_batch = cp.n_ubatch = nt; cp.n_threads = cp.n_threads_batch = 1;
        // The engine keeps its KV cache in F32; llama.cpp's default F16
        // would add its own rounding (1e-3) to what is compared.
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        llama_context *c = llama_init_from_model(m, cp);
        llama_batch b = llama_batch_init(nt, 0, 1);
        b.n_tokens = nt;
        for (int i = 0; i < nt; i++) {
            b.token[i] = prompt[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
        }
        if (llama_decode(c, b)) return 1;
        printf("{\"prompt\": \"%s\",\n\"tokens\": [", text); // TEXT must not need JSON escapes
        for (int i = 0; i < nt; i++) printf("%s%d", i ? ", " : "", prompt[i]);
        printf("],\n\"logits\": [\n");
        for (int i = 0; i < nt; i++) {
            const float *l = llama_get_logits_ith(c, i);
            printf("[");
            for (int j = 0; j < nv; j++) printf("%s%.9g", j ? "," : "", l[j]);
            printf("]%s\n", i + 1 < nt ? "," : "");
        }
        llama_batch_free(b);
        llama_free(c);
        c = llama_init_from_model(m, cp);
        llama_token t = llama_vocab_bos(v);
        printf("],\n\"greedy\": [");
        for (int i = 0; i < n; i++) {
            if (llama_decode(c, llama_batch_get_one(&t, 1))) return 1;
            t = argmax(llama_get_logits_ith(c, -1), nv);
            printf("%s%d", i ? ", " : "", t);
        }
        printf("]}\n");
        return 0;
    }
    if (cmd == "greedy") {
        int n = atoi(argv[3]);
        std::vector<llama_token> prompt;
        for (int i = 4; i < argc; i++) prompt.push_back(atoi(argv[i]));
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = prompt.size() + n + 8; cp.n_batch = prompt.size(); cp.n_threads = cp.n_threads_batch = 1;
        llama_context *c = llama_init_from_model(m, cp);
        llama_batch b = llama_batch_get_one(prompt.data(), prompt.size());
        if (llama_decode(c, b)) return 1;
        for (int i = 0; i < n; i++) {
            llama_token t = argmax(llama_get_logits_ith(c, -1), nv);
            printf("%d%s", t, i + 1 < n ? " " : "\n");
            llama_batch one = llama_batch_get_one(&t, 1);
            if (llama_decode(c, one)) return 1;
        }
        return 0;
    }
    int threads = atoi(argv[3]), np = atoi(argv[4]), ng = atoi(argv[5]), reps = atoi(argv[6]);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = np + ng + 8; cp.n_batch = np; cp.n_ubatch = np; cp.n_threads = cp.n_threads_batch = threads;
    llama_context *c = llama_init_from_model(m, cp);
    std::vector<llama_token> prompt(np);
    for (int i = 0; i < np; i++) prompt[i] = (i * 7919 + 13) % nv;
    for (int r = 0; r < reps; r++) {
        llama_memory_clear(llama_get_memory(c), true);
        double w0 = wall_s(), c0 = cpu_s();
        if (llama_decode(c, llama_batch_get_one(prompt.data(), np))) return 1;
        double pw = wall_s() - w0, pc = cpu_s() - c0;
        w0 = wall_s(); c0 = cpu_s();
        for (int i = 0; i < ng; i++) {
            llama_token t = argmax(llama_get_logits_ith(c, -1), nv);
            if (llama_decode(c, llama_batch_get_one(&t, 1))) return 1;
        }
        double dw = wall_s() - w0, dc = cpu_s() - c0;
        printf("llama.cpp %s threads=%d prefill %.1f tok/s (%.1f per CPU-s) decode %.1f tok/s (%.1f per CPU-s)\n",
               argv[2], threads, np / pw, np / pc, ng / dw, ng / dc);
    }
    return 0;
}
