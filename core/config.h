/* config.h — fp8lab's settings file, an Accelerate-style config.yaml: read with libyaml's event
 * parser (bounded: size, depth, node count; anchors and aliases rejected) into a plain struct,
 * every key validated with file:line:column messages, and written back atomically.
 *
 * The keys, their types and their checks are the settings table's (settings.h): a value read here
 * means what the same value means as a launch flag, a variable or a kwarg. Accelerate's own
 * top-level keys (compute_environment, deepspeed_config, ...) are accepted and reported once in a
 * notice as meaning nothing here. */
#ifndef FL_CONFIG_H
#define FL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "error.h"
#include "settings.h"

#define FL_CONFIG_MAX_BYTES (1 << 20)   /* larger files are refused before parsing */
#define FL_CONFIG_MAX_DEPTH 32          /* nesting of mappings/sequences */
#define FL_CONFIG_MAX_NODES 100000      /* scalars + collections in one file */
#define FL_CONFIG_MAX_NOTICES 4

typedef struct fl_config {
    fl_settings s;                   /* the settings the file gives */
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

/* Write the settings that are set as YAML (top-level keys, then the fp8_config: block) to path,
 * atomically (a temporary file in the same directory, then rename). Missing parent directories are
 * created. */
fl_status fl_config_write(const fl_config *c, const char *path);

/* libyaml's version string ("0.2.5"). */
const char *fl_config_yaml_version(void);

#endif
