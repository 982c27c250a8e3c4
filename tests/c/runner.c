/* runner.c — main() of build/test_core: runs every registered test (or those whose name
 * contains argv[1]) and prints "N passed, N failed". Exit status 1 on any failure. */
#include "runner.h"
#include <stdlib.h>
#include <time.h>

#define MAX_TESTS 1024
typedef struct { const char *name, *file; fl_test_fn fn; } test_entry;
static test_entry tests[MAX_TESTS];
static int ntests;

void fl_test_register(const char *name, const char *file, fl_test_fn fn) {
    if (ntests < MAX_TESTS) { tests[ntests].name = name; tests[ntests].file = file; tests[ntests].fn = fn; ntests++; }
}

static int cmp(const void *a, const void *b) {
    const test_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
    qsort(tests, (size_t)ntests, sizeof tests[0], cmp);
    int passed = 0, failed = 0;
    for (int i = 0; i < ntests; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
        int f = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn(&f);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("%s %-48s %8.1f ms\n", f ? "FAIL" : "ok  ", tests[i].name, ms);
        fflush(stdout);
        if (f) failed++; else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
