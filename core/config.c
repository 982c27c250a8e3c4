/* config.c — config.yaml: libyaml events → a small bounded tree → validated fl_config, and back.
 * The tree exists so that keys can be checked in any order with both key and value positions at
 * hand; it is capped (FL_CONFIG_MAX_BYTES of input, FL_CONFIG_MAX_NODES nodes, FL_CONFIG_MAX_DEPTH
 * levels), and anchors/aliases are refused outright, so no input can make it large or cyclic. */
#include "config.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Top-level keys of Accelerate's ClusterConfig and SageMakerConfig (plus the legacy `fp16` and
 * `dynamo_backend` it still converts). Each is accepted only at values that describe what fp8lab does anyway (one
 * machine, num_processes processes over MPI, this launcher), and those are listed once in a notice; any other value
 * is refused with the reason. Null (`key:`) is always accepted: not set. (`use_cpu` is a setting of fp8lab's own:
 * settings.c.) */
typedef enum {
    ACC_ANY,          /* any value: it changes nothing on one machine (in Accelerate either) */
    ACC_NULL,         /* only null */
    ACC_EMPTY_MAP,    /* null or {} */
    ACC_FALSE_MAP,    /* null, {} or a mapping whose values are all false or null (`ipex_config: {ipex: false}`) */
    ACC_EMPTY_LIST,   /* null or [] */
    ACC_WORDS,        /* one of `words`, any case (quoted or not) */
    ACC_FALSE         /* false in any of YAML's plain spellings (false, no, off, ...), or one of `words` as ACC_WORDS */
} accel_accepts;

static const struct {
    const char *name;
    accel_accepts accepts;
    const char *words[3];   /* ACC_WORDS, ACC_FALSE: the values accepted */
    const char *why;        /* why other values are refused */
} ACCEL[] = {
    {"compute_environment", ACC_WORDS, {"LOCAL_MACHINE"}, "fp8lab runs on this machine; SageMaker is not supported"},
    {"distributed_type", ACC_WORDS, {"NO", "MULTI_CPU"},
     "fp8lab runs num_processes processes over MPI on the CPU; data-parallel training across GPUs is not part of it "
     "yet (as launch --multi_gpu says), nor are DeepSpeed, FSDP, Megatron-LM and XLA"},
    {"debug", ACC_FALSE, {NULL}, "Accelerate's debug checks of collectives are not part of fp8lab"},
    {"machine_rank", ACC_WORDS, {"0"}, "fp8lab's launcher runs on one machine (on several, srun or mpirun start the processes)"},
    {"num_machines", ACC_WORDS, {"1"}, "fp8lab's launcher runs on one machine (on several, srun or mpirun start the processes)"},
    {"gpu_ids", ACC_WORDS, {"all"}, "fp8lab does not pick GPUs by id (set CUDA_VISIBLE_DEVICES)"},
    {"main_process_ip", ACC_NULL, {NULL}, "mpirun connects the processes; there is no rendezvous address"},
    {"main_process_port", ACC_NULL, {NULL}, "mpirun picks its own ports (launch --main_process_port is refused too)"},
    {"rdzv_backend", ACC_ANY, {NULL}, NULL},
    {"same_network", ACC_ANY, {NULL}, NULL},
    {"main_training_function", ACC_ANY, {NULL}, NULL},
    {"enable_cpu_affinity", ACC_FALSE, {NULL}, "fp8lab does not pin threads (OMP_PROC_BIND and OMP_PLACES do)"},
    {"downcast_bf16", ACC_FALSE, {"no"}, "downcasting to bf16 is a TPU feature; fp8lab has none"},
    {"deepspeed_config", ACC_EMPTY_MAP, {NULL}, "DeepSpeed is not part of fp8lab"},
    {"fsdp_config", ACC_EMPTY_MAP, {NULL}, "FSDP is not part of fp8lab"},
    {"tp_config", ACC_EMPTY_MAP, {NULL}, "tensor parallelism is not part of fp8lab"},
    {"megatron_lm_config", ACC_EMPTY_MAP, {NULL}, "Megatron-LM is not part of fp8lab"},
    {"ipex_config", ACC_FALSE_MAP, {NULL}, "IPEX is not part of fp8lab"},
    {"mpirun_config", ACC_FALSE_MAP, {NULL}, "fp8lab launch runs mpirun itself"},
    {"parallelism_config", ACC_EMPTY_MAP, {NULL}, "only data parallelism is part of fp8lab"},
    {"dynamo_config", ACC_EMPTY_MAP, {NULL}, "torch.compile backends are not part of fp8lab"},
    {"tpu_name", ACC_NULL, {NULL}, "fp8lab has no TPU support"},
    {"tpu_zone", ACC_NULL, {NULL}, "fp8lab has no TPU support"},
    {"tpu_use_cluster", ACC_FALSE, {NULL}, "fp8lab has no TPU support"},
    {"tpu_use_sudo", ACC_FALSE, {NULL}, "fp8lab has no TPU support"},
    {"command_file", ACC_NULL, {NULL}, "fp8lab has no TPU support"},
    {"commands", ACC_NULL, {NULL}, "fp8lab has no TPU support"},
    {"tpu_vm", ACC_NULL, {NULL}, "fp8lab has no TPU support"},
    {"tpu_env", ACC_EMPTY_LIST, {NULL}, "fp8lab has no TPU support"},
    {"fp16", ACC_FALSE, {NULL}, "write mixed_precision: fp16"},
    {"dynamo_backend", ACC_FALSE, {"no"}, "torch.compile backends are not part of fp8lab"},
    {"ec2_instance_type", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"iam_role_name", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"image_uri", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"profile", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"region", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"base_job_name", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"pytorch_version", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"transformers_version", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"py_version", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"sagemaker_inputs_file", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"sagemaker_metrics_file", ACC_NULL, {NULL}, "SageMaker is not supported"},
    {"additional_args", ACC_NULL, {NULL}, "SageMaker is not supported"},
};
#define N_ACCEL (sizeof ACCEL / sizeof *ACCEL)

static bool eq(const char *s, size_t len, const char *word) {
    return strlen(word) == len && memcmp(s, word, len) == 0;
}
/* A value in messages, double-quoted; a key, single-quoted. */
static const char *show_text(const char *s, size_t len, char *buf, size_t n) {
    return fl_setting_quote(s, len, '"', buf, n);
}
static const char *show_key(const char *s, size_t len, char *buf, size_t n) {
    return fl_setting_quote(s, len, '\'', buf, n);
}

/* The row of a key that config files hold in this block (top level or fp8_config), else NULL. */
static const fl_setting *file_row(int k, bool fp8_block) {
    const fl_setting *r = k >= 0 ? fl_setting_info((fl_setting_id)k) : NULL;
    return r && r->file == (fp8_block ? FL_FILE_FP8_CONFIG : FL_FILE_TOP) ? r : NULL;
}

void fl_config_init(fl_config *c) { memset(c, 0, sizeof *c); }

void fl_config_free(fl_config *c) {
    for (int i = 0; i < c->n_notices; i++) free(c->notices[i]);
    fl_config_init(c);
}

/* ---- the YAML tree ------------------------------------------------------------------------------ */

typedef enum { N_SCALAR, N_SEQ, N_MAP } node_kind;

typedef struct ynode {
    node_kind kind;
    size_t line, col;         /* 1-based */
    char *text;               /* scalar value (NUL-terminated; may hold NULs: use len) */
    size_t len;
    bool plain;               /* scalar without quotes or block style, and no !!str tag */
    bool null_tag;            /* !!null */
    char type_tag;            /* 'i' !!int, 'f' !!float, 'b' !!bool, 0: none */
    struct ynode **kids;      /* sequence items, or a mapping's key, value, key, value ... */
    size_t n, cap;
} ynode;

typedef struct {
    const char *name;         /* the file, for messages */
    const char *buf;
    size_t len;
    yaml_parser_t p;
    size_t nodes;
    const struct ynode *dist_no;   /* distributed_type: NO, checked against num_processes once all is read */
} loader;

static void free_node(ynode *nd) {
    if (!nd) return;
    for (size_t i = 0; i < nd->n; i++) free_node(nd->kids[i]);
    free(nd->kids);
    free(nd->text);
    free(nd);
}

static const char *kind_name(const ynode *nd) {
    return nd->kind == N_MAP ? "a mapping" : nd->kind == N_SEQ ? "a list" : "a single value";
}

/* Error at a line and column (1-based). */
static fl_status err_lc(const loader *ld, size_t line, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fl_status err_lc(const loader *ld, size_t line, size_t col, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return FL_ERR(FL_EINVAL, "%s:%zu:%zu: %s", ld->name, line, col, msg);
}
#define ERR_AT(ld, nd, ...) err_lc((ld), (nd)->line, (nd)->col, __VA_ARGS__)
#define ERR_MARK(ld, m, ...) err_lc((ld), (m).line + 1, (m).column + 1, __VA_ARGS__)

static fl_status parse_error(const loader *ld) {
    const yaml_parser_t *p = &ld->p;
    if (p->error == YAML_MEMORY_ERROR) return FL_ERR(FL_ENOMEM, "%s: out of memory while parsing YAML", ld->name);
    if (p->error == YAML_READER_ERROR) {
        /* The reader reports a byte offset: turn it into a line and column of the raw text. */
        size_t line = 1, col = 1, off = p->problem_offset < ld->len ? p->problem_offset : ld->len;
        for (size_t i = 0; i < off; i++) {
            if (ld->buf[i] == '\n') line++, col = 1;
            else col++;
        }
        char val[16] = "";
        if (p->problem_value != -1) snprintf(val, sizeof val, " (byte 0x%02X)", (unsigned)p->problem_value & 0xFFu);
        return err_lc(ld, line, col, "not a YAML text file (binary data?): %s%s",
                      p->problem ? p->problem : "unreadable input", val);
    }
    const yaml_mark_t *m = &p->problem_mark;
    char ctx[200] = "";
    if (p->context) snprintf(ctx, sizeof ctx, " (%s, line %zu)", p->context, p->context_mark.line + 1);
    /* libyaml's words for a tab in the indentation are obscure: say it. */
    size_t i = 0;
    for (size_t line = 0; line < m->line && i < ld->len; i++)
        if (ld->buf[i] == '\n') line++;
    while (i < ld->len && ld->buf[i] == ' ') i++;
    const char *tab = i < ld->len && ld->buf[i] == '\t' ? "; a tab: YAML indents with spaces" : "";
    return err_lc(ld, m->line + 1, m->column + 1, "not valid YAML: %s%s%s", p->problem ? p->problem : "syntax error",
                  ctx, tab);
}

/* Tags: the core schema's own, Python's tuple (a list), and "!" (a plain string). */
static fl_status check_tag(const loader *ld, const yaml_mark_t m, const yaml_char_t *tag, node_kind kind, ynode *nd) {
    if (!tag) return FL_OK;
    const char *t = (const char *)tag, *pre = "tag:yaml.org,2002:";
    size_t lp = strlen(pre);
    const char *sub = strncmp(t, pre, lp) == 0 ? t + lp : NULL;
    bool ok = false;
    if (kind == N_SCALAR) {
        if (strcmp(t, "!") == 0 || (sub && strcmp(sub, "str") == 0)) { nd->plain = false; ok = true; }
        else if (sub && strcmp(sub, "null") == 0) { nd->null_tag = true; ok = true; }
        else if (sub && (strcmp(sub, "int") == 0 || strcmp(sub, "bool") == 0 || strcmp(sub, "float") == 0)) {
            nd->plain = true;
            nd->type_tag = sub[0];
            ok = true;
        }
    } else if (kind == N_SEQ) {
        ok = sub && (strcmp(sub, "seq") == 0 || strcmp(sub, "python/tuple") == 0);
    } else {
        ok = sub && strcmp(sub, "map") == 0;
    }
    if (ok) return FL_OK;
    char shown[200];
    return ERR_MARK(ld, m, "unsupported YAML tag %s on %s", show_text(t, strlen(t), shown, sizeof shown),
                    kind == N_SCALAR ? "a value" : kind == N_SEQ ? "a list" : "a mapping");
}

static fl_status add_kid(ynode *parent, ynode *kid) {
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        ynode **k = realloc(parent->kids, cap * sizeof *k);
        if (!k) return FL_ERR(FL_ENOMEM, "config: out of memory");
        parent->kids = k;
        parent->cap = cap;
    }
    parent->kids[parent->n++] = kid;
    return FL_OK;
}

/* Builds the tree of the (single) document; *root stays NULL for an empty stream. */
static fl_status build_tree(loader *ld, ynode **root) {
    ynode *stack[FL_CONFIG_MAX_DEPTH];
    int depth = 0, docs = 0;
    fl_status st = FL_OK;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&ld->p, &ev)) return parse_error(ld);
        if (ev.type == YAML_STREAM_END_EVENT) { yaml_event_delete(&ev); break; }
        const yaml_char_t *anchor = NULL, *tag = NULL;
        node_kind kind = N_SCALAR;
        bool is_node = true;
        switch (ev.type) {
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) st = ERR_MARK(ld, ev.start_mark, "a second YAML document ('---'): a config file holds one");
            is_node = false;
            break;
        case YAML_ALIAS_EVENT:
            st = ERR_MARK(ld, ev.start_mark, "aliases/anchors are not supported in fp8lab config files (alias *%.40s)",
                          (const char *)ev.data.alias.anchor);
            is_node = false;
            break;
        case YAML_SCALAR_EVENT: anchor = ev.data.scalar.anchor; tag = ev.data.scalar.tag; break;
        case YAML_SEQUENCE_START_EVENT:
            anchor = ev.data.sequence_start.anchor; tag = ev.data.sequence_start.tag; kind = N_SEQ;
            break;
        case YAML_MAPPING_START_EVENT:
            anchor = ev.data.mapping_start.anchor; tag = ev.data.mapping_start.tag; kind = N_MAP;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0) depth--;
            is_node = false;
            break;
        default: is_node = false; break;
        }
        if (st == FL_OK && is_node) {
            ynode *nd = NULL;
            if (anchor)
                st = ERR_MARK(ld, ev.start_mark, "aliases/anchors are not supported in fp8lab config files (anchor &%.40s)",
                              (const char *)anchor);
            else if (++ld->nodes > FL_CONFIG_MAX_NODES)
                st = ERR_MARK(ld, ev.start_mark, "too many YAML nodes (more than %d)", FL_CONFIG_MAX_NODES);
            else if (kind != N_SCALAR && depth == FL_CONFIG_MAX_DEPTH)
                st = ERR_MARK(ld, ev.start_mark, "nesting deeper than %d levels", FL_CONFIG_MAX_DEPTH);
            else if (!(nd = calloc(1, sizeof *nd)))
                st = FL_ERR(FL_ENOMEM, "config: out of memory");
            if (nd) {
                nd->kind = kind;
                nd->line = ev.start_mark.line + 1;
                nd->col = ev.start_mark.column + 1;
                if (kind == N_SCALAR) {
                    nd->len = ev.data.scalar.length;
                    nd->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
                    if (!(nd->text = malloc(nd->len + 1))) st = FL_ERR(FL_ENOMEM, "config: out of memory");
                    else {
                        memcpy(nd->text, ev.data.scalar.value, nd->len);
                        nd->text[nd->len] = 0;
                    }
                }
                if (st == FL_OK) st = check_tag(ld, ev.start_mark, tag, kind, nd);
                if (st == FL_OK) {
                    if (depth == 0) {
                        if (*root) st = ERR_MARK(ld, ev.start_mark, "a second top-level value");
                        else *root = nd;
                    } else {
                        st = add_kid(stack[depth - 1], nd);
                    }
                }
                if (st != FL_OK && *root != nd) free_node(nd);
                else if (st == FL_OK && kind != N_SCALAR) stack[depth++] = nd;
            }
        }
        yaml_event_delete(&ev);
        if (st != FL_OK) return st;
    }
    return FL_OK;
}

/* ---- validation --------------------------------------------------------------------------------- */

static bool is_null(const ynode *nd) {
    if (nd->kind != N_SCALAR) return false;
    if (nd->null_tag) return true;
    return nd->plain && (nd->len == 0 || eq(nd->text, nd->len, "~") || eq(nd->text, nd->len, "null") ||
                         eq(nd->text, nd->len, "Null") || eq(nd->text, nd->len, "NULL"));
}

static fl_status set_from_node(const loader *ld, fl_config *c, fl_setting_id k, const char *shown_key, const ynode *v) {
    if (is_null(v)) return FL_OK;   /* `key:` or `key: null` = not set */
    /* Accelerate's ClusterConfig writes num_processes: -1 for "not given" (e.g. under Slurm). */
    if (k == FL_SET_NUM_PROCESSES && v->kind == N_SCALAR && v->plain && eq(v->text, v->len, "-1")) return FL_OK;
    const fl_setting *r = fl_setting_info(k);
    char why[640];
    int val = 0;
    if (v->kind == N_SEQ && r->type == FL_SETTING_BOOL3) {
        if (v->n != 3) return ERR_AT(ld, v, "%s: expected a list of 3 booleans (fprop, dgrad, wgrad), got %zu item%s",
                                     shown_key, v->n, v->n == 1 ? "" : "s");
        for (size_t i = 0; i < 3; i++) {
            const ynode *it = v->kids[i];
            int b = it->kind == N_SCALAR ? fl_setting_bool(it->text, it->len, it->plain ? FL_FROM_YAML_PLAIN
                                                                                       : FL_FROM_YAML_QUOTED) : -1;
            if (b < 0) {
                char got[200];
                return ERR_AT(ld, it, "%s[%zu]: expected a boolean (true or false), got %s", shown_key, i + 1,
                              it->kind == N_SCALAR ? show_text(it->text, it->len, got, sizeof got) : kind_name(it));
            }
            if (b) val |= 1 << i;
        }
    } else if (v->kind != N_SCALAR) {
        fl_setting_mismatch(k, kind_name(v), why, sizeof why);
        return ERR_AT(ld, v, "%s: %s", shown_key, why);
    } else if (v->type_tag && v->type_tag != (r->type == FL_SETTING_INT ? 'i'
                                   : (r->type == FL_SETTING_BOOL || r->type == FL_SETTING_BOOL3) ? 'b' : 0)) {
        /* a typed value is read as its tag says (Accelerate's PyYAML makes !!float 2 the float 2.0) */
        char got[200];
        fl_setting_mismatch(k, "", why, sizeof why);
        return ERR_AT(ld, v, "%s: %s!!%s %s", shown_key, why, v->type_tag == 'i' ? "int" : v->type_tag == 'f' ? "float" : "bool",
                      show_text(v->text, v->len, got, sizeof got));
    } else if (!fl_setting_parse(k, v->text, v->len, v->plain ? FL_FROM_YAML_PLAIN : FL_FROM_YAML_QUOTED, &val, why,
                                 sizeof why)) {
        return ERR_AT(ld, v, "%s: %s", shown_key, why);
    }
    fl_settings_put(&c->s, k, val);
    return FL_OK;
}

/* Names valid in one block, for suggestions. */
static size_t scope_names(bool fp8_block, const char **out) {
    size_t n = 0;
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *r = file_row(k, fp8_block);
        if (!r) continue;
        out[n++] = r->name;
        if (r->alias) out[n++] = r->alias;
    }
    if (!fp8_block) {
        out[n++] = "fp8_config";
        for (size_t i = 0; i < N_ACCEL; i++) out[n++] = ACCEL[i].name;
    }
    return n;
}

static int accel_key(const char *s, size_t len) {
    for (size_t i = 0; i < N_ACCEL; i++)
        if (eq(s, len, ACCEL[i].name)) return (int)i;
    return -1;
}

static bool is_false(const ynode *x) {
    return x->kind == N_SCALAR && x->plain && fl_setting_bool(x->text, x->len, FL_FROM_YAML_PLAIN) == 0;
}

/* Whether v is one of the words of Accelerate's key a, in any case, quoted or not. */
static bool accel_word(size_t a, const ynode *v) {
    if (v->kind != N_SCALAR) return false;
    for (size_t i = 0; i < sizeof ACCEL[a].words / sizeof *ACCEL[a].words && ACCEL[a].words[i]; i++) {
        const char *w = ACCEL[a].words[i];
        if (strlen(w) == v->len && strncasecmp(w, v->text, v->len) == 0) return true;
    }
    return false;
}

/* Whether v is a value Accelerate's key a may hold in a file fp8lab follows (see ACCEL). */
static bool accel_value_ok(size_t a, const ynode *v) {
    if (is_null(v)) return true;
    switch (ACCEL[a].accepts) {
    case ACC_ANY: return true;
    case ACC_NULL: return false;
    case ACC_EMPTY_MAP: return v->kind == N_MAP && v->n == 0;
    case ACC_EMPTY_LIST: return v->kind == N_SEQ && v->n == 0;
    case ACC_FALSE_MAP:
        if (v->kind != N_MAP) return false;
        for (size_t i = 1; i < v->n; i += 2)   /* kids: key, value, key, value ... */
            if (!is_null(v->kids[i]) && !is_false(v->kids[i])) return false;
        return true;
    case ACC_FALSE: return is_false(v) || accel_word(a, v);
    case ACC_WORDS: return accel_word(a, v);
    }
    return false;
}

/* The error for Accelerate's key a holding value v: the value, the reason, what is accepted. */
static fl_status accel_refused(const loader *ld, size_t a, const ynode *v) {
    char got[120], accepted[160];
    if (v->kind == N_SCALAR) show_text(v->text, v->len, got, sizeof got);
    else {
        size_t n = v->kind == N_MAP ? v->n / 2 : v->n;
        snprintf(got, sizeof got, "%s of %zu %s%s", kind_name(v), n, v->kind == N_MAP ? "key" : "item", n == 1 ? "" : "s");
    }
    switch (ACCEL[a].accepts) {
    case ACC_NULL: snprintf(accepted, sizeof accepted, "leave it out or null"); break;
    case ACC_EMPTY_MAP: snprintf(accepted, sizeof accepted, "leave it out, null or {}"); break;
    case ACC_FALSE_MAP: snprintf(accepted, sizeof accepted, "leave it out, null, {} or only false values"); break;
    case ACC_EMPTY_LIST: snprintf(accepted, sizeof accepted, "leave it out, null or []"); break;
    case ACC_ANY:   /* never refused */
    case ACC_FALSE:
    case ACC_WORDS: {
        size_t o = (size_t)snprintf(accepted, sizeof accepted, "accepted: ");
        const char *sep = "";
        for (size_t i = 0; i < sizeof ACCEL[a].words / sizeof *ACCEL[a].words && ACCEL[a].words[i] && o < sizeof accepted; i++) {
            o += (size_t)snprintf(accepted + o, sizeof accepted - o, "%s%s", sep, ACCEL[a].words[i]);
            sep = ", ";
        }
        if (ACCEL[a].accepts == ACC_FALSE && o < sizeof accepted) snprintf(accepted + o, sizeof accepted - o, "%sfalse", sep);
        break;
    }
    }
    return ERR_AT(ld, v, "%s: %s is not supported: %s (%s)", ACCEL[a].name, got, ACCEL[a].why, accepted);
}

static fl_status unknown_key(const loader *ld, const ynode *kn, bool fp8_block) {
    char shown[200];
    show_key(kn->text, kn->len, shown, sizeof shown);
    const char *where = fp8_block ? " in fp8_config" : "";
    int k = strlen(kn->text) == kn->len ? fl_setting_find(kn->text) : -1;
    if (file_row(k, !fp8_block))  /* a real key, at the wrong level */
        return ERR_AT(ld, kn, "key %s belongs %s", shown,
                      fp8_block ? "at the top level, not inside fp8_config" : "inside the fp8_config: block");
    if (fp8_block && (eq(kn->text, kn->len, "fp8_config") || accel_key(kn->text, kn->len) >= 0))
        return ERR_AT(ld, kn, "key %s belongs at the top level, not inside fp8_config", shown);
    const char *names[FL_SET_COUNT * 2 + 1 + N_ACCEL];
    size_t n = scope_names(fp8_block, names);
    const char *best = strlen(kn->text) == kn->len ? fl_suggest(kn->text, names, n) : NULL;
    if (best) return ERR_AT(ld, kn, "unknown key %s%s (did you mean '%s'?)", shown, where, best);
    /* the keys this block takes, from the settings table */
    char valid[600];
    size_t o = 0;
    valid[0] = 0;
    for (int j = 0; j < FL_SET_COUNT; j++) {
        const fl_setting *r = file_row(j, fp8_block);
        if (r && o < sizeof valid) o += (size_t)snprintf(valid + o, sizeof valid - o, "%s%s", o ? ", " : "", r->name);
    }
    if (fp8_block) return ERR_AT(ld, kn, "unknown key %s%s (valid keys: %s)", shown, where, valid);
    return ERR_AT(ld, kn, "unknown key %s (fp8lab reads %s and fp8_config, and accepts Accelerate's own keys; "
                  "docs/config.md lists them)", shown, valid);
}

typedef struct {
    size_t key_line[FL_SET_COUNT + 1];   /* last slot: fp8_config */
    const char *key_name[FL_SET_COUNT + 1];
    size_t accel_line[N_ACCEL];
} seen_t;

static fl_status duplicate(const loader *ld, const ynode *kn, const char *first_name, size_t first_line) {
    char shown[200];
    show_key(kn->text, kn->len, shown, sizeof shown);
    if (eq(kn->text, kn->len, first_name))
        return ERR_AT(ld, kn, "duplicate key %s (first given on line %zu)", shown, first_line);
    return ERR_AT(ld, kn, "duplicate key %s: it is another name for '%s', given on line %zu", shown, first_name,
                  first_line);
}

static fl_status apply_map(loader *ld, const ynode *map, bool fp8_block, fl_config *c, bool *ignored) {
    seen_t seen;
    memset(&seen, 0, sizeof seen);
    for (size_t i = 0; i + 1 < map->n; i += 2) {
        const ynode *kn = map->kids[i], *vn = map->kids[i + 1];
        if (kn->kind != N_SCALAR)
            return ERR_AT(ld, kn, "a key must be a name, got %s", kind_name(kn));
        int k = strlen(kn->text) == kn->len ? fl_setting_find(kn->text) : -1;
        const int a = fp8_block ? -1 : accel_key(kn->text, kn->len);   /* one of Accelerate's keys (top level) */
        const fl_setting *r = file_row(k, fp8_block);
        if (r) {
            if (seen.key_line[k]) return duplicate(ld, kn, seen.key_name[k], seen.key_line[k]);
            seen.key_line[k] = kn->line;
            seen.key_name[k] = r->alias && strcmp(kn->text, r->alias) == 0 ? r->alias : r->name;
            char shown_key[80];
            snprintf(shown_key, sizeof shown_key, "%s%s", fp8_block ? "fp8_config." : "", kn->text);
            FL_TRY(set_from_node(ld, c, (fl_setting_id)k, shown_key, vn));
        } else if (!fp8_block && eq(kn->text, kn->len, "fp8_config")) {
            if (seen.key_line[FL_SET_COUNT]) return duplicate(ld, kn, "fp8_config", seen.key_line[FL_SET_COUNT]);
            seen.key_line[FL_SET_COUNT] = kn->line;
            if (is_null(vn)) continue;
            if (vn->kind != N_MAP)
                return ERR_AT(ld, vn, "fp8_config: expected a mapping of FP8 settings (backend: te, margin: 0, ...), got %s",
                              kind_name(vn));
            FL_TRY(apply_map(ld, vn, true, c, ignored));
        } else if (a >= 0) {
            if (seen.accel_line[a]) return duplicate(ld, kn, ACCEL[a].name, seen.accel_line[a]);
            seen.accel_line[a] = kn->line;
            if (!accel_value_ok((size_t)a, vn)) return accel_refused(ld, (size_t)a, vn);
            ignored[a] = true;
            if (eq(ACCEL[a].name, strlen(ACCEL[a].name), "distributed_type") && vn->kind == N_SCALAR &&
                vn->len == 2 && (vn->text[0] == 'N' || vn->text[0] == 'n') && (vn->text[1] == 'O' || vn->text[1] == 'o'))
                ld->dist_no = vn;
        } else {
            return unknown_key(ld, kn, fp8_block);
        }
    }
    return FL_OK;
}

static fl_status add_notice(fl_config *c, const char *text) {
    if (c->n_notices >= FL_CONFIG_MAX_NOTICES) return FL_OK;
    char *s = strdup(text);
    if (!s) return FL_ERR(FL_ENOMEM, "config: out of memory");
    c->notices[c->n_notices++] = s;
    return FL_OK;
}

static fl_status ignored_notice(const loader *ld, fl_config *c, const bool *ignored) {
    char buf[1600];
    size_t o = (size_t)snprintf(buf, sizeof buf, "%s: ignoring settings that only matter to Accelerate (at values that change nothing here):", ld->name);
    int count = 0;
    for (size_t i = 0; i < N_ACCEL; i++)
        /* (compute_environment: LOCAL_MACHINE and distributed_type, checked against num_processes, are what
         * `fp8lab config` writes itself for Accelerate's loader: not news) */
        if (ignored[i] && o < sizeof buf && strcmp(ACCEL[i].name, "compute_environment") != 0 &&
            strcmp(ACCEL[i].name, "distributed_type") != 0)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s %s", count++ ? "," : "", ACCEL[i].name);
    return count ? add_notice(c, buf) : FL_OK;
}

fl_status fl_config_load_buffer(fl_config *c, const char *buf, size_t len, const char *name) {
    fl_config_free(c);
    loader ld = {.name = name ? name : "(config)", .buf = buf, .len = len};
    if (len > FL_CONFIG_MAX_BYTES)
        return FL_ERR(FL_EINVAL, "%s: file too large for a config file (%zu bytes; the limit is %d)", ld.name, len,
                      FL_CONFIG_MAX_BYTES);
    if (!yaml_parser_initialize(&ld.p)) return FL_ERR(FL_ENOMEM, "config: out of memory");
    yaml_parser_set_input_string(&ld.p, (const unsigned char *)buf, len);
    ynode *root = NULL;
    fl_config tmp;
    fl_config_init(&tmp);
    bool ignored[N_ACCEL] = {false};
    fl_status st = build_tree(&ld, &root);
    if (st == FL_OK && root && !is_null(root)) {
        if (root->kind != N_MAP)
            st = ERR_AT(&ld, root, "expected a mapping of settings (key: value lines) at the top, got %s", kind_name(root));
        else
            st = apply_map(&ld, root, false, &tmp, ignored);
    }
    /* Accelerate's launcher starts one process for distributed_type NO, whatever num_processes says */
    if (st == FL_OK && ld.dist_no && fl_settings_has(&tmp.s, FL_SET_NUM_PROCESSES) &&
        fl_settings_get(&tmp.s, FL_SET_NUM_PROCESSES) > 1)
        st = ERR_AT(&ld, ld.dist_no, "distributed_type: NO runs one process (Accelerate's launcher ignores num_processes "
                    "then), but num_processes is %d: write MULTI_CPU for %d processes, or num_processes: 1",
                    fl_settings_get(&tmp.s, FL_SET_NUM_PROCESSES), fl_settings_get(&tmp.s, FL_SET_NUM_PROCESSES));
    if (st == FL_OK) st = ignored_notice(&ld, &tmp, ignored);
    free_node(root);
    yaml_parser_delete(&ld.p);
    if (st != FL_OK) { fl_config_free(&tmp); return st; }
    *c = tmp;
    return FL_OK;
}

fl_status fl_config_load(fl_config *c, const char *path) {
    fl_config_free(c);
    /* a regular file only: a named pipe would block for ever, a device never end (core/fileio.c) */
    int fd;
    FL_TRY(fl_open_regular(path, "config file", FL_CONFIG_MAX_BYTES, &fd, NULL));
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); return FL_ERR(FL_EIO, "%s: cannot open config file: %s", path, strerror(errno)); }
    char *buf = malloc(FL_CONFIG_MAX_BYTES + 1);
    if (!buf) { fclose(f); return FL_ERR(FL_ENOMEM, "config: out of memory"); }
    size_t n = fread(buf, 1, FL_CONFIG_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    fl_status st;
    if (bad) st = FL_ERR(FL_EIO, "%s: read error", path);
    else st = fl_config_load_buffer(c, buf, n, path);  /* n > limit is refused there */
    free(buf);
    return st;
}

/* ---- writing ------------------------------------------------------------------------------------ */

/* mkdir -p of path's directory (fl_mkdir_p). */
static fl_status make_parents(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return FL_OK;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) return FL_ERR(FL_ENOMEM, "%s: out of memory", path);
    fl_status st = fl_mkdir_p(dir);
    free(dir);
    return st;
}

static void write_key(FILE *f, const fl_config *c, fl_setting_id k, const char *indent) {
    const fl_setting *r = fl_setting_info(k);
    int v = c->s.value[k];
    fprintf(f, "%s%s: ", indent, r->name);
    switch (r->type) {
    case FL_SETTING_CHOICE: fprintf(f, "'%s'\n", r->choices[v]); break;  /* quoted: a bare no is a boolean */
    case FL_SETTING_BOOL3:
        fprintf(f, "[%s, %s, %s]\n", v & FL_OVERRIDE_FPROP ? "true" : "false", v & FL_OVERRIDE_DGRAD ? "true" : "false",
                v & FL_OVERRIDE_WGRAD ? "true" : "false");
        break;
    default: {
        char buf[64];
        fprintf(f, "%s\n", fl_setting_format(k, v, buf, sizeof buf));
        break;
    }
    }
}

static fl_status config_write_to(const fl_config *c, const char *path);

fl_status fl_config_write(const fl_config *c, const char *path) {
    /* a config file kept elsewhere behind a symbolic link (a dotfiles repository) is updated there: the new
     * file replaces the link's target, not the link */
    struct stat sb;
    char *target = NULL;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        target = realpath(path, NULL);
        if (!target) return FL_ERR(FL_EIO, "%s: a symbolic link whose target cannot be reached: %s", path, strerror(errno));
        path = target;
    }
    fl_status st = config_write_to(c, path);
    free(target);
    return st;
}

static fl_status config_write_to(const fl_config *c, const char *path) {
    FL_TRY(make_parents(path));
    /* an unnamed temporary file that is named only when complete: a killed writer leaves nothing */
    fl_atomic_file af;
    FL_TRY(fl_atomic_begin(&af, path));
    /* a second descriptor, which a process out of them does not get (EMFILE: the binding collects and calls again;
     * it was fdopen(-1)'s "Bad file descriptor"); fdopen's own failure closes it */
    const int dfd = dup(af.fd);
    FILE *f = dfd >= 0 ? fdopen(dfd, "w") : NULL;
    if (!f) {
        const int e = errno;
        if (dfd >= 0) close(dfd);
        fl_atomic_abort(&af);
        return FL_ERR_SYS(FL_EIO, dfd < 0 ? e : 0, "%s: %s", path, strerror(e));
    }
    fprintf(f, "# fp8lab config (docs/config.md lists every key)\n");
    /* the two keys Accelerate's loader requires (ClusterConfig: "A `distributed_type` must be specified"), at the
     * values that describe what fp8lab runs, so that `accelerate launch --config_file` reads this file too */
    int np = fl_settings_has(&c->s, FL_SET_NUM_PROCESSES) ? fl_settings_get(&c->s, FL_SET_NUM_PROCESSES) : 1;
    fprintf(f, "compute_environment: LOCAL_MACHINE\ndistributed_type: %s\n", np > 1 ? "MULTI_CPU" : "'NO'");
    for (int pass = 0; pass < 2; pass++) {   /* top-level keys, then the fp8_config: block */
        bool block = false;
        for (int k = 0; k < FL_SET_COUNT; k++) {
            if (!fl_settings_has(&c->s, (fl_setting_id)k) || !file_row(k, pass == 1)) continue;
            if (pass == 1 && !block) { fprintf(f, "fp8_config:\n"); block = true; }
            write_key(f, c, (fl_setting_id)k, pass == 1 ? "  " : "");
        }
    }
    errno = 0;
    bool ok = fflush(f) == 0 && !ferror(f);
    int err = errno ? errno : EIO;
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        fl_atomic_abort(&af);
        return FL_ERR(FL_EIO, "%s: cannot write config file: %s", path, strerror(err));
    }
    return fl_atomic_commit(&af);   /* fsync, rename over path, fsync the directory */
}

const char *fl_config_yaml_version(void) { return yaml_get_version_string(); }
