/* test_par.c — core/cpu/par.h: a region is entered only with a team of two or more; serially (one thread allowed, the
 * condition false, or inside another region) the same statement runs with no parallel construct open (omp_get_level()
 * stays 0: libgomp made no team) and gives what the team gives: each iteration once, a block's orphaned `omp for`
 * over the whole range, `single` once, `barrier` passed, reductions combined, thread 0 of 1. */
#include "runner.h"
#include "cpu/par.h"
#include <omp.h>
#include <stdlib.h>

#define PN 1000

/* One region of each macro at the thread count given; what each saw. */
typedef struct {
    int hits[PN];       /* FL_PAR_FOR: times each iteration ran */
    int blk[PN];        /* FL_PARALLEL's orphaned omp for */
    int singles, levels_seen, max_tid, nthr_seen;
    long long sum;      /* FL_PAR_FOR reduction(+) */
    float smax;         /* FL_PAR_FOR_SIMD reduction(max) */
} par_run;

static void run_regions(par_run *r, bool cond) {
    memset(r, 0, sizeof *r);
    int *hits = r->hits, *blk = r->blk;
    long long sum = 0;
    int singles = 0, lv = 0, mt = 0, nt = 0;
    FL_PAR_FOR(cond, schedule(static) reduction(+ : sum),
    for (int i = 0; i < PN; i++) {
        FL_PRAGMA(omp atomic)
        hits[i]++;
        sum += i;
    });
    FL_PARALLEL(cond, ,
    {
        const int me = omp_get_thread_num(), n = omp_get_num_threads();
        FL_PRAGMA(omp critical)
        {
            if (omp_get_level() > lv) lv = omp_get_level();
            if (me > mt) mt = me;
            if (n > nt) nt = n;
        }
        FL_PRAGMA(omp for schedule(static))
        for (int i = 0; i < PN; i++) blk[i]++;
        FL_PRAGMA(omp single)
        singles++;
        FL_PRAGMA(omp barrier)
        ;
    });
    float m = 0.0f;
    float v[PN];
    for (int i = 0; i < PN; i++) v[i] = (float)((i * 37) % PN);
    FL_PAR_FOR_SIMD(cond, reduction(max : m),
    for (int i = 0; i < PN; i++) m = v[i] > m ? v[i] : m;);
    r->sum = sum;
    r->singles = singles;
    r->levels_seen = lv;
    r->max_tid = mt;
    r->nthr_seen = nt;
    r->smax = m;
}

static void check_results(int *fl__failed, const par_run *r, const char *what) {
    int badh = 0, badb = 0;
    for (int i = 0; i < PN; i++) {
        badh += r->hits[i] != 1;
        badb += r->blk[i] != 1;
    }
    CHECK(badh == 0, "%s: %d iterations not run exactly once", what, badh);
    CHECK(badb == 0, "%s: %d iterations of the block's omp for not run exactly once", what, badb);
    CHECK(r->sum == (long long)PN * (PN - 1) / 2, "%s: sum %lld", what, r->sum);
    CHECK(r->singles == 1, "%s: single ran %d times", what, r->singles);
    CHECK(r->smax == (float)(PN - 1), "%s: max %g", what, (double)r->smax);
}

TEST(par_serial_regions_open_no_team) {
    const int saved = omp_get_max_threads();
    par_run *r = malloc(sizeof *r);
    REQUIRE(r, "out of memory");
    omp_set_num_threads(1);   /* OMP_NUM_THREADS=1: libgomp would make a team of one per region */
    CHECK(!fl_par_team(true), "a team with one thread allowed");
    run_regions(r, true);
    check_results(fl__failed, r, "one thread");
    CHECK(r->levels_seen == 0 && r->nthr_seen == 1 && r->max_tid == 0, "one thread: level %d, %d threads, tid %d",
          r->levels_seen, r->nthr_seen, r->max_tid);
    omp_set_num_threads(2);
    CHECK(!fl_par_team(false), "a team where the condition is false");
    run_regions(r, false);   /* the old `if` clause false */
    check_results(fl__failed, r, "condition false");
    CHECK(r->levels_seen == 0 && r->nthr_seen == 1, "condition false: level %d, %d threads", r->levels_seen,
          r->nthr_seen);
    CHECK(fl_par_team(true), "no team with two threads");
    run_regions(r, true);    /* a team of two: the same results */
    check_results(fl__failed, r, "two threads");
    CHECK(r->levels_seen == 1 && r->nthr_seen == 2 && r->max_tid == 1, "two threads: level %d, %d threads, tid %d",
          r->levels_seen, r->nthr_seen, r->max_tid);
    omp_set_num_threads(saved);
    free(r);
}

/* Inside another region (here the test's own, a team of two), every region runs serially on each thread: each
 * thread's call covers its whole range, and opens no nested region. */
TEST(par_nested_regions_serial) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    int outer = 0, wrong = 0, team = 0;
    #pragma omp parallel reduction(+ : outer, wrong, team)
    {
        team += fl_par_team(true);
        int *hits = calloc(PN, sizeof(int));
        if (hits) {
            long long sum = 0;
            FL_PAR_FOR(true, schedule(static) reduction(+ : sum),
            for (int i = 0; i < PN; i++) {
                hits[i]++;
                sum += i;
                if (omp_get_level() != 1) wrong++;
            });
            for (int i = 0; i < PN; i++) wrong += hits[i] != 1;
            wrong += sum != (long long)PN * (PN - 1) / 2;
            free(hits);
        } else {
            wrong++;
        }
        outer++;
    }
    CHECK(team == 0, "%d threads would open a nested team", team);
    CHECK(wrong == 0, "%d wrong counts or levels in the nested calls", wrong);
    CHECK(outer >= 1, "the outer region ran on %d threads", outer);
    omp_set_num_threads(saved);
}

/* Teams libgomp sizes below omp_get_max_threads() (stop 105): with max-active-levels 0 every region gets one thread,
 * with dynamic teams libgomp may give one where the load average reaches the cores; both run serially (no team of
 * one opened: level 0 in the body) with the team's results. OMP_THREAD_LIMIT=1 is the environment's alone
 * (omp_get_thread_limit has no setter): omp_team_spec runs a child under it. */
TEST(par_teams_libgomp_would_shrink_run_serially) {
    const int saved = omp_get_max_threads(), saved_levels = omp_get_max_active_levels();
    const int saved_dyn = omp_get_dynamic();
    par_run *r = malloc(sizeof *r);
    REQUIRE(r, "out of memory");
    omp_set_num_threads(2);
    omp_set_max_active_levels(0);
    CHECK(!fl_par_team(true), "a team with max-active-levels 0");
    run_regions(r, true);
    check_results(fl__failed, r, "max-active-levels 0");
    CHECK(r->levels_seen == 0 && r->nthr_seen == 1, "max-active-levels 0: level %d, %d threads", r->levels_seen,
          r->nthr_seen);
    omp_set_max_active_levels(saved_levels > 0 ? saved_levels : 1);
    omp_set_dynamic(1);
    CHECK(!fl_par_team(true), "a team with dynamic teams on");
    run_regions(r, true);
    check_results(fl__failed, r, "dynamic");
    CHECK(r->levels_seen == 0 && r->nthr_seen == 1, "dynamic: level %d, %d threads", r->levels_seen, r->nthr_seen);
    omp_set_dynamic(saved_dyn);
    omp_set_max_active_levels(saved_levels);
    CHECK(fl_par_team(true), "no team with two threads after");
    omp_set_num_threads(saved);
    free(r);
}
