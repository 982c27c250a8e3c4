/* bench_par.c — the cost of one tiny parallel region (8 iterations of an add), opened the old way (`#pragma omp
 * parallel for if (...)`: libgomp makes a team each time, malloc'ed and freed where it is a team of one) and through
 * core/cpu/par.h's FL_PAR_FOR (serial where the team would be one), with the `if` condition true and false. CPU time of
 * the process (getrusage), so that other processes' load on a shared machine counts less (docs/performance.md,
 * stop 104). Build and run:
 *   cc -O2 -fopenmp -Icore scripts/bench_par.c -o /tmp/bench_par && OMP_NUM_THREADS=1 /tmp/bench_par */
#include "cpu/par.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#define REPS 20000

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static float a[8], b[8];

__attribute__((noinline)) static void old_region(int cond) {
    #pragma omp parallel for if (cond) schedule(static)
    for (int i = 0; i < 8; i++) a[i] += b[i];
}

__attribute__((noinline)) static void new_region(int cond) {
    FL_PAR_FOR(cond, schedule(static),
    for (int i = 0; i < 8; i++) a[i] += b[i];);
}

int main(void) {
    for (int i = 0; i < 8; i++) b[i] = (float)i;
    static const char *names[] = { "old #pragma omp parallel", "FL_PAR_FOR" };
    for (int rep = 0; rep < 3; rep++)
        for (int cond = 1; cond >= 0; cond--)
            for (int k = 0; k < 2; k++) {
                old_region(cond); new_region(cond);   /* warm */
                const double t0 = cpu_s();
                for (int r = 0; r < REPS; r++) k ? new_region(cond) : old_region(cond);
                const double t = cpu_s() - t0;
                printf("threads %d  if %-5s  %-26s %8.1f ns CPU per region\n", omp_get_max_threads(),
                       cond ? "true" : "false", names[k], 1e9 * t / REPS);
                fflush(stdout);
            }
    return a[3] == 12345.0f;
}
