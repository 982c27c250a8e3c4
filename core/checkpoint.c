/* checkpoint.c — safetensors writer (atomic) and validating reader; see checkpoint.h and
 * docs/checkpoints.md. The reader checks the header against the file size before anything sized
 * by the header is allocated, and every offset pair against the data area. */
#include "checkpoint.h"
#include "fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "cpu/par.h"

static const char *const ST_NAMES[] = { "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "U8", "BOOL" };
static const size_t ST_SIZES[] = { 4, 2, 2, 1, 1, 8, 4, 1, 1 };
_Static_assert(sizeof ST_NAMES / sizeof *ST_NAMES == FL_ST_DTYPE_COUNT, "a name per safetensors dtype");
_Static_assert(sizeof ST_SIZES / sizeof *ST_SIZES == FL_ST_DTYPE_COUNT, "a size per safetensors dtype");

const char *fl_st_dtype_name(fl_st_dtype d) { return (unsigned)d < FL_ST_DTYPE_COUNT ? ST_NAMES[d] : "?"; }
size_t fl_st_dtype_size(fl_st_dtype d) { return (unsigned)d < FL_ST_DTYPE_COUNT ? ST_SIZES[d] : 0; }

fl_st_dtype fl_st_from_dtype(fl_dtype d) {
    switch (d) {
    case FL_BF16: return FL_ST_BF16;
    case FL_F16: return FL_ST_F16;
    case FL_E4M3: return FL_ST_F8_E4M3;
    case FL_E5M2: return FL_ST_F8_E5M2;
    default: return FL_ST_F32;
    }
}

bool fl_st_to_dtype(fl_st_dtype d, fl_dtype *out) {
    switch (d) {
    case FL_ST_F32: *out = FL_F32; return true;
    case FL_ST_F16: *out = FL_F16; return true;
    case FL_ST_BF16: *out = FL_BF16; return true;
    case FL_ST_F8_E4M3: *out = FL_E4M3; return true;
    case FL_ST_F8_E5M2: *out = FL_E5M2; return true;
    default: return false;
    }
}

/* ---- reader ------------------------------------------------------------------------------- */

void fl_st_close(fl_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->entries[i].name);
    free(f->entries);
    free(f->by_name);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->path);
    free(f);
}

int fl_st_find(const fl_st_file *f, const char *name) {
    if (!f->by_name) {   /* not indexed (a parse that failed part way) */
        for (int i = 0; i < f->n; i++) if (strcmp(f->entries[i].name, name) == 0) return i;
        return -1;
    }
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->entries[f->by_name[mid]].name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

bool fl_st_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
        if (len == 0 || (c >= 0xE0 && c < 0xF0 && len != 3) || i + (size_t)len > n) return false;
        uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (size_t)len;
    }
    return true;
}

const char *fl_st_meta(const fl_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++) if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

static int cmp_begin(const void *a, const void *b) {
    const fl_st_entry *x = *(const fl_st_entry *const *)a, *y = *(const fl_st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const fl_st_entry *const *)a)->name, (*(const fl_st_entry *const *)b)->name);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static fl_status parse_entry(fl_st_entry *e, const cJSON *item, const char *what) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": expected an object {dtype, shape, data_offsets}", what, name);
    int fields = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        if (strcmp(c->string, "dtype") && strcmp(c->string, "shape") && strcmp(c->string, "data_offsets"))
            return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": unknown field \"%s\" (valid: dtype, shape, data_offsets)",
                          what, name, c->string);
        fields++;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt || !sh || !off || fields != 3)
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": needs exactly dtype, shape and data_offsets", what, name);
    if (!cJSON_IsString(dt))
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": dtype must be a string", what, name);
    int d = 0;
    while (d < FL_ST_DTYPE_COUNT && strcmp(ST_NAMES[d], dt->valuestring) != 0) d++;
    if (d == FL_ST_DTYPE_COUNT)
        return FL_ERR(FL_EUNSUPPORTED, "%s: tensor \"%s\": unknown or unsupported dtype \"%.40s\" (supported: F32, F16, "
                      "BF16, F8_E4M3, F8_E5M2, I64, I32, U8, BOOL)", what, name, dt->valuestring);
    e->dtype = (fl_st_dtype)d;
    if (!cJSON_IsArray(sh)) return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": shape must be an array", what, name);
    int nd = cJSON_GetArraySize(sh);
    /* more than FL_ST_MAX_DIMS: the file stays readable, the tensor is listed and refused when read (ndim says
     * how many it has; shape keeps the first FL_ST_MAX_DIMS) */
    e->ndim = nd;
    uint64_t numel = 1;
    bool overflow = false, zero = false;
    int k = 0;
    for (const cJSON *c = sh->child; c; c = c->next, k++) {
        uint64_t v;
        if (!json_uint(c, &v))
            return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": shape[%d] must be a non-negative integer", what, name, k);
        if (k < FL_ST_MAX_DIMS) e->shape[k] = (int64_t)v;
        if (v == 0) zero = true;
        else if (numel > UINT64_MAX / v) overflow = true;
        else numel *= v;
    }
    /* A zero dimension makes the product 0 whatever the others are; otherwise an overflow is an error. */
    if (zero) { numel = 0; overflow = false; }
    uint64_t esz = ST_SIZES[d];
    if (overflow || numel > UINT64_MAX / esz)
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": the element count of its shape overflows", what, name);
    e->numel = numel;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &e->begin) ||
        !json_uint(off->child->next, &e->end))
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": data_offsets must be [begin, end], two non-negative integers", what, name);
    if (e->end < e->begin)
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin", what, name,
                      (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != numel * esz)
        return FL_ERR(FL_EINVAL, "%s: tensor \"%s\": data_offsets span %llu bytes, its shape and dtype %s need %llu",
                      what, name, (unsigned long long)(e->end - e->begin), ST_NAMES[d], (unsigned long long)(numel * esz));
    return FL_OK;
}

static fl_status parse_metadata(fl_st_file *f, const cJSON *m, const char *what) {
    if (!cJSON_IsObject(m)) return FL_ERR(FL_EINVAL, "%s: __metadata__ must be an object of strings", what);
    int n = cJSON_GetArraySize(m);
    f->meta_keys = calloc((size_t)n + 1, sizeof *f->meta_keys);
    f->meta_vals = calloc((size_t)n + 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return FL_ERR(FL_ENOMEM, "%s: out of memory reading __metadata__", what);
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return FL_ERR(FL_EINVAL, "%s: __metadata__ \"%s\": values must be strings", what, c->string);
        f->meta_keys[f->n_meta] = strdup(c->string);
        f->meta_vals[f->n_meta] = strdup(c->valuestring);
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1])
            return FL_ERR(FL_ENOMEM, "%s: out of memory reading __metadata__", what);
    }
    /* duplicate keys: adjacent once sorted (a pairwise scan took minutes for 10^5 keys) */
    char **keys = malloc(((size_t)f->n_meta + 1) * sizeof *keys);
    if (!keys) return FL_ERR(FL_ENOMEM, "%s: out of memory reading __metadata__", what);
    memcpy(keys, f->meta_keys, (size_t)f->n_meta * sizeof *keys);
    qsort(keys, (size_t)f->n_meta, sizeof *keys, cmp_cstr);
    for (int i = 1; i < f->n_meta; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            fl_status st = FL_ERR(FL_EINVAL, "%s: __metadata__ has the key \"%s\" twice", what, keys[i]);
            free(keys);
            return st;
        }
    free(keys);
    return FL_OK;
}

/* Every number in a safetensors header is a shape dimension or a data offset, a non-negative integer, and cJSON
 * keeps only its double: "1.0", "1e0" and "-0" would read as integers and 2^53 + 1 as 2^53. So the text of each
 * number outside strings is checked here: plain digits, no leading zero, at most 2^53. hdr is valid JSON to cJSON
 * (parsed already). */
static fl_status header_numbers_plain(const char *hdr, size_t hlen, const char *what) {
    for (size_t i = 0; i < hlen; i++) {
        if (hdr[i] == '"') {
            for (i++; i < hlen && hdr[i] != '"'; i++)
                if (hdr[i] == '\\') i++;
            continue;
        }
        if (hdr[i] != '-' && (hdr[i] < '0' || hdr[i] > '9')) continue;
        const bool negative = hdr[i] == '-';
        bool plain = true, nonzero = false;
        uint64_t v = 0;
        size_t j = i + negative;
        for (; j < hlen && hdr[j] && strchr("+-.eE0123456789", hdr[j]); j++) {
            if (hdr[j] < '0' || hdr[j] > '9') { plain = false; continue; }
            nonzero |= hdr[j] != '0';
            if (v <= 9007199254740992ULL) v = v * 10 + (uint64_t)(hdr[j] - '0');
        }
        /* JSON has no leading zeros ("01", "00"): the reference refuses them, cJSON reads them as 1 and 0 */
        if (hdr[i + negative] == '0' && j > i + negative + 1) plain = false;
        if (!plain || (negative && !nonzero) || (!negative && v > 9007199254740992ULL))
            return FL_ERR(FL_EINVAL, "%s: the header writes the number %.*s; the format's numbers (shape, data_offsets) "
                          "are non-negative integers up to 2^53, written as plain digits without a leading zero", what,
                          (int)(j - i < 40 ? j - i : 40), hdr + i);
        i = j - 1;
    }
    return FL_OK;
}

/* What cJSON lets through in a header string (a name, a dtype, metadata) and the reference refuses or reads otherwise:
 * a raw control character (JSON allows none in a string; a raw NUL cut "a<NUL>b" to "a"), and a "\u0000" escape, which
 * cJSON's C strings cut there ("F32\u0000x" read as F32) where the reference keeps it, a string fp8lab cannot hold.
 * hdr is valid JSON to cJSON (parsed already). */
static fl_status header_strings_plain(const char *hdr, size_t hlen, const char *what) {
    bool in_string = false;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char c = (unsigned char)hdr[i];
        if (c == '"') in_string = !in_string;
        else if (in_string && c < 0x20)
            return FL_ERR(FL_EINVAL, "%s: a string in the header holds the control character 0x%02X at byte %zu "
                          "(JSON requires it escaped)", what, c, i);
        else if (in_string && c == '\\') {
            if (i + 5 < hlen && hdr[i + 1] == 'u' && memcmp(hdr + i + 2, "0000", 4) == 0)
                return FL_ERR(FL_EINVAL, "%s: a string in the header holds a NUL byte (\\u0000 at byte %zu); names, "
                              "dtypes and metadata cannot hold one here", what, i);
            i++;
        }
    }
    return FL_OK;
}

/* Parse and validate header `hdr` (hlen bytes) of a file whose data area has data_size bytes. */
static fl_status parse_header(fl_st_file *f, const char *hdr, size_t hlen, uint64_t data_size, const char *what) {
    if (hlen == 0 || hdr[0] != '{')
        return FL_ERR(FL_EINVAL, "%s: the header is not a JSON object (it must start with '{')", what);
    if (!fl_st_utf8_valid(hdr, hlen))
        return FL_ERR(FL_EINVAL, "%s: the header is not valid UTF-8 (the format requires it)", what);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, false);
    if (!root) return FL_ERR(FL_EINVAL, "%s: the header is not valid JSON (near byte %zu)", what,
                             (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - hdr : 0));
    fl_status st = header_strings_plain(hdr, hlen, what);
    if (st != FL_OK) goto done;
    /* Only trailing spaces (the writer's padding to 8 bytes) may follow the object. */
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ') { st = FL_ERR(FL_EINVAL, "%s: bytes after the header's JSON object (only spaces may pad it)", what); goto done; }
    if (!cJSON_IsObject(root)) { st = FL_ERR(FL_EINVAL, "%s: the header is not a JSON object", what); goto done; }
    int count = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    if (!f->entries) { st = FL_ERR(FL_ENOMEM, "%s: out of memory reading the header", what); goto done; }
    bool have_meta = false;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (have_meta) { st = FL_ERR(FL_EINVAL, "%s: __metadata__ appears twice", what); goto done; }
            have_meta = true;
            if ((st = parse_metadata(f, c, what)) != FL_OK) goto done;
            continue;
        }
        if (c->string[0] == '\0') { st = FL_ERR(FL_EINVAL, "%s: a tensor has an empty name", what); goto done; }
        fl_st_entry *e = &f->entries[f->n];
        e->name = strdup(c->string);
        if (!e->name) { st = FL_ERR(FL_ENOMEM, "%s: out of memory", what); goto done; }
        f->n++;
        if ((st = parse_entry(e, c, what)) != FL_OK) goto done;
    }
    /* after the fields' own checks, which name the field: what only the number's text shows */
    if ((st = header_numbers_plain(hdr, hlen, what)) != FL_OK) goto done;
    /* Unique names; contiguous, non-overlapping offsets that cover the data area exactly. */
    fl_st_entry **order = malloc(((size_t)f->n + 1) * sizeof *order);
    if (!order) { st = FL_ERR(FL_ENOMEM, "%s: out of memory", what); goto done; }
    for (int i = 0; i < f->n; i++) order[i] = &f->entries[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            st = FL_ERR(FL_EINVAL, "%s: the tensor name \"%s\" appears twice", what, order[i]->name);
            free(order);
            goto done;
        }
    if (!(f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name))) {
        st = FL_ERR(FL_ENOMEM, "%s: out of memory", what);
        free(order);
        goto done;
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = (int)(order[i] - f->entries);
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    uint64_t pos = 0;
    for (int i = 0; i < f->n && st == FL_OK; i++) {
        const fl_st_entry *e = order[i];
        if (e->end > data_size)
            st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": data_offsets [%llu, %llu] lie beyond the end of the data (%llu bytes; "
                        "the file is truncated or the offsets are wrong)", what, e->name, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)data_size);
        else if (e->begin < pos)
            st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap the previous tensor \"%s\"", what,
                        e->name, (unsigned long long)e->begin, (unsigned long long)e->end, order[i - 1]->name);
        else if (e->begin > pos)
            st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": a gap of %llu bytes before its data (offsets must be contiguous)",
                        what, e->name, (unsigned long long)(e->begin - pos));
        pos = e->end;
    }
    free(order);
    if (st == FL_OK && pos != data_size)
        st = FL_ERR(FL_EINVAL, "%s: the tensors cover %llu bytes of data, the file has %llu after the header", what,
                    (unsigned long long)pos, (unsigned long long)data_size);
done:
    cJSON_Delete(root);
    return st;
}

static fl_status check_prefix(uint64_t hlen, uint64_t total, const char *what) {
    if (total < 8) return FL_ERR(FL_EINVAL, "%s: %llu bytes, too short for a safetensors file (8-byte header length)",
                                 what, (unsigned long long)total);
    if (hlen > FL_ST_MAX_HEADER)
        return FL_ERR(FL_EINVAL, "%s: header length %llu exceeds the limit of %u bytes", what, (unsigned long long)hlen,
                      FL_ST_MAX_HEADER);
    if (hlen > total - 8)
        return FL_ERR(FL_EINVAL, "%s: header length %llu runs past the end of the file (%llu bytes)", what,
                      (unsigned long long)hlen, (unsigned long long)total);
    return FL_OK;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static fl_status new_file(fl_st_file **out, const char *what) {
    *out = calloc(1, sizeof **out);
    if (!*out) return FL_ERR(FL_ENOMEM, "out of memory");
    (*out)->fd = -1;
    (*out)->path = strdup(what);
    if (!(*out)->path) { free(*out); *out = NULL; return FL_ERR(FL_ENOMEM, "out of memory"); }
    return FL_OK;
}

fl_status fl_st_parse(fl_st_file **out, const uint8_t *buf, size_t len, const char *what) {
    *out = NULL;
    uint64_t hlen = len >= 8 ? le64(buf) : 0;
    FL_TRY(check_prefix(hlen, len, what));
    fl_st_file *f;
    FL_TRY(new_file(&f, what));
    f->file_size = len;
    f->data_start = 8 + hlen;
    fl_status st = parse_header(f, (const char *)buf + 8, (size_t)hlen, len - 8 - hlen, what);
    if (st != FL_OK) { fl_st_close(f); return st; }
    *out = f;
    return FL_OK;
}

static fl_status pread_all(int fd, void *dst, size_t n, uint64_t off, const char *what) {
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return FL_ERR(FL_EIO, "%s: read failed: %s", what, strerror(errno));
        }
        if (r == 0) return FL_ERR(FL_EIO, "%s: the file ended early (it changed while being read?)", what);
        p += r; n -= (size_t)r; off += (uint64_t)r;
    }
    return FL_OK;
}

fl_status fl_st_open(fl_st_file **out, const char *path) {
    *out = NULL;
    /* O_NONBLOCK: opening a named pipe would otherwise wait for a writer before the type check below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int e = errno;
        return FL_ERR_SYS(FL_EIO, e, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return FL_ERR(FL_EIO, "%s: not a regular file", path);
    }
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    uint64_t total = (uint64_t)sb.st_size;
    uint8_t pre[8] = { 0 };
    fl_status st = total >= 8 ? pread_all(fd, pre, 8, 0, path) : FL_OK;
    uint64_t hlen = le64(pre);
    if (st == FL_OK) st = check_prefix(hlen, total, path);   /* before the header buffer is allocated */
    if (st != FL_OK) { close(fd); return st; }
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) { close(fd); return FL_ERR(FL_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen); }
    st = pread_all(fd, hdr, (size_t)hlen, 8, path);
    fl_st_file *f = NULL;
    if (st == FL_OK) st = new_file(&f, path);
    if (st == FL_OK) {
        f->fd = fd;
        f->file_size = total;
        f->data_start = 8 + hlen;
        st = parse_header(f, hdr, (size_t)hlen, total - 8 - hlen, path);
    }
    free(hdr);
    if (st != FL_OK) {
        if (f) fl_st_close(f); else close(fd);
        return st;
    }
    *out = f;
    return FL_OK;
}

#define READ_CHUNK ((size_t)8 << 20)

/* Faults in the whole pages of [p, p + len) before a read fills them (advisory: older kernels answer EINVAL). */
static void prefault(uint8_t *p, size_t len) {
#ifdef MADV_POPULATE_WRITE
    const uintptr_t P = 4096;
    uintptr_t a = ((uintptr_t)p + P - 1) & ~(P - 1), b = ((uintptr_t)p + len) & ~(P - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)p, (void)len;
#endif
}

fl_status fl_st_read(const fl_st_file *f, int i, void *dst) {
    if (i < 0 || i >= f->n) return FL_ERR(FL_EINVAL, "%s: no tensor #%d", f->path, i);
    if (f->fd < 0) return FL_ERR(FL_EINVAL, "%s: parsed from memory, no data to read", f->path);
    const fl_st_entry *e = &f->entries[i];
    size_t n = (size_t)(e->end - e->begin);
    if (n < READ_CHUNK * 2) return pread_all(f->fd, dst, n, f->data_start + e->begin, f->path);
    /* A large tensor is read in chunks by all threads. Its destination is usually fresh memory that
     * the read would fault in page by page, which (with the kernel zeroing each page) took about as
     * long as the copy itself when measured: each thread first prefaults its chunk (advisory; older
     * kernels answer EINVAL and the read faults instead), then reads it. */
    int64_t nchunks = (int64_t)((n + READ_CHUNK - 1) / READ_CHUNK);
    int err = 0;    /* the first failure's errno, or -1 for a short file */
    FL_PAR_FOR(1, schedule(dynamic, 1),
    for (int64_t c = 0; c < nchunks; c++) {
        size_t lo = (size_t)c * READ_CHUNK, len = n - lo < READ_CHUNK ? n - lo : READ_CHUNK;
        uint8_t *p = (uint8_t *)dst + lo;
        uint64_t off = f->data_start + e->begin + lo;
        prefault(p, len);
        while (len > 0) {
            int seen;
            FL_PRAGMA(omp atomic read)
            seen = err;
            if (seen) break;
            ssize_t r = pread(f->fd, p, len, (off_t)off);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int mine = r < 0 ? errno : -1;
                FL_PRAGMA(omp critical(fl_st_read_err))
                { if (!err) err = mine; }
                break;
            }
            p += r; len -= (size_t)r; off += (uint64_t)r;
        }
    });
    if (err == -1) return FL_ERR(FL_EIO, "%s: the file ended early (it changed while being read?)", f->path);
    if (err) return FL_ERR(FL_EIO, "%s: read failed: %s", f->path, strerror(err));
    return FL_OK;
}

/* ---- atomic writes ------------------------------------------------------------------------ */

static fl_status write_all(int fd, const void *buf, size_t n, const char *what) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return FL_ERR(FL_EIO, "%s: write failed: %s", what, strerror(errno));
        }
        p += w; n -= (size_t)w;
    }
    return FL_OK;
}

/* ---- writer ------------------------------------------------------------------------------- */

struct save_ctx { const char *path; const char *hdr; size_t hlen; const fl_st_item *items; int n; const size_t *sizes; };

/* Write-behind: the data goes out in chunks, and after each one the kernel is told to start writing it
 * back (sync_file_range WRITE), while the chunk before it is waited for. Dirty pages stay near two
 * chunks instead of piling up until the kernel throttles the writer (seen here: a plain write loop
 * dropped from ~3.5 GB/s to ~0.4 GB/s after the first ~500 MB), and the final fsync has little left. */
#define WB_CHUNK ((uint64_t)32 << 20)
struct wb { int fd; uint64_t off, flushed, waited; const char *path; };

static void wb_push(struct wb *w, bool final) {
    while (w->off - w->flushed >= WB_CHUNK || (final && w->off > w->flushed)) {
        uint64_t len = w->off - w->flushed < WB_CHUNK ? w->off - w->flushed : WB_CHUNK;
        /* advisory: fsync still guarantees durability, so a failure here only loses the overlap */
        (void)sync_file_range(w->fd, (off_t)w->flushed, (off_t)len, SYNC_FILE_RANGE_WRITE);
        if (w->flushed > w->waited)
            (void)sync_file_range(w->fd, (off_t)w->waited, (off_t)(w->flushed - w->waited),
                                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        w->waited = w->flushed;
        w->flushed += len;
    }
}

static fl_status wb_write(struct wb *w, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        size_t k = n < WB_CHUNK ? n : (size_t)WB_CHUNK;
        FL_TRY(write_all(w->fd, p, k, w->path));
        w->off += k; p += k; n -= k;
        wb_push(w, false);
    }
    return FL_OK;
}

static fl_status fill_st(int fd, void *ctx) {
    struct save_ctx *c = ctx;
    struct wb w = { fd, 0, 0, 0, c->path };
    uint8_t pre[8];
    for (int i = 0; i < 8; i++) pre[i] = (uint8_t)((uint64_t)c->hlen >> (8 * i));
    FL_TRY(wb_write(&w, pre, 8));
    FL_TRY(wb_write(&w, c->hdr, c->hlen));
    for (int i = 0; i < c->n; i++) {
        FL_TRY(fl_check_interrupt());
        if (c->sizes[i]) FL_TRY(wb_write(&w, c->items[i].data, c->sizes[i]));
    }
    wb_push(&w, true);
    return FL_OK;
}

fl_status fl_st_save(const char *path, const fl_st_item *items, int n, const char *const *meta, int n_meta) {
    fl_status st = FL_OK;
    char *json = NULL, *hdr = NULL;
    size_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    cJSON *root = cJSON_CreateObject();
    if (!sizes || !root) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < n_meta; i++) {
            if (!meta[2 * i] || !meta[2 * i + 1]) { st = FL_ERR(FL_EINVAL, "%s: metadata entry %d is NULL", path, i); goto out; }
            if (cJSON_GetObjectItemCaseSensitive(m, meta[2 * i])) {
                st = FL_ERR(FL_EINVAL, "%s: metadata key \"%s\" given twice", path, meta[2 * i]);
                goto out;
            }
            if (!cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1])) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
        }
        if (!m) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
    }
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const fl_st_item *it = &items[i];
        if (!it->name || !it->name[0] || strcmp(it->name, "__metadata__") == 0) {
            st = FL_ERR(FL_EINVAL, "%s: tensor %d has no usable name (empty or \"__metadata__\")", path, i + 1);
            goto out;
        }
        if ((unsigned)it->dtype >= FL_ST_DTYPE_COUNT || it->ndim < 0 || it->ndim > FL_ST_MAX_DIMS) {
            st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": bad dtype or rank", path, it->name);
            goto out;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, it->name)) {
            st = FL_ERR(FL_EINVAL, "%s: the tensor name \"%s\" is given twice", path, it->name);
            goto out;
        }
        uint64_t numel = 1;
        cJSON *e = cJSON_AddObjectToObject(root, it->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        if (!shape || !cJSON_AddStringToObject(e, "dtype", ST_NAMES[it->dtype])) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
        for (int k = 0; k < it->ndim; k++) {
            if (it->shape[k] < 0) { st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": negative size", path, it->name); goto out; }
            numel *= (uint64_t)it->shape[k];
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)it->shape[k]));
        }
        sizes[i] = (size_t)(numel * ST_SIZES[it->dtype]);
        if (sizes[i] && !it->data) { st = FL_ERR(FL_EINVAL, "%s: tensor \"%s\": no data", path, it->name); goto out; }
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        if (!off) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)pos));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(pos + sizes[i])));
        pos += sizes[i];
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
    size_t jlen = strlen(json), hlen = (jlen + 7) & ~(size_t)7;   /* data starts 8-byte aligned */
    hdr = malloc(hlen);
    if (!hdr) { st = FL_ERR(FL_ENOMEM, "out of memory"); goto out; }
    memcpy(hdr, json, jlen);
    memset(hdr + jlen, ' ', hlen - jlen);
    if (hlen > FL_ST_MAX_HEADER) { st = FL_ERR(FL_EINVAL, "%s: the header would exceed %u bytes", path, FL_ST_MAX_HEADER); goto out; }
    struct save_ctx c = { path, hdr, hlen, items, n, sizes };
    st = fl_write_atomic_fn(path, fill_st, &c);
out:
    cJSON_Delete(root);
    free(json);
    free(hdr);
    free(sizes);
    return st;
}

/* ---- exact copies --------------------------------------------------------------------------- */
#ifndef FL_ST_NO_TENSOR   /* the fuzz build links only the file format (Makefile: fuzz_safetensors) */

fl_status fl_tensor_clone_exact(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    const fl_device *dev = fl_device_get(t->device);
    if (!dev) return FL_ERR(FL_EDEVICE, "clone: device %d is not available", t->device);
    fl_tensor *c;
    FL_TRY(fl_tensor_empty(&c, t->dtype, t->ndim, t->shape, t->device));
    fl_status st = fl_tensor_numel(t) ? dev->copy(c, t) : FL_OK;   /* same dtype: bytes as they are */
    if (st == FL_OK && t->scale_inv) {
        fl_tensor *si = NULL;
        st = fl_tensor_clone_exact(&si, t->scale_inv);
        if (st == FL_OK) {
            fl_tensor_adopt_scale(c, si, t);
        }
    }
    if (st != FL_OK) { fl_tensor_release(c); return st; }
    *out = c;
    return FL_OK;
}
#endif
