/* settings.c — the settings table (settings.h), the one parser of setting values with its messages,
 * and the one "did you mean" of the program. */
#include "settings.h"

#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the table ----------------------------------------------------------------------------------- */

const char *const fl_setting_type_names[] = {"choice", "int", "bool", "bool3", "function"};
_Static_assert(sizeof fl_setting_type_names / sizeof *fl_setting_type_names == FL_SETTING_TYPE_COUNT,
               "a setting type without a name");

static const char *const MP_NAMES[] = {"no", "fp16", "bf16", "fp8", NULL};
static const char *const BACKEND_NAMES[] = {"msamp", "te", "ao", NULL};
static const char *const BACKEND_HELP[] = {"MS-AMP optimisation levels", "delayed scaling (TransformerEngine)",
                                           "dynamic scaling (torchao)", NULL};
static const char *const FORMAT_NAMES[] = {"HYBRID", "E4M3", NULL};
static const char *const ALGO_NAMES[] = {"most_recent", "max", NULL};   /* fl_amax_algo order */
static const char *const OPT_NAMES[] = {"O1", "O2", "O3", NULL};
static const char *const AO_NAMES[] = {"tensorwise", "rowwise", "rowwise_with_gw_hp", NULL};
_Static_assert(sizeof MP_NAMES / sizeof *MP_NAMES == FL_MP_COUNT + 1, "mixed precision names");
_Static_assert(sizeof BACKEND_NAMES / sizeof *BACKEND_NAMES == FL_BACKEND_COUNT + 1, "backend names");
_Static_assert(sizeof BACKEND_HELP / sizeof *BACKEND_HELP == FL_BACKEND_COUNT + 1, "backend descriptions");
_Static_assert(sizeof FORMAT_NAMES / sizeof *FORMAT_NAMES == FL_RECIPE_FORMAT_COUNT + 1, "format names");
_Static_assert(FL_AMAX_MOST_RECENT == 0 && FL_AMAX_MAX == 1, "ALGO_NAMES follows fl_amax_algo");
_Static_assert(sizeof OPT_NAMES / sizeof *OPT_NAMES == FL_OPT_LEVEL_COUNT + 1, "opt level names");
_Static_assert(sizeof AO_NAMES / sizeof *AO_NAMES == FL_AO_CONFIG_COUNT + 1, "ao config names");

#define TE (1u << FL_BACKEND_TE)
#define MSAMP (1u << FL_BACKEND_MSAMP)
#define AO (1u << FL_BACKEND_AO)
#define BIG FL_SETTING_UNBOUNDED

static const fl_setting ROWS[] = {
    [FL_SET_MIXED_PRECISION] = {
        .name = "mixed_precision", .type = FL_SETTING_CHOICE, .choices = MP_NAMES, .def = FL_MP_NO,
        .env = "FP8LAB_MIXED_PRECISION", .flag = "mixed_precision", .file = FL_FILE_TOP,
        .help = "precision of the training step: no (fp32), fp16, bf16 or fp8",
        .question = "Mixed precision (no, fp16, bf16, fp8)"},
    [FL_SET_BACKEND] = {
        .name = "backend", .type = FL_SETTING_CHOICE, .choices = BACKEND_NAMES, .choice_help = BACKEND_HELP,
        .def = FL_BACKEND_MSAMP, .env = "FP8LAB_FP8_BACKEND", .flag = "fp8_backend", .file = FL_FILE_FP8_CONFIG,
        .in_fp8_recipe_kwargs = true,
        .help = "FP8 recipe: msamp (MS-AMP levels), te (TransformerEngine delayed scaling), ao (torchao dynamic scaling)",
        .question = "FP8 backend (msamp = MS-AMP, te = TransformerEngine, ao = torchao)"},
    [FL_SET_FP8_FORMAT] = {
        .name = "fp8_format", .type = FL_SETTING_CHOICE, .choices = FORMAT_NAMES, .def = FL_RECIPE_HYBRID,
        .refused = "E5M2",
        .refused_why = "E5M2 alone is not a training format (activations and weights need E4M3's precision; "
                       "TransformerEngine refuses it too)",
        .env = "FP8LAB_FP8_FORMAT", .flag = "fp8_format", .file = FL_FILE_FP8_CONFIG, .backends = TE,
        .in_fp8_recipe_kwargs = true,
        .help = "HYBRID: E4M3 forward (input, weight), E5M2 backward (output gradient); E4M3: E4M3 everywhere",
        .question = "FP8 format (HYBRID = E4M3 forward and E5M2 gradients, E4M3 = E4M3 everywhere)"},
    [FL_SET_MARGIN] = {
        .name = "margin", .type = FL_SETTING_INT, .min = 0, .max = 64, .def = 0,
        .env = "FP8LAB_FP8_MARGIN", .flag = "fp8_margin", .file = FL_FILE_FP8_CONFIG, .backends = TE,
        .in_fp8_recipe_kwargs = true,
        .help = "head-room: scale = fp8_max / amax / 2^margin",
        .question = "Scaling margin: scale = fp8_max / amax / 2^margin"},
    [FL_SET_INTERVAL] = {
        .name = "interval", .type = FL_SETTING_INT, .min = 1, .max = BIG, .def = 1,
        .env = "FP8LAB_FP8_INTERVAL", .flag = "fp8_interval", .file = FL_FILE_FP8_CONFIG, .backends = TE,
        .in_fp8_recipe_kwargs = true,
        .help = "recompute the scales every `interval` optimizer steps",
        .question = "Recompute the scaling factors every how many steps"},
    [FL_SET_AMAX_HISTORY_LEN] = {
        .name = "amax_history_len", .alias = "amax_history_length", .type = FL_SETTING_INT, .min = 1,
        .max = FL_HISTORY_MAX, .def = 1024, .env = "FP8LAB_FP8_AMAX_HISTORY_LEN", .flag = "fp8_amax_history_len",
        .file = FL_FILE_FP8_CONFIG, .backends = TE, .in_fp8_recipe_kwargs = true,
        .help = "length of the amax history ring of each tensor role",
        .question = "Length of the amax history"},
    [FL_SET_AMAX_COMPUTE_ALGO] = {
        .name = "amax_compute_algo", .alias = "amax_compute_algorithm", .type = FL_SETTING_CHOICE,
        .choices = ALGO_NAMES, .def = FL_AMAX_MOST_RECENT, .env = "FP8LAB_FP8_AMAX_COMPUTE_ALGO",
        .flag = "fp8_amax_compute_algo", .file = FL_FILE_FP8_CONFIG, .backends = TE, .in_fp8_recipe_kwargs = true,
        .help = "amax from the history: its max, or its most recent entry",
        .question = "Amax from the history (max, most_recent)"},
    [FL_SET_OVERRIDE_LINEAR_PRECISION] = {
        .name = "override_linear_precision", .type = FL_SETTING_BOOL3, .def = 0,
        .env = "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION", .flag = "fp8_override_linear_precision",
        .file = FL_FILE_FP8_CONFIG, .backends = TE, .in_fp8_recipe_kwargs = true,
        .help = "run the (fprop, dgrad, wgrad) GEMMs in high precision (three booleans)",
        .question = "Run (fprop, dgrad, wgrad) in high precision, as three booleans"},
    [FL_SET_USE_AUTOCAST_DURING_EVAL] = {
        .name = "use_autocast_during_eval", .type = FL_SETTING_BOOL, .def = 0,
        .env = "FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL", .flag = "fp8_use_autocast_during_eval",
        .file = FL_FILE_FP8_CONFIG, .backends = TE, .in_fp8_recipe_kwargs = true,
        .help = "use FP8 in eval mode too (off: eval runs in high precision)",
        .question = "Use FP8 during evaluation too (yes/no)"},
    [FL_SET_OPT_LEVEL] = {
        .name = "opt_level", .alias = "optimization_level", .type = FL_SETTING_CHOICE, .choices = OPT_NAMES,
        .def = FL_OPT_O2, .env = "FP8LAB_FP8_OPT_LEVEL", .flag = "fp8_opt_level", .file = FL_FILE_FP8_CONFIG,
        .backends = MSAMP, .in_fp8_recipe_kwargs = true,
        .help = "O1: FP8 GEMMs, weight gradients and all-reduce; O2: also Adam m in E4M3, v in fp16; "
                "O3: also E4M3 weights",
        .question = "MS-AMP optimization level (O1, O2, O3)"},
    [FL_SET_AO_CONFIG] = {
        .name = "config", .type = FL_SETTING_CHOICE, .choices = AO_NAMES, .def = FL_AO_TENSORWISE, .backends = AO,
        .help = "torchao recipe: tensorwise, rowwise, or rowwise_with_gw_hp (wgrad in high precision)"},
    [FL_SET_MODULE_FILTER_FUNC] = {
        .name = "module_filter_func", .type = FL_SETTING_FUNC, .backends = AO,
        .help = "(module, name) -> boolean; nil: skip the first and last Linear and those with features not "
                "divisible by 16"},
    [FL_SET_PAD_INNER_DIM] = {
        .name = "pad_inner_dim", .type = FL_SETTING_BOOL, .def = 1, .env = "FP8LAB_FP8_PAD_INNER_DIM",
        .flag = "fp8_pad_inner_dim", .file = FL_FILE_FP8_CONFIG, .backends = AO,
        .help = "a Linear that module_filter_func takes whose features are not multiples of 16 runs in FP8 (its GEMM "
                "padded to 16); false: it stays in high precision (the default filter never takes one)",
        .question = "Pad GEMM dimensions to multiples of 16 (yes/no)"},
    [FL_SET_ENABLE_FSDP_FLOAT8_ALL_GATHER] = {
        .name = "enable_fsdp_float8_all_gather", .type = FL_SETTING_BOOL, .def = 1,
        .env = "FP8LAB_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", .flag = "fp8_enable_fsdp_float8_all_gather",
        .file = FL_FILE_FP8_CONFIG, .backends = AO,
        .unsupported = "fp8lab has no FSDP (sharded data parallelism): its DDP all-reduces gradients and never "
                       "all-gathers weights, so this torchao setting could change nothing; leave it out",
        .help = "not supported (no FSDP here: weights are never all-gathered); any value is refused"},
    [FL_SET_NUM_PROCESSES] = {
        .name = "num_processes", .type = FL_SETTING_INT, .min = 1, .max = 4096, .def = 1,
        .env = "FP8LAB_NUM_PROCESSES", .flag = "num_processes", .file = FL_FILE_TOP,
        .help = "processes to start; more than 1 runs them through mpirun",
        .question = "Number of processes (more than 1 starts them through mpirun)"},
    [FL_SET_USE_CPU] = {
        .name = "use_cpu", .type = FL_SETTING_BOOL, .def = 0, .env = "FP8LAB_USE_CPU", .flag = "cpu",
        .file = FL_FILE_TOP,
        .help = "run on the CPU even when there is a GPU (Accelerate's use_cpu; the Accelerator's cpu=true)",
        .question = "Run on the CPU only, even when there is a GPU (yes/no)"},
    [FL_SET_GRADIENT_ACCUMULATION_STEPS] = {
        .name = "gradient_accumulation_steps", .type = FL_SETTING_INT, .min = 1, .max = BIG, .def = 1,
        .env = "FP8LAB_GRADIENT_ACCUMULATION_STEPS", .flag = "gradient_accumulation_steps", .file = FL_FILE_TOP,
        .help = "micro-batches per optimizer step inside acc:accumulate (the Accelerator's default)"},
    [FL_SET_SCHEMA_SELFTEST] = {
        .name = "schema_selftest", .type = FL_SETTING_INT, .min = 0, .max = 99, .def = 7,
        .env = "FP8LAB_FP8_SCHEMA_SELFTEST", .flag = "fp8_schema_selftest", .file = FL_FILE_FP8_CONFIG,
        .backends = TE, .in_fp8_recipe_kwargs = true,
        .help = "test only (FP8LAB_SCHEMA_SELFTEST=1): one row of the settings table reaching every place",
        .question = "Schema self-test value (0..99)"},
};
_Static_assert(sizeof ROWS / sizeof *ROWS == FL_SET_COUNT, "a setting without a row");

/* The self-test row is visible when FP8LAB_SCHEMA_SELFTEST=1 at the first look: decided once, so the
 * table never changes under a running program. */
static bool selftest_visible(void) {
    static _Atomic int state = -1;
    int s = atomic_load(&state);
    if (s < 0) {
        const char *e = getenv("FP8LAB_SCHEMA_SELFTEST");
        s = e && strcmp(e, "1") == 0;
        int expected = -1;
        if (!atomic_compare_exchange_strong(&state, &expected, s)) s = expected;
    }
    return s == 1;
}

const fl_setting *fl_setting_info(fl_setting_id k) {
    if ((unsigned)k >= FL_SET_COUNT) return NULL;
    if (k == FL_SET_SCHEMA_SELFTEST && !selftest_visible()) return NULL;
    return &ROWS[k];
}

int fl_setting_find(const char *name) {
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *r = fl_setting_info((fl_setting_id)k);
        if (r && (strcmp(name, r->name) == 0 || (r->alias && strcmp(name, r->alias) == 0))) return k;
    }
    return -1;
}

/* ---- values ------------------------------------------------------------------------------------ */

const char *fl_setting_quote(const char *s, size_t len, char q, char *buf, size_t n) {
    size_t o = 0;
    if (n < 16) { if (n) buf[0] = 0; return buf; }
    buf[o++] = q;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i >= 40 || o + 8 >= n) { memcpy(buf + o, "...", 3); o += 3; break; }
        if (ch == (unsigned char)q || ch == '\\') { buf[o++] = '\\'; buf[o++] = (char)ch; }
        else if (ch < 0x20 || ch >= 0x7f) o += (size_t)snprintf(buf + o, n - o, "\\x%02X", ch);
        else buf[o++] = (char)ch;
    }
    buf[o++] = q;
    buf[o] = 0;
    return buf;
}

static bool eq(const char *s, size_t len, const char *word) {
    return strlen(word) == len && memcmp(s, word, len) == 0;
}
static bool ieq(const char *s, size_t len, const char *word) {
    return strlen(word) == len && strncasecmp(s, word, len) == 0;
}

/* YAML 1.1 booleans as PyYAML (and so Accelerate) resolves plain scalars: -1 when not one. */
static int yaml_bool(const char *s, size_t len) {
    static const char *const T[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const F[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        if (eq(s, len, T[i])) return 1;
        if (eq(s, len, F[i])) return 0;
    }
    return -1;
}

/* Booleans in flags, variables, answers and the string form of override_linear_precision, any case: the words of
 * Accelerate's str_to_bool, which reads its variables and --fp8_override_linear_precision. */
static int loose_bool(const char *s, size_t len) {
    static const char *const T[] = {"true", "yes", "on", "y", "t", "1"};
    static const char *const F[] = {"false", "no", "off", "n", "f", "0"};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        if (ieq(s, len, T[i])) return 1;
        if (ieq(s, len, F[i])) return 0;
    }
    return -1;
}

#define BOOL_WORDS "yes/no, on/off, y/n, t/f, 1/0, in any case"
const char fl_setting_bool_words[] = BOOL_WORDS;
static const char also_bool[] = " (also " BOOL_WORDS ")";   /* after "expected a boolean (true or false), got ..." */

int fl_setting_bool(const char *s, size_t len, fl_setting_from from) {
    return from == FL_FROM_TEXT ? loose_bool(s, len) : from == FL_FROM_YAML_PLAIN ? yaml_bool(s, len) : -1;
}

static bool parse_int(const char *s, size_t len, long long *out) {
    size_t i = 0;
    bool neg = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i == len || len - i > 12) return false;
    long long v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

const char *fl_setting_expected(fl_setting_id k, char *buf, size_t n) {
    const fl_setting *r = fl_setting_info(k);
    if (!r || n == 0) { if (n) buf[0] = 0; return buf; }
    switch (r->type) {
    case FL_SETTING_CHOICE: {
        size_t o = (size_t)snprintf(buf, n, "one of ");
        for (int i = 0; r->choices[i] && o < n; i++)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", r->choices[i]);
        break;
    }
    case FL_SETTING_INT:
        if (r->max >= BIG) snprintf(buf, n, "an integer >= %d", r->min);
        else snprintf(buf, n, "an integer in %d..%d", r->min, r->max);
        break;
    case FL_SETTING_BOOL: snprintf(buf, n, "a boolean (true or false)"); break;
    case FL_SETTING_BOOL3:
        snprintf(buf, n, "three booleans for (fprop, dgrad, wgrad), as [false, false, true] or \"(false, false, true)\"");
        break;
    case FL_SETTING_FUNC: snprintf(buf, n, "a function"); break;
    default: buf[0] = 0; break;
    }
    return buf;
}

void fl_setting_mismatch(fl_setting_id k, const char *got, char *why, size_t n) {
    char exp[200], *end;
    const fl_setting *r = fl_setting_info(k);
    double v = got ? strtod(got, &end) : 0.0;
    if (r && r->type == FL_SETTING_INT && got && end != got && *end == 0 && v > r->max)   /* past the cap: say it */
        snprintf(why, n, "expected an integer in %d..%d, got %s", r->min, r->max, got);
    else
        snprintf(why, n, "expected %s, got %s", fl_setting_expected(k, exp, sizeof exp), got);
}

/* "a, b, c", "(a, b, c)" or "[a,b,c]" → mask; false when malformed. */
static bool parse_bool3(const char *s, size_t len, int *out) {
    size_t i = 0, end = len;
    while (i < end && (s[i] == ' ' || s[i] == '\t')) i++;
    while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t')) end--;
    if (i < end && (s[i] == '(' || s[i] == '[')) {
        char close = s[i] == '(' ? ')' : ']';
        if (end - i < 2 || s[end - 1] != close) return false;
        i++, end--;
    }
    int mask = 0, item = 0;
    while (item < 3) {
        while (i < end && (s[i] == ' ' || s[i] == '\t')) i++;
        size_t a = i;
        while (i < end && s[i] != ',') i++;
        size_t b = i;
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
        int v = loose_bool(s + a, b - a);
        if (v < 0) return false;
        if (v) mask |= 1 << item;
        item++;
        if (item < 3) {
            if (i >= end) return false;
            i++;  /* the comma */
        }
    }
    if (i != end) return false;
    *out = mask;
    return true;
}

bool fl_setting_parse(fl_setting_id k, const char *s, size_t len, fl_setting_from from, int *out, char *why, size_t n) {
    const fl_setting *r = fl_setting_info(k);
    if (!r) { snprintf(why, n, "no setting number %d", (int)k); return false; }
    if (from == FL_FROM_TEXT) {   /* surrounding blanks are not part of a flag's or variable's value */
        while (len > 0 && isspace((unsigned char)s[0])) s++, len--;
        while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
    }
    if (r->unsupported) { snprintf(why, n, "not supported: %s", r->unsupported); return false; }
    bool plain = from != FL_FROM_YAML_QUOTED, yaml = from != FL_FROM_TEXT;
    char exp[200], got[200];
    fl_setting_expected(k, exp, sizeof exp);
    /* A plain number is shown as written; anything else in quotes, so "3" and 3 read differently. */
    bool numeric = plain && len > 0 && len < 40 && strspn(s, "0123456789+-.eE") == len;
    if (numeric) snprintf(got, sizeof got, "%.*s", (int)len, s);
    else fl_setting_quote(s, len, '"', got, sizeof got);
    const char *unquote = "";
    switch (r->type) {
    case FL_SETTING_CHOICE:
        for (int i = 0; r->choices[i]; i++)
            if (ieq(s, len, r->choices[i])) { *out = i; return true; }
        /* YAML 1.1 reads a bare `no` as false; Accelerate quotes it, people do not. */
        if (yaml && plain && yaml_bool(s, len) == 0)
            for (int i = 0; r->choices[i]; i++)
                if (strcmp(r->choices[i], "no") == 0) { *out = i; return true; }
        if (r->refused && ieq(s, len, r->refused)) {
            snprintf(why, n, "%s: expected %s, got %s", r->refused_why, exp, got);
            return false;
        }
        break;
    case FL_SETTING_INT: {
        long long v;
        if (!parse_int(s, len, &v)) break;
        if (!plain) { unquote = " (a number in quotes is a string: remove the quotes)"; break; }
        {   /* YAML 1.1 (Accelerate's PyYAML) reads 010 as octal 8: a leading zero is refused in a file */
            size_t d = (s[0] == '+' || s[0] == '-') ? 1 : 0;
            if (yaml && len - d > 1 && s[d] == '0') {
                snprintf(why, n, "expected %s, got %s (a leading zero: YAML 1.1 readers such as Accelerate's take "
                         "it as octal; write the number without it)", exp, got);
                return false;
            }
        }
        if (v < r->min || v > r->max) {
            /* past an "unbounded" setting's cap: the cap is the reason, not the lower bound */
            if (v > r->max) snprintf(why, n, "expected an integer in %d..%d, got %lld", r->min, r->max, v);
            else snprintf(why, n, "expected %s, got %lld", exp, v);
            return false;
        }
        *out = (int)v;
        return true;
    }
    case FL_SETTING_BOOL: {
        int v = fl_setting_bool(s, len, from);
        if (v >= 0) { *out = v; return true; }
        if (yaml && !plain && yaml_bool(s, len) >= 0) unquote = " (a boolean in quotes is a string: remove the quotes)";
        else if (!yaml) unquote = also_bool;   /* what a flag or variable takes */
        break;
    }
    case FL_SETTING_BOOL3: {
        int b = fl_setting_bool(s, len, from);
        if (b == 0) { *out = 0; return true; }   /* Accelerate writes `false` for "no override" */
        if (b == 1) {
            snprintf(why, n, "true is ambiguous: expected %s", exp);
            return false;
        }
        if (parse_bool3(s, len, out)) return true;
        break;
    }
    default: break;
    }
    snprintf(why, n, "expected %s, got %s%s", exp, got, unquote);
    return false;
}

bool fl_setting_check_number(fl_setting_id k, double v, int *out, char *why, size_t n) {
    const fl_setting *r = fl_setting_info(k);
    char got[64];
    if (v != v) snprintf(got, sizeof got, "nan");
    else if (isinf(v)) snprintf(got, sizeof got, v > 0 ? "inf" : "-inf");
    else if (v == floor(v) && fabs(v) < 1e15) snprintf(got, sizeof got, "%.0f", v);
    else snprintf(got, sizeof got, "%.14g", v);
    if (r && r->type == FL_SETTING_INT && v == floor(v) && v >= r->min && v <= r->max) {
        *out = (int)v;
        return true;
    }
    fl_setting_mismatch(k, got, why, n);
    return false;
}

const char *fl_setting_format(fl_setting_id k, int v, char *buf, size_t n) {
    const fl_setting *r = fl_setting_info(k);
    if (!r || n == 0) { if (n) buf[0] = 0; return buf; }
    switch (r->type) {
    case FL_SETTING_CHOICE: snprintf(buf, n, "%s", r->choices[v]); break;
    case FL_SETTING_INT: snprintf(buf, n, "%d", v); break;
    case FL_SETTING_BOOL: snprintf(buf, n, "%s", v ? "true" : "false"); break;
    case FL_SETTING_BOOL3:
        snprintf(buf, n, "%s,%s,%s", v & FL_OVERRIDE_FPROP ? "true" : "false",
                 v & FL_OVERRIDE_DGRAD ? "true" : "false", v & FL_OVERRIDE_WGRAD ? "true" : "false");
        break;
    default: buf[0] = 0; break;
    }
    return buf;
}

/* ---- a set of values ------------------------------------------------------------------------------ */

void fl_settings_init(fl_settings *s) { memset(s, 0, sizeof *s); }

bool fl_settings_has(const fl_settings *s, fl_setting_id k) {
    return (unsigned)k < FL_SET_COUNT && (s->set >> k) & 1u;
}

int fl_settings_get(const fl_settings *s, fl_setting_id k) {
    const fl_setting *r = fl_setting_info(k);
    if (!r) return 0;
    return fl_settings_has(s, k) ? s->value[k] : r->def;
}

void fl_settings_put(fl_settings *s, fl_setting_id k, int v) {
    if ((unsigned)k >= FL_SET_COUNT) return;
    s->value[k] = v;
    s->set |= 1u << k;
}

fl_status fl_settings_set_text(fl_settings *s, fl_setting_id k, const char *text, const char *origin) {
    const fl_setting *r = fl_setting_info(k);
    if (!r) return FL_ERR(FL_EINVAL, "settings: no setting number %d", (int)k);
    char why[640];
    int v;
    if (!fl_setting_parse(k, text, strlen(text), FL_FROM_TEXT, &v, why, sizeof why))
        return FL_ERR(FL_EINVAL, "%s: %s", origin ? origin : r->name, why);
    fl_settings_put(s, k, v);
    return FL_OK;
}

/* ---- names: edit distance and suggestions --------------------------------------------------------- */

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-folded. */
static size_t osa_distance(const char *a, size_t la, const char *b, size_t lb) {
    enum { W = 65 };
    size_t d[W][W];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

size_t fl_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return SIZE_MAX;
    return osa_distance(a, la, b, lb);
}

/* One of a and b (case-folded) starts with the other, both at least 4 bytes. */
static bool prefix_pair(const char *a, size_t la, const char *b, size_t lb) {
    if (la < 4 || lb < 4) return false;
    return strncasecmp(a, b, la < lb ? la : lb) == 0;
}

const char *fl_suggest(const char *word, const char *const *cands, size_t n) {
    size_t lw = strlen(word);
    if (lw == 0 || lw > 64) return NULL;
    size_t limit = lw / 4 < 1 ? 1 : lw / 4 > 3 ? 3 : lw / 4;
    const char *best = NULL;
    size_t bestd = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t lc = strlen(cands[i]);
        if (lc > 64) continue;
        size_t d = osa_distance(word, lw, cands[i], lc);
        if (d < bestd) { bestd = d; best = cands[i]; }
    }
    if (best) return best;
    for (size_t i = 0; i < n; i++)
        if (prefix_pair(word, lw, cands[i], strlen(cands[i]))) return cands[i];
    return NULL;
}
