/* fault.c — the test hook of fault.h: FP8LAB_FAULT_DIST parsed once into a few (site, from, to, rank) entries, each
 * with its own count of calls. */
#include "fault.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAULTS 8

static struct { char site[16]; long from, to, calls; int rank; } faults[MAX_FAULTS];
static int nfaults = -1;   /* -1: not read yet */

/* the sites fault.h names: another name is a hook that would never fire */
static const char *const SITES[] = { "allreduce", "iallreduce", "wait", "ddp_grad", "broadcast", "allgather",
                                     "reduce_scatter", "barrier", "ddp_pack", NULL };
static bool known_site(const char *s) {
    for (int i = 0; SITES[i]; i++) if (!strcmp(s, SITES[i])) return true;
    return false;
}

/* The digits at s as a number (*end past them), or -2 where s holds none: strtol alone read '@' with no rank as rank 0
 * and '@-1' as every process, and took a sign or blanks (stop 105) */
static long number(const char *s, char **end) {
    *end = (char *)s;
    if (*s < '0' || *s > '9') return -2;
    errno = 0;
    const long v = strtol(s, end, 10);
    return errno ? -2 : v;
}

static void parse(void) {
    nfaults = 0;
    const char *v = getenv("FP8LAB_FAULT_DIST");
    if (!v) return;
    while (*v) {
        size_t len = strcspn(v, ",");
        char e[64];
        if (len < sizeof e) {
            memcpy(e, v, len);
            e[len] = 0;
            char *colon = strchr(e, ':');
            if (colon && (colon == e || (size_t)(colon - e) >= sizeof faults[0].site)) colon = NULL;
            if (colon) {
                *colon = 0;
                if (!known_site(e)) *colon = ':', colon = NULL;
            }
            if (colon) {
                char *end = colon + 1;
                long from = number(colon + 1, &end), to = from;
                if (*end == '-') to = number(end + 1, &end);
                long rank = -1;
                if (*end == '@') rank = number(end + 1, &end);
                if (*end == 0 && from >= 1 && to >= from && rank >= -1 && rank <= INT_MAX && nfaults < MAX_FAULTS) {
                    strcpy(faults[nfaults].site, e);
                    faults[nfaults].from = from;
                    faults[nfaults].to = to;
                    faults[nfaults].rank = (int)rank;
                    nfaults++;
                    e[0] = 0;
                }
            }
        }
        if (len >= sizeof e || e[0]) {   /* a hook that does not take is said, not ignored */
            fprintf(stderr, "fp8lab: FP8LAB_FAULT_DIST: cannot read the entry '%.*s' (SITE:N[-M][@RANK], SITE one of ",
                    (int)len, v);
            for (int i = 0; SITES[i]; i++) fprintf(stderr, "%s%s", i ? ", " : "", SITES[i]);
            fprintf(stderr, "; at most %d entries); not used\n", MAX_FAULTS);
        }
        v += len;
        if (*v == ',') v++;
    }
}

bool fl_fault(const char *site, int rank) {
    if (nfaults < 0) parse();
    bool hit = false;
    for (int i = 0; i < nfaults; i++) {
        if (strcmp(faults[i].site, site) != 0 || (faults[i].rank >= 0 && faults[i].rank != rank)) continue;
        long c = ++faults[i].calls;
        if (c >= faults[i].from && c <= faults[i].to) hit = true;
    }
    return hit;
}
