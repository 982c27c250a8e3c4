/* runner.c — main() of build/test_core: runs every registered test (or those whose name
 * contains argv[1]; "=NAME" runs exactly that one) and prints "N passed, N failed". Exit status 1 on any
 * failure. `test_core --list [FILTER]` prints the names only. */
#include "runner.h"
#include <stdbool.h>
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
    bool list = argc > 1 && !strcmp(argv[1], "--list");
    const char *filter = argc > 1 + list ? argv[1 + list] : NULL;
    int passed = 0, failed = 0;
    for (int i = 0; i < ntests; i++) {
        if (filter && (filter[0] == '=' ? strcmp(tests[i].name, filter + 1) : !strstr(tests[i].name, filter))) continue;
        if (list) { printf("%s\n", tests[i].name); continue; }
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
    if (list) return 0;
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
