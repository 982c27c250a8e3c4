/* settings.h — the one table of fp8lab's settings. Each row says everything about one setting: its
 * name and Accelerate alias, type, choices or range, default, environment variable, config-file place,
 * launch flag, the FP8 backends it belongs to, its help line and the question `fp8lab config` asks.
 * The YAML loader (config.c), launch flags, FP8LAB_* variables, the Lua kwargs handlers and
 * fp8.kwargs.resolve, `fp8lab config` and help() all read this table (Lua through lua/l_settings.c);
 * one parser checks a value wherever it comes from, and one set of messages says what was expected.
 *
 * Adding a setting is adding a row (and its enum member): it then appears in its kwargs handler, the
 * config file, the launch flags, the environment, the questionnaire and help(). The row
 * FL_SET_SCHEMA_SELFTEST proves it: compiled in, visible only when FP8LAB_SCHEMA_SELFTEST=1 is set when
 * the table is first read (tests/spec/settings_spec.lua starts a child process with it). */
#ifndef FL_SETTINGS_H
#define FL_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "scaling.h"   /* fl_amax_algo (amax_compute_algo's choices), FL_HISTORY_MAX */

/* The settings, in the order help, flags, questions and written files show them. */
typedef enum {
    FL_SET_MIXED_PRECISION = 0,
    FL_SET_BACKEND,
    FL_SET_FP8_FORMAT,
    FL_SET_MARGIN,
    FL_SET_INTERVAL,
    FL_SET_AMAX_HISTORY_LEN,
    FL_SET_AMAX_COMPUTE_ALGO,
    FL_SET_OVERRIDE_LINEAR_PRECISION,
    FL_SET_USE_AUTOCAST_DURING_EVAL,
    FL_SET_OPT_LEVEL,
    FL_SET_AO_CONFIG,
    FL_SET_MODULE_FILTER_FUNC,
    FL_SET_PAD_INNER_DIM,
    FL_SET_ENABLE_FSDP_FLOAT8_ALL_GATHER,
    FL_SET_NUM_PROCESSES,
    FL_SET_USE_CPU,
    FL_SET_GRADIENT_ACCUMULATION_STEPS,
    FL_SET_SCHEMA_SELFTEST,   /* test only: hidden unless FP8LAB_SCHEMA_SELFTEST=1 */
    FL_SET_COUNT
} fl_setting_id;

/* Choice values: the stored int is the index into the row's `choices`. */
typedef enum { FL_MP_NO = 0, FL_MP_FP16, FL_MP_BF16, FL_MP_FP8, FL_MP_COUNT } fl_mixed_precision;
typedef enum { FL_BACKEND_MSAMP = 0, FL_BACKEND_TE, FL_BACKEND_AO, FL_BACKEND_COUNT } fl_fp8_backend;
typedef enum { FL_RECIPE_HYBRID = 0, FL_RECIPE_E4M3, FL_RECIPE_FORMAT_COUNT } fl_recipe_format;
typedef enum { FL_OPT_O1 = 0, FL_OPT_O2, FL_OPT_O3, FL_OPT_LEVEL_COUNT } fl_opt_level;
/* torchao's Float8LinearConfig recipes. */
typedef enum { FL_AO_TENSORWISE = 0, FL_AO_ROWWISE, FL_AO_ROWWISE_GW_HP, FL_AO_CONFIG_COUNT } fl_ao_config;
/* override_linear_precision is stored as a bit mask of the GEMMs kept in high precision. */
enum { FL_OVERRIDE_FPROP = 1, FL_OVERRIDE_DGRAD = 2, FL_OVERRIDE_WGRAD = 4 };

typedef enum {
    FL_SETTING_CHOICE,   /* one of `choices`, any case */
    FL_SETTING_INT,      /* an integer in min..max */
    FL_SETTING_BOOL,
    FL_SETTING_BOOL3,    /* three booleans (fprop, dgrad, wgrad), stored as FL_OVERRIDE_* bits */
    FL_SETTING_FUNC,     /* a Lua function: kwargs handlers only, no stored value */
    FL_SETTING_TYPE_COUNT
} fl_setting_type;
extern const char *const fl_setting_type_names[];   /* "choice", "int", "bool", "bool3", "function" */

/* Where a config file holds a setting. */
typedef enum { FL_FILE_NONE = 0, FL_FILE_TOP, FL_FILE_FP8_CONFIG } fl_setting_place;

typedef struct {
    const char *name;            /* kwarg, config key, field of resolved settings */
    const char *alias;           /* the name Accelerate's questionnaire writes, or NULL */
    fl_setting_type type;
    const char *const *choices;  /* CHOICE: NULL-terminated names, index = stored value */
    const char *const *choice_help;   /* CHOICE: a few words per choice, or NULL */
    int min, max;                /* INT: accepted range (max >= FL_SETTING_UNBOUNDED: no upper bound) */
    int def;                     /* the default, stored as a value is (FUNC: none) */
    const char *refused;         /* CHOICE: a value refused with a reason of its own, or NULL */
    const char *refused_why;
    const char *unsupported;     /* a setting recognised by name and refused whatever its value, with this
                                  * reason (Accelerate has it; fp8lab has nothing it could change), or NULL */
    const char *env;             /* FP8LAB_* variable that carries it, or NULL */
    const char *flag;            /* `fp8lab launch`/`fp8lab config` flag without "--", or NULL */
    fl_setting_place file;       /* where config.yaml holds it (FL_FILE_NONE: not in the file) */
    unsigned backends;           /* bit (1 << fl_fp8_backend) per FP8 recipe it belongs to; 0: none */
    bool in_fp8_recipe_kwargs;   /* also a key of FP8RecipeKwargs, Accelerate's original handler */
    const char *help;            /* one line for help(), launch -h and the handlers */
    const char *question;        /* what `fp8lab config` asks, or NULL when it does not ask */
} fl_setting;

#define FL_SETTING_UNBOUNDED 1000000000

/* Row k, or NULL when k is out of range or the row is hidden (the self-test row without
 * FP8LAB_SCHEMA_SELFTEST=1 at the first call). */
const fl_setting *fl_setting_info(fl_setting_id k);
/* A name or alias → its row; -1 when none (hidden rows included in "none"). */
int fl_setting_find(const char *name);

/* How a text value came: a flag, variable or answer (surrounding blanks ignored; booleans
 * true/false, yes/no, on/off, y/n, t/f, 1/0 in any case), or a YAML scalar, plain or quoted (YAML 1.1
 * booleans; a quoted number or boolean is a string). */
typedef enum { FL_FROM_TEXT = 0, FL_FROM_YAML_PLAIN, FL_FROM_YAML_QUOTED } fl_setting_from;

/* The one parser: text → stored value of setting k. On failure writes why ("expected …, got …") to
 * why[n] and returns false. */
bool fl_setting_parse(fl_setting_id k, const char *s, size_t len, fl_setting_from from, int *out, char *why, size_t n);
/* A number given as a number (a Lua number): an INT setting takes an integral value in range. */
bool fl_setting_check_number(fl_setting_id k, double v, int *out, char *why, size_t n);
/* The message for a value of the wrong kind, `got` already rendered: "expected …, got <got>". */
void fl_setting_mismatch(fl_setting_id k, const char *got, char *why, size_t n);
/* What setting k takes, in words ("one of te, ao", "an integer in 0..64", ...). */
const char *fl_setting_expected(fl_setting_id k, char *buf, size_t n);
/* Text form of a stored value ("te", "3", "true", "false,false,true"), as a flag or variable takes it. */
const char *fl_setting_format(fl_setting_id k, int v, char *buf, size_t n);
/* Text for a message: in quotes q (values '"', keys '\''), non-printable bytes as \xNN, long ones cut. */
const char *fl_setting_quote(const char *s, size_t len, char q, char *buf, size_t n);
/* The one boolean reader: 1, 0, or -1 when the text is not a boolean where it came from. */
int fl_setting_bool(const char *s, size_t len, fl_setting_from from);
/* The words besides true/false that a flag's or variable's boolean takes, for messages:
 * "yes/no, on/off, y/n, t/f, 1/0, in any case". */
extern const char fl_setting_bool_words[];

/* A set of setting values: which are given, and their stored values. */
typedef struct {
    uint32_t set;                /* bit k: setting k was given */
    int value[FL_SET_COUNT];
} fl_settings;
_Static_assert(FL_SET_COUNT <= 32, "fl_settings.set holds one bit per setting");

void fl_settings_init(fl_settings *s);
bool fl_settings_has(const fl_settings *s, fl_setting_id k);
/* The value given, or the row's default. */
int fl_settings_get(const fl_settings *s, fl_setting_id k);
/* Sets k to v (a stored value the parser produced). */
void fl_settings_put(fl_settings *s, fl_setting_id k, int v);
/* Sets k from a flag, variable or answer; on failure s is unchanged and the message reads
 * "origin: expected …" (origin defaults to the setting's name). */
fl_status fl_settings_set_text(fl_settings *s, fl_setting_id k, const char *text, const char *origin);

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions, case-folded) between
 * two names of at most 64 bytes; SIZE_MAX when either is longer (not a name, not compared). */
size_t fl_edit_distance(const char *a, const char *b);
/* The one "did you mean": the candidate nearest to `word` when it is a plausible typo (edit distance
 * up to a quarter of the word's length, 1..3), else one of which the other is a prefix (both at least 4
 * bytes: "amax_history" → "amax_history_len"); NULL when none is close. */
const char *fl_suggest(const char *word, const char *const *cands, size_t n);

#endif
