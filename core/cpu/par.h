/* par.h — the core's OpenMP parallel regions: entered only with a team of two or more threads, else run serially.
 *
 * libgomp keeps a finished team for the next region only when it had two or more threads; a region that runs on one
 * thread (OMP_NUM_THREADS=1, its `if` clause false, or opened inside another region) gets a team malloc'ed and freed
 * each time, and where that malloc fails libgomp prints "libgomp: Out of memory allocating N bytes" and ends the
 * process with exit(1) (docs/robustness.md, stop 104). So every region of core/ and lua/ is written with one of these
 * macros, which decide the team first and run the same statement without any `parallel` construct when it would be
 * one thread. `scripts/check-omp.sh` (run by `make test`) fails on a bare `#pragma omp parallel` anywhere else.
 *
 *   FL_PAR_FOR(cond, clauses, for-loop);        #pragma omp parallel for clauses      (cond: the old `if` clause)
 *   FL_PAR_FOR_SIMD(cond, clauses, for-loop);   #pragma omp parallel for simd schedule(static) clauses;
 *                                               serially `#pragma omp simd clauses` (the same lanes as a team of one)
 *   FL_PARALLEL(cond, clauses, { block });      #pragma omp parallel clauses
 *
 * The statement is a macro argument, so a pragma inside it is written FL_PRAGMA(omp simd) and it holds no #if.
 * Serially, a block's orphaned constructs bind to no team: `omp for schedule(static)` runs the whole range,
 * `single` runs, `barrier` returns, omp_get_thread_num() is 0 and omp_get_num_threads() 1, without allocating
 * (a dynamic schedule, `sections` or `ordered` would allocate a work share: a block must not hold one).
 * A reduction variable is updated in place serially, so it must start at its operator's identity (0 for +, false
 * for ||, a value no element exceeds for max), as every region's does. */
#ifndef FL_PAR_H
#define FL_PAR_H
#include <stdbool.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FL_PRAGMA(x) _Pragma(#x)

/* Whether a region with this `if` condition would run on a team of two or more: never inside another region
 * (active or not: nested teams are never kept), never with one thread allowed. libgomp sizes a team from more than
 * omp_get_max_threads() (stop 105, docs/robustness.md): OMP_THREAD_LIMIT=1 and OMP_MAX_ACTIVE_LEVELS=0 give every
 * region one thread with OMP_NUM_THREADS=2 (both honoured here: serial), and with OMP_DYNAMIC=true libgomp takes
 * one thread wherever the 15-minute load average reaches the cores, a size no caller can know beforehand: no team
 * then (fp8lab's host turns dynamic teams off at its start, saying so, lua/main.c). Each is an ICV read. */
static inline bool fl_par_team(bool cond) {
#ifdef _OPENMP
    return cond && omp_get_level() == 0 && omp_get_max_threads() > 1 && omp_get_thread_limit() > 1 &&
           omp_get_max_active_levels() > 0 && !omp_get_dynamic();
#else
    (void)cond;
    return false;
#endif
}

#define FL_PAR_FOR(cond, clauses, ...) do { \
        if (fl_par_team(cond)) { FL_PRAGMA(omp parallel for clauses) __VA_ARGS__ } \
        else { __VA_ARGS__ } \
    } while (0)

#define FL_PAR_FOR_SIMD(cond, clauses, ...) do { \
        if (fl_par_team(cond)) { FL_PRAGMA(omp parallel for simd schedule(static) clauses) __VA_ARGS__ } \
        else { FL_PRAGMA(omp simd clauses) __VA_ARGS__ } \
    } while (0)

#define FL_PARALLEL(cond, clauses, ...) do { \
        if (fl_par_team(cond)) { FL_PRAGMA(omp parallel clauses) __VA_ARGS__ } \
        else { __VA_ARGS__ } \
    } while (0)

#endif
