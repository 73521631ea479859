// Cross-check of Phaseless's GGUF tensor codecs against ggml, built outside the repository;
// models/lm/gguf/ggmlcheck compares its output with ours (docs/engine.md).
//   check dump  model.gguf out.bin   : every tensor dequantized by ggml's to_float, concatenated
//   check ref   out.bin              : random rows quantized by ggml's *_ref quantizers: type, nbytes, raw, ggml-dequantized floats
//   check bench model.gguf threads reps : batch-1 ggml_mul_mat over every 2-D tensor except token_embd, ms per pass
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include "ggml.h"
#ifdef BENCH
#include "ggml-cpu.h"
#endif
#include "gguf.h"

static uint64_t lcg = 88172645463325252ull;
static float frand(void) { lcg = lcg * 6364136223846793005ull + 1442695040888963407ull; return ((int64_t)(lcg >> 11) / (double)(1ull << 52)) - 1.0; }

static void *read_tensor(FILE *f, struct gguf_context *g, int i) {
    size_t n = gguf_get_tensor_size(g, i);
    void *buf = malloc(n);
    fseek(f, gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i), SEEK_SET);
    if (fread(buf, 1, n, f) != n) { perror("fread"); exit(1); }
    return buf;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "dump")) {
        struct ggml_context *meta = NULL;
        struct gguf_init_params p = { .no_alloc = true, .ctx = &meta };
        struct gguf_context *g = gguf_init_from_file(argv[2], p);
        if (!g) { fprintf(stderr, "ggml cannot read %s\n", argv[2]); return 1; }
        FILE *f = fopen(argv[2], "rb"), *o = fopen(argv[3], "wb");
        for (int i = 0; i < gguf_get_n_tensors(g); i++) {
            struct ggml_tensor *t = ggml_get_tensor(meta, gguf_get_tensor_name(g, i));
            int64_t n = ggml_nelements(t);
            void *raw = read_tensor(f, g, i);
            float *y = malloc(n * sizeof(float));
            if (t->type == GGML_TYPE_F32) memcpy(y, raw, n * sizeof(float));
            else ggml_get_type_traits(t->type)->to_float(raw, y, n);
            fwrite(y, sizeof(float), n, o);
            fprintf(stderr, "%-28s %-6s %lld values\n", t->name, ggml_type_name(t->type), (long long)n);
            free(raw); free(y);
        }
        fclose(o);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "ref")) {
        enum ggml_type types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
            GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_BF16, GGML_TYPE_F16 };
        FILE *o = fopen(argv[2], "wb");
        const int n = 4096;
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            for (int i = 0; i < n; i++) x[i] = frand() * (1 + i / 512);
            size_t nb = ggml_row_size(types[k], n);
            void *q = malloc(nb);
            ggml_get_type_traits(types[k])->from_float_ref(x, q, n);
            ggml_get_type_traits(types[k])->to_float(q, y, n);
            uint32_t hdr[2] = { types[k], (uint32_t)nb };
            fwrite(hdr, 4, 2, o); fwrite(q, 1, nb, o); fwrite(y, 4, n, o); fwrite(x, 4, n, o);
            free(q);
        }
        fclose(o);
        return 0;
    }
#ifdef BENCH
    if (argc >= 5 && !strcmp(argv[1], "bench")) {
        int threads = atoi(argv[3]), reps = atoi(argv[4]);
        struct ggml_context *meta = NULL;
        struct gguf_init_params p = { .no_alloc = true, .ctx = &meta };
        struct gguf_context *g = gguf_init_from_file(argv[2], p);
        FILE *f = fopen(argv[2], "rb");
        size_t total = 0;
        int nt = gguf_get_n_tensors(g);
        for (int i = 0; i < nt; i++) total += gguf_get_tensor_size(g, i) + 4096 * 4 + 1024;
        struct ggml_init_params ip = { .mem_size = total + 64 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false };
        struct ggml_context *ctx = ggml_init(ip);
        struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, 4096, false);
        size_t bytes = 0;
        for (int i = 0; i < nt; i++) {
            struct ggml_tensor *mt = ggml_get_tensor(meta, gguf_get_tensor_name(g, i));
            if (ggml_n_dims(mt) < 2 || !strcmp(mt->name, "token_embd.weight")) continue;
            struct ggml_tensor *w = ggml_new_tensor_2d(ctx, mt->type, mt->ne[0], mt->ne[1]);
            void *raw = read_tensor(f, g, i);
            memcpy(w->data, raw, ggml_nbytes(w));
            free(raw);
            bytes += ggml_nbytes(w);
            struct ggml_tensor *x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, mt->ne[0]);
            for (int j = 0; j < mt->ne[0]; j++) ((float *)x->data)[j] = frand();
            ggml_build_forward_expand(gf, ggml_mul_mat(ctx, w, x));
        }
        ggml_graph_compute_with_ctx(ctx, gf, threads); // warm up
        double best = 1e9;
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        for (int r = 0; r < reps; r++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            ggml_graph_compute_with_ctx(ctx, gf, threads);
            clock_gettime(CLOCK_MONOTONIC, &b);
            double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
            if (ms < best) best = ms;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9;
        printf("ggml %s: %zu weight bytes, best %.3f ms per pass (%d threads) = %.2f GB/s; %.2f GB per CPU-second\n", argv[2], bytes, best, threads, bytes / best / 1e6, bytes * (double)reps / cpu / 1e9);
        return 0;
    }
#endif
    fprintf(stderr, "usage: check dump|ref|bench ...\n");
    return 2;
}
