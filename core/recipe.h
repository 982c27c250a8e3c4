/* recipe.h — the FP8 recipe proper (docs/fp8-spec.md §2–§4): from the resolved recipe settings, the
 * configuration of an FP8 layer's three tensor roles (forward input, weight, output gradient) — format,
 * scaling rule, power-of-two rounding, margin, amax history length and algorithm, interval — plus which
 * GEMMs stay in high precision and the scaling granularity. The state those roles then carry is
 * scaling.h's; the layer that uses them is fp8_linear.h's.
 *   te     delayed scaling: input and weight E4M3, gradient E5M2 (HYBRID) or E4M3; every field of
 *          the recipe applies to all three roles; override_linear_precision → hp.
 *   ao     current scaling: tensorwise (E4M3/E4M3/E5M2), rowwise (all E4M3, power-of-two scales,
 *          per-row), rowwise_with_gw_hp (rowwise, wgrad in high precision).
 *   msamp  power-of-two scales: input and gradient delayed with a 16-step max window, the weight
 *          current; E4M3/E4M3/E5M2. */
#ifndef FL_RECIPE_H
#define FL_RECIPE_H
#include <stdbool.h>
#include "settings.h"     /* fl_fp8_backend, fl_recipe_format, fl_ao_config: the settings a recipe reads */
#include "fp8_linear.h"   /* fl_fp8_role, fl_fp8_granularity */
#include "scaling.h"

/* The resolved settings a recipe reads (fp8.kwargs.resolve's fp8_recipe). Fields another backend
 * owns are ignored. */
typedef struct {
    fl_fp8_backend backend;
    fl_recipe_format fp8_format;         /* te */
    int margin;                          /* te, msamp */
    int interval;                        /* te */
    int amax_history_len;                /* te */
    fl_amax_algo amax_compute_algo;      /* te */
    bool override_linear_precision[3];   /* te: fprop, dgrad, wgrad */
    fl_ao_config ao_config;              /* ao */
} fl_recipe;

/* The recipe a set of settings gives: backend and fields from s, each one not given at its default
 * in the settings table (settings.h). */
void fl_recipe_from_settings(fl_recipe *r, const fl_settings *s);
/* The recipe of backend b with every field at its default. */
void fl_recipe_defaults(fl_recipe *r, fl_fp8_backend b);

/* One role's configuration: fl_scaling_init's arguments. */
typedef struct {
    fl_dtype fmt;                /* FL_E4M3 or FL_E5M2 */
    fl_scale_rule rule;
    bool pow2;
    int margin;
    fl_amax_algo algo;
    int amax_history_len;        /* delayed rule: ring length; 1 for current */
    int interval;
    int warmup;                  /* delayed rule: updates cast in time before the history is used (MS-AMP); 0: none */
} fl_role_config;

typedef struct {
    fl_role_config role[FL_NROLES];
    bool hp[3];                  /* fprop, dgrad, wgrad in high precision */
    fl_fp8_granularity gran;
} fl_layer_config;

/* The layer configuration recipe r gives. Checks the backend and the choices; the numeric ranges
 * are fl_scaling_init's. */
fl_status fl_recipe_layer_config(const fl_recipe *r, fl_layer_config *out);

#endif
