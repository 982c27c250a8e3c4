/* bench_mode.h — the MODE argument of the benchmark programs (bench_attn, bench_fp8_gemm): comma-separated
 * words from a fixed list; returns bit i for words[i]. An empty MODE is none; any other word ends the program
 * with a message naming the valid ones. */
#ifndef FL_BENCH_MODE_H
#define FL_BENCH_MODE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned bench_mode(const char *prog, const char *mode, const char *const *words, int nwords) {
    unsigned bits = 0;
    for (const char *p = mode; *p;) {
        const size_t len = strcspn(p, ",");
        int i = 0;
        while (i < nwords && !(strlen(words[i]) == len && !strncmp(p, words[i], len))) i++;
        if (i == nwords) {
            fprintf(stderr, "%s: unknown mode '%.*s' (expected comma-separated words from:", prog, (int)len, p);
            for (int j = 0; j < nwords; j++) fprintf(stderr, " %s", words[j]);
            fprintf(stderr, ")\n");
            exit(2);
        }
        bits |= 1u << i;
        p += len + (p[len] == ',');
    }
    return bits;
}
#endif
