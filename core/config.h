/* config.h — fp8lab's settings file, an Accelerate-style config.yaml: read with libyaml's event
 * parser (bounded: size, depth, node count; anchors and aliases rejected) into a plain struct,
 * every key validated with file:line:column messages, and written back atomically.
 *
 * One table describes every setting (name, Accelerate alias, launch flag, environment variable,
 * type, choices, range, default, the FP8 backends it matters to); the loader, the launch-flag
 * checks (fl_config_set) and the writer all read it, so a value means the same wherever it comes
 * from. Accelerate's own top-level keys (compute_environment, deepspeed_config, ...) are accepted
 * and reported once in a notice as meaning nothing here. */
#ifndef FL_CONFIG_H
#define FL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "error.h"
#include "scaling.h"   /* fl_amax_algo */

#define FL_CONFIG_MAX_BYTES (1 << 20)   /* larger files are refused before parsing */
#define FL_CONFIG_MAX_DEPTH 32          /* nesting of mappings/sequences */
#define FL_CONFIG_MAX_NODES 100000      /* scalars + collections in one file */
#define FL_CONFIG_MAX_NOTICES 4

/* The settings fp8lab reads, in the order docs and writers show them. Append-only. */
typedef enum {
    FL_CFG_MIXED_PRECISION = 0,
    FL_CFG_NUM_PROCESSES,
    /* the keys below live in the `fp8_config:` block */
    FL_CFG_BACKEND,
    FL_CFG_FP8_FORMAT,
    FL_CFG_MARGIN,
    FL_CFG_INTERVAL,
    FL_CFG_AMAX_HISTORY_LEN,
    FL_CFG_AMAX_COMPUTE_ALGO,
    FL_CFG_OVERRIDE_LINEAR_PRECISION,
    FL_CFG_USE_AUTOCAST_DURING_EVAL,
    FL_CFG_OPT_LEVEL,
    FL_CFG_PAD_INNER_DIM,
    FL_CFG_ENABLE_FSDP_FLOAT8_ALL_GATHER,
    FL_CFG_GRADIENT_ACCUMULATION_STEPS,   /* top level (appended after the fp8_config keys) */
    FL_CFG_KEY_COUNT
} fl_config_key;

/* Choice values: the stored int is the index into the key's `choices`. */
typedef enum { FL_MP_NO = 0, FL_MP_FP16, FL_MP_BF16, FL_MP_FP8, FL_MP_COUNT } fl_mixed_precision;
typedef enum { FL_BACKEND_MSAMP = 0, FL_BACKEND_TE, FL_BACKEND_AO, FL_BACKEND_COUNT } fl_fp8_backend;
typedef enum { FL_RECIPE_HYBRID = 0, FL_RECIPE_E4M3, FL_RECIPE_FORMAT_COUNT } fl_recipe_format;
typedef enum { FL_OPT_O1 = 0, FL_OPT_O2, FL_OPT_O3, FL_OPT_LEVEL_COUNT } fl_opt_level;
/* override_linear_precision is stored as a bit mask of the GEMMs kept in high precision. */
enum { FL_OVERRIDE_FPROP = 1, FL_OVERRIDE_DGRAD = 2, FL_OVERRIDE_WGRAD = 4 };

typedef enum { FL_CFG_CHOICE, FL_CFG_INT, FL_CFG_BOOL, FL_CFG_BOOL3 } fl_config_type;

typedef struct {
    const char *name;            /* canonical key */
    const char *alias;           /* the name Accelerate's questionnaire writes, or NULL */
    const char *flag;            /* `fp8lab launch` flag, without the leading "--" */
    const char *env;             /* environment variable launch exports it through */
    bool in_fp8_block;           /* lives under fp8_config: */
    fl_config_type type;
    const char *const *choices;  /* CHOICE: NULL-terminated names, index = stored value */
    int min, max;                /* INT: accepted range */
    int def;                     /* the default, stored as the value would be */
    unsigned backends;           /* bit (1 << fl_fp8_backend) per backend it matters to; 0 = all */
} fl_config_keyinfo;

typedef struct fl_config {
    unsigned set;                    /* bit k: key k was given */
    int value[FL_CFG_KEY_COUNT];     /* choice index, integer, 0/1, or the override mask */
    char *notices[FL_CONFIG_MAX_NOTICES];
    int n_notices;
} fl_config;

/* Nothing set, no notices. */
void fl_config_init(fl_config *c);
/* Frees the notices and resets to nothing set. */
void fl_config_free(fl_config *c);

/* Replace *c with the settings of a YAML file. An empty file (or one holding only comments, `---`
 * or `~`) is "no settings". On failure *c holds nothing and the message reads
 * "path:line:column: what went wrong". c must have been initialised (fl_config_init). */
fl_status fl_config_load(fl_config *c, const char *path);
/* The same from memory; `name` stands for the file in messages. (The fuzz target's entry.) */
fl_status fl_config_load_buffer(fl_config *c, const char *buf, size_t len, const char *name);

/* Set key k from a command-line or environment value (`origin` names it in messages, e.g.
 * "--fp8_margin"). Booleans take true/false/yes/no/on/off/1/0; override_linear_precision takes
 * "a,b,c" or "(a, b, c)". On failure c is unchanged. */
fl_status fl_config_set(fl_config *c, fl_config_key k, const char *text, const char *origin);
bool fl_config_has(const fl_config *c, fl_config_key k);
/* The value given, or the key's default. */
int fl_config_get(const fl_config *c, fl_config_key k);

const fl_config_keyinfo *fl_config_info(fl_config_key k);
/* A canonical key or an alias → its key; -1 when neither. */
int fl_config_key_from_name(const char *name);
/* Text form of value v of key k ("te", "HYBRID", "3", "true", "false,false,true") in buf. */
const char *fl_config_format_value(fl_config_key k, int v, char *buf, size_t n);

/* Write the keys that are set as YAML to path, atomically (a temporary file in the same directory,
 * then rename). Missing parent directories are created. */
fl_status fl_config_write(const fl_config *c, const char *path);

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions, case-folded) between
 * two names of at most 64 bytes; SIZE_MAX when either is longer (not a name, not compared). The one
 * measure behind every "did you mean" of the program (config keys, kwargs, help). */
size_t fl_edit_distance(const char *a, const char *b);

/* The candidate nearest to `word` by edit distance (transpositions count 1), or NULL when none is
 * close enough to be a plausible typo. */
const char *fl_config_suggest(const char *word, const char *const *cands, size_t n);

/* libyaml's version string ("0.2.5"). */
const char *fl_config_yaml_version(void);

#endif
