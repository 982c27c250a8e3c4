/* runner.h — a dependency-free C test runner. TEST(name) { ... } registers a test;
 * CHECK(cond, fmt, ...) records a failure and continues; REQUIRE returns from the test.
 * The runner ends with the line "N passed, N failed". Filter: ./test_core NAME-SUBSTRING (or =NAME; --list prints names). */
#ifndef FL_TEST_RUNNER_H
#define FL_TEST_RUNNER_H
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*fl_test_fn)(int *failed);
void fl_test_register(const char *name, const char *file, fl_test_fn fn);

#define TEST(name)                                                                 \
    static void test_##name(int *fl__failed);                                      \
    __attribute__((constructor)) static void fl__reg_##name(void) {                \
        fl_test_register(#name, __FILE__, test_##name);                             \
    }                                                                              \
    static void test_##name(int *fl__failed)

#define CHECK(cond, ...)                                                           \
    do { if (!(cond)) { *fl__failed = 1;                                           \
        fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define REQUIRE(cond, ...)                                                         \
    do { if (!(cond)) { CHECK(cond, __VA_ARGS__); return; } } while (0)
/* |a - b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, atol, rtol)                                               \
    CHECK(fabs((double)(a) - (double)(b)) <= (atol) + (rtol) * fabs((double)(b)),  \
          "%.9g vs %.9g", (double)(a), (double)(b))
#define CHECK_OK(expr)                                                              \
    do { fl_status fl__s = (expr); CHECK(fl__s == FL_OK, "status %d: %s", (int)fl__s, fl_last_error()); } while (0)
#define REQUIRE_OK(expr)                                                            \
    do { fl_status fl__s = (expr); REQUIRE(fl__s == FL_OK, "status %d: %s", (int)fl__s, fl_last_error()); } while (0)
#endif
