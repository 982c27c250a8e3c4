/* l_checkpoint.c — safetensors in Lua (docs/checkpoints.md): fp8.save_file, fp8.load_file,
 * fp8.safe_open (lazy, pread per tensor), plus the helpers lua/fp8/checkpointing.lua builds
 * save_state/load_state on (fp8._checkpoint: atomic text files, JSON through cJSON, exact tensor
 * copies, the RNG state).
 * FP8 convention: tensor `name` holds the bytes (F8_E4M3/F8_E5M2) and `name.."_scale_inv"` (F32) its
 * scale inverse: shape [1] per tensor, or the tensor's rank with every size 1 but the scaled axis. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "device.h"
#include "l_util.h"
#include "rng.h"

#define SAFE_OPEN_MT "fp8.SafeOpen"
#define SCALE_SUFFIX "_scale_inv"

/* ---- save_file ------------------------------------------------------------------------------ */

typedef struct { fl_tensor **held; int n; } held_list;   /* CPU tensors kept alive while writing */

static int held_gc(lua_State *L) {
    held_list *h = luaL_checkudata(L, 1, "fp8.checkpoint.held");
    for (int i = 0; i < h->n; i++) fl_tensor_release(h->held[i]);
    free(h->held);
    h->held = NULL; h->n = 0;
    return 0;
}

static held_list *new_held(lua_State *L, int cap) {
    held_list *h = lua_newuserdatauv(L, sizeof *h, 0);
    h->held = NULL; h->n = 0;
    if (luaL_newmetatable(L, "fp8.checkpoint.held")) {
        lua_pushcfunction(L, held_gc); lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    h->held = calloc((size_t)cap + 1, sizeof *h->held);
    if (!h->held) luaL_error(L, "save_file: out of memory");
    return h;
}

/* A contiguous CPU tensor with t's values (t itself when it already is one), owned by h. */
static fl_tensor *host_copy(lua_State *L, held_list *h, const fl_tensor *t) {
    fl_tensor *c = NULL, *d = NULL;
    FL_LCALL(L, fl_tensor_to_device(&d, t, FL_DEV_CPU));
    h->held[h->n++] = d;
    FL_LCALL(L, fl_tensor_contiguous(&c, d));
    h->held[h->n++] = c;
    return c;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A name or metadata string as the header will hold it: no NUL (a C string would cut it short, and the lookup
 * by the cut name found nothing: a crash), valid UTF-8 (the reference implementation refuses anything else). */
static const char *header_string(lua_State *L, int idx, const char *what) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (strlen(s) != len)
        luaL_error(L, "save_file: %s \"%s\" holds a NUL byte, which a safetensors header cannot", what, s);
    if (!fl_st_utf8_valid(s, len))
        luaL_error(L, "save_file: %s \"%s\" is not valid UTF-8, which a safetensors header must be", what, s);
    return s;
}

/* save_file({name = tensor, ...}, path [, {key = "value"}]) */
static int l_save_file(lua_State *L) {
    fl_lmaxargs(L, 3, "save_file", "({name = tensor}, path [, metadata])");
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *path = fl_lcheckpath(L, 2, "save_file");
    if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    /* Names, sorted (the file is then the same whatever the table's order). */
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_error(L, "save_file: tensor names must be strings, got a %s key", luaL_typename(L, -2));
        if (!fl_ltotensor(L, -1))
            return luaL_error(L, luaL_testudata(L, -1, FL_TENSOR_MT) ? "save_file: \"%s\" has been released (freed or closed)"
                                                                      : "save_file: \"%s\" must be a tensor, got %s",
                              lua_tostring(L, -2), luaL_typename(L, -1));
        header_string(L, -2, "tensor name");
        n++;
        lua_pop(L, 1);
    }
    const char **names = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *names, 0);
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) { names[k++] = lua_tostring(L, -2); lua_pop(L, 1); }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int nmeta = 0;
    if (lua_istable(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_error(L, "save_file: metadata must map strings to strings, got %s = %s",
                                  luaL_typename(L, -2), luaL_typename(L, -1));
            header_string(L, -2, "metadata key");
            header_string(L, -1, "metadata value");
            nmeta++;
            lua_pop(L, 1);
        }
    }
    const char **meta = lua_newuserdatauv(L, (2 * (size_t)nmeta + 1) * sizeof *meta, 0);
    if (nmeta) {
        int m = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) { meta[m++] = lua_tostring(L, -2); meta[m++] = lua_tostring(L, -1); lua_pop(L, 1); }
        qsort(meta, (size_t)nmeta, 2 * sizeof *meta, cmp_str);   /* pairs by key: the same file every time */
    }
    /* The arrays `names` (4) and `meta` (5) are userdata: they stay on the stack while the file is written. */
    lua_settop(L, 5);
    lua_newtable(L);   /* 6: anchors the companion names while the file is written */
    fl_st_item *items = lua_newuserdatauv(L, (2 * (size_t)n + 1) * sizeof *items, 0);
    int64_t *sshapes = lua_newuserdatauv(L, ((size_t)n + 1) * FL_MAX_DIMS * sizeof *sshapes, 0);
    char **snames = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *snames, 0);
    held_list *h = new_held(L, 4 * n);
    int ni = 0;
    for (int i = 0; i < n; i++) {
        lua_getfield(L, 1, names[i]);
        fl_tensor *t = fl_ltotensor(L, -1);
        fl_tensor *c = host_copy(L, h, t);
        lua_pop(L, 1);
        items[ni++] = (fl_st_item){ names[i], fl_st_from_dtype(c->dtype), c->ndim, c->shape, fl_tensor_data(c) };
        if (!c->scale_inv) continue;
        /* The companion scale inverse (the file-format convention at the top of this file). */
        lua_pushfstring(L, "%s" SCALE_SUFFIX, names[i]);
        lua_pushvalue(L, -1);
        if (lua_rawget(L, 1) != LUA_TNIL)
            return luaL_error(L, "save_file: \"%s\" is FP8, so its scale inverse is saved as \"%s\", which the table also "
                              "names; rename one of them", names[i], lua_tostring(L, -2));
        lua_pop(L, 1);
        snames[i] = (char *)lua_tostring(L, -1);
        lua_pushboolean(L, 1);
        lua_rawset(L, 6);
        fl_tensor *s = host_copy(L, h, c->scale_inv);
        int64_t *shp = &sshapes[(size_t)i * FL_MAX_DIMS];
        int nd = 1;
        if (c->scale_axis < 0) shp[0] = 1;
        else { nd = c->ndim; for (int d = 0; d < nd; d++) shp[d] = d == c->scale_axis ? c->shape[d] : 1; }
        items[ni++] = (fl_st_item){ snames[i], FL_ST_F32, nd, shp, fl_tensor_data(s) };
    }
    FL_LCALL(L, fl_st_save(path, items, ni, meta, nmeta));
    return 0;
}

/* ---- reading -------------------------------------------------------------------------------- */

typedef struct { fl_st_file *f; int device; } safe_open_box;

static fl_st_file *check_open(lua_State *L, int arg) {
    safe_open_box *b = luaL_checkudata(L, arg, SAFE_OPEN_MT);
    if (!b->f) luaL_error(L, "safe_open: the file was closed");
    return b->f;
}

/* __gc */
static int so_close(lua_State *L) {
    safe_open_box *b = luaL_checkudata(L, 1, SAFE_OPEN_MT);
    fl_st_close(b->f);
    b->f = NULL;
    return 0;
}
/* f:close() and __close: inside a C function that may be reading the file (get_tensor's options' __index, a finalizer
 * its allocation ran), the file closes once that is over (fl_lrelease_must_wait) */
static int so_close_method(lua_State *L) {
    safe_open_box *b = luaL_checkudata(L, 1, SAFE_OPEN_MT);
    if (!b->f) return 0;
    if (fl_lrelease_must_wait(L)) {
        safe_open_box *h = lua_newuserdatauv(L, sizeof *h, 0);
        *h = *b;
        luaL_setmetatable(L, SAFE_OPEN_MT);
        b->f = NULL;
        fl_lrelease_later(L, 1);
        return 0;
    }
    so_close(L);
    fl_lrelease_deferred(L);
    return 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcmp(s + a - b, suf) == 0;
}

/* Is entry i the companion scale of an FP8 tensor in the same file? (one lookup by name: a scan per entry made
 * listing a file of 40 000 tensors take seconds) */
static int is_companion(const fl_st_file *f, int i) {
    const char *name = f->entries[i].name;
    if (!ends_with(name, SCALE_SUFFIX)) return 0;
    size_t base = strlen(name) - strlen(SCALE_SUFFIX);
    char small[256], *buf = base < sizeof small ? small : malloc(base + 1);
    if (!buf) return 0;
    memcpy(buf, name, base);
    buf[base] = 0;
    int j = fl_st_find(f, buf);
    if (buf != small) free(buf);
    return j >= 0 && (f->entries[j].dtype == FL_ST_F8_E4M3 || f->entries[j].dtype == FL_ST_F8_E5M2);
}

static int push_sorted_keys(lua_State *L, const fl_st_file *f) {
    const char **names = lua_newuserdatauv(L, ((size_t)f->n + 1) * sizeof *names, 0);
    int k = 0;
    for (int i = 0; i < f->n; i++) if (!is_companion(f, i)) names[k++] = f->entries[i].name;
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    lua_createtable(L, k, 0);
    for (int i = 0; i < k; i++) { lua_pushstring(L, names[i]); lua_rawseti(L, -2, i + 1); }
    lua_remove(L, -2);
    return k;
}

/* so:keys() → sorted tensor names (FP8 companions folded into their tensor). */
static int so_keys(lua_State *L) {
    fl_st_file *f = check_open(L, 1);
    fl_lmaxargs(L, 1, "keys", "no arguments");
    push_sorted_keys(L, f);
    return 1;
}

static int so_metadata(lua_State *L) {
    fl_st_file *f = check_open(L, 1);
    fl_lmaxargs(L, 1, "metadata", "no arguments");
    lua_createtable(L, 0, f->n_meta);
    for (int i = 0; i < f->n_meta; i++) { lua_pushstring(L, f->meta_vals[i]); lua_setfield(L, -2, f->meta_keys[i]); }
    return 1;
}

/* Integer and bool data as fp32 when every value is exact there (fp8lab has no integer tensors). */
static int ints_to_f32(const fl_st_entry *e, const uint8_t *src, float *dst, int64_t *bad) {
    for (uint64_t i = 0; i < e->numel; i++) {
        int64_t v;
        switch (e->dtype) {
        case FL_ST_I64: { int64_t x; memcpy(&x, src + 8 * i, 8); v = x; break; }
        case FL_ST_I32: { int32_t x; memcpy(&x, src + 4 * i, 4); v = x; break; }
        case FL_ST_U8: v = src[i]; break;
        default: v = src[i] != 0; break;   /* BOOL */
        }
        /* exact: back to the same integer (a comparison in double rounded 2^53 + 1 to 2^53 and let it pass) */
        float fv = (float)v;
        if (!(fv < 9.2233720e18f && fv >= -9.2233720e18f) || (int64_t)fv != v) { *bad = v; return 0; }
        dst[i] = fv;
    }
    return 1;
}

static void read_into(lua_State *L, fl_st_file *f, int i, fl_tensor **slot, const char *fname) {
    const fl_st_entry *e = &f->entries[i];
    if (e->ndim > FL_MAX_DIMS)
        luaL_error(L, "%s: %s: \"%s\" has %d dimensions; fp8lab tensors have at most %d", fname, f->path, e->name, e->ndim,
                   FL_MAX_DIMS);
    fl_dtype dt;
    bool native = fl_st_to_dtype(e->dtype, &dt);
    FL_LCALL(L, fl_tensor_empty(slot, native ? dt : FL_F32, e->ndim, e->shape, FL_DEV_CPU));
    if (e->numel == 0) return;
    if (native) { FL_LCALL(L, fl_st_read(f, i, fl_tensor_data(*slot))); return; }
    uint8_t *raw = lua_newuserdatauv(L, (size_t)(e->end - e->begin), 0);
    FL_LCALL(L, fl_st_read(f, i, raw));
    int64_t bad = 0;
    if (!ints_to_f32(e, raw, fl_tensor_data(*slot), &bad))
        luaL_error(L, "%s: %s: \"%s\" (%s) holds %I, which fp32 cannot hold exactly; fp8lab loads integer tensors as fp32 "
                   "only when every value is exact", fname, f->path, e->name, fl_st_dtype_name(e->dtype), (lua_Integer)bad);
    lua_pop(L, 1);
}

/* Push tensor `name` of f (FP8: with its companion scale), on `device`. */
static void push_tensor(lua_State *L, fl_st_file *f, const char *name, int device, const char *fname) {
    int i = fl_st_find(f, name);
    if (i < 0) {
        push_sorted_keys(L, f);
        luaL_error(L, "%s: no tensor \"%s\" in %s (it has %d)", fname, name, f->path, (int)luaL_len(L, -1));
    }
    fl_tensor **slot = fl_lnewbox(L);
    read_into(L, f, i, slot, fname);
    fl_tensor *t = *slot;
    if (t->scale_inv) t->qunknown = true;   /* the file holds the bytes and scales, not what the cast saw */
    if (t->scale_inv) {
        lua_pushfstring(L, "%s" SCALE_SUFFIX, name);
        int s = fl_st_find(f, lua_tostring(L, -1));
        lua_pop(L, 1);
        if (s >= 0) {
            const fl_st_entry *e = &f->entries[s];
            int axis = -2;   /* -2: not a valid layout */
            if (e->dtype == FL_ST_F32) {
                if (e->numel == 1 && e->ndim <= 1) axis = -1;
                else if (e->ndim == t->ndim) {
                    int found = -1, ok = 1;
                    for (int d = 0; d < e->ndim; d++) {
                        if (e->shape[d] == 1) continue;
                        if (e->shape[d] != t->shape[d] || found >= 0) ok = 0;
                        found = d;
                    }
                    /* all ones: scaled along an axis of size 1 (what the writer makes of a [1, K] tensor scaled per
                     * row), the first such axis; with none, one scale for the tensor */
                    if (ok && found < 0) {
                        for (int d = 0; d < t->ndim && found < 0; d++) if (t->shape[d] == 1) found = d;
                        axis = found;
                    } else if (ok) {
                        axis = found;
                    }
                }
            }
            if (axis == -2)
                luaL_error(L, "%s: %s: \"%s\" (%s, shape %s) is not a scale inverse for \"%s\": it must be F32 of shape [1] or of "
                           "the tensor's rank with size 1 everywhere but the scaled axis", fname, f->path, e->name,
                           fl_st_dtype_name(e->dtype), fl_lpushshape(L, e->ndim, e->shape), name);
            fl_tensor *si = NULL;
            int64_t len = axis < 0 ? 1 : t->shape[axis];
            fl_status st = fl_tensor_empty(&si, FL_F32, 1, &len, FL_DEV_CPU);
            if (st == FL_OK) st = fl_st_read(f, s, fl_tensor_data(si));
            if (st != FL_OK) { fl_tensor_release(si); fl_lcheck(L, st); }
            /* a scale inverse no cast makes (0, negative, inf, NaN) would decode every byte to 0, a flipped sign
             * or NaN */
            const float *v = fl_tensor_data(si);
            for (int64_t k = 0; k < len; k++) {
                if (!(v[k] > 0.0f) || !isfinite(v[k])) {
                    double bad = v[k];
                    fl_tensor_release(si);
                    luaL_error(L, "%s: %s: \"%s\" holds %f at %d: a scale inverse must be finite and > 0", fname,
                               f->path, e->name, bad, (int)k + 1);
                }
            }
            fl_tensor_release(t->scale_inv);
            t->scale_inv = si;
            t->scale_axis = axis;
        }
    }
    if (device != FL_DEV_CPU) {
        fl_tensor **moved = fl_lnewbox(L);
        FL_LCALL(L, fl_tensor_to_device(moved, t, device));
        lua_remove(L, -2);
    }
}

static int parse_device(lua_State *L, int arg, const char *fname) {
    if (lua_isnoneornil(L, arg)) return FL_DEV_CPU;
    luaL_checktype(L, arg, LUA_TTABLE);
    static const char *const keys[] = { "device", NULL };
    fl_lcheckopts(L, arg, fname, keys);
    lua_getfield(L, arg, "device");
    int dev = FL_DEV_CPU;
    if (!lua_isnil(L, -1)) dev = fl_lcheckdevice(L, lua_gettop(L), fname);
    lua_pop(L, 1);
    return dev;
}

static safe_open_box *open_box(lua_State *L, const char *path) {
    safe_open_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->f = NULL;
    b->device = FL_DEV_CPU;
    luaL_setmetatable(L, SAFE_OPEN_MT);
    /* out of descriptors: safe_open handles left to the collector (the docs allow it) hold theirs until a cycle
     * runs, which descriptors never start; FL_LCALL's collection closes the unreachable ones, then opens once more
     * (this read errno itself, stale after an earlier failure: "not a regular file" was retried; until stop 95) */
    FL_LCALL(L, fl_st_open(&b->f, path));
    return b;
}

/* safe_open(path [, {device=}]) → an open file: :keys(), :metadata(), :get_tensor(name [, {device=}]), :close().
 * The file's device is get_tensor's default (HF's safe_open(path, device=...)); checked now, as load_file's. */
static int l_safe_open(lua_State *L) {
    fl_lmaxargs(L, 2, "safe_open", "(path [, {device=}])");
    const char *path = fl_lcheckpath(L, 1, "safe_open");
    int dev = parse_device(L, 2, "safe_open");
    if (dev != FL_DEV_CPU && !fl_device_get(dev)) return luaL_error(L, "safe_open: device %s is not available", fl_device_name(dev));
    safe_open_box *b = open_box(L, path);
    b->device = dev;
    return 1;
}

static int so_get_tensor(lua_State *L) {
    fl_st_file *f = check_open(L, 1);
    fl_lmaxargs(L, 3, "get_tensor", "(name [, {device=}])");
    const char *name = luaL_checkstring(L, 2);
    int dev = lua_isnoneornil(L, 3) ? ((safe_open_box *)lua_touserdata(L, 1))->device : parse_device(L, 3, "get_tensor");
    push_tensor(L, f, name, dev, "get_tensor");
    return 1;
}

static int so_tostring(lua_State *L) {
    safe_open_box *b = luaL_checkudata(L, 1, SAFE_OPEN_MT);
    if (!b->f) lua_pushstring(L, "safe_open(closed)");
    else lua_pushfstring(L, "safe_open(%s: %d tensors, %d metadata keys)", b->f->path, b->f->n, b->f->n_meta);
    return 1;
}

/* load_file(path [, {device=}]) → {name = tensor}. */
static int l_load_file(lua_State *L) {
    fl_lmaxargs(L, 2, "load_file", "(path [, {device=}])");
    const char *path = fl_lcheckpath(L, 1, "load_file");
    int dev = parse_device(L, 2, "load_file");
    safe_open_box *b = open_box(L, path);
    int box = lua_gettop(L);
    int n = push_sorted_keys(L, b->f);
    int keys = lua_gettop(L);
    lua_createtable(L, 0, n);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, keys, i);
        const char *name = lua_tostring(L, -1);
        push_tensor(L, b->f, name, dev, "load_file");
        lua_setfield(L, -3, name);
        lua_pop(L, 1);
    }
    fl_st_close(b->f);
    b->f = NULL;
    (void)box;
    return 1;
}

/* ---- fp8._checkpoint helpers ---------------------------------------------------------------- */

static int l_write_atomic(lua_State *L) {
    size_t len;
    const char *path = fl_lcheckpath(L, 1, "write_atomic");
    const char *s = luaL_checklstring(L, 2, &len);
    FL_LCALL(L, fl_write_atomic(path, s, len));
    return 0;
}

static int l_fsync_dir(lua_State *L) {
    FL_LCALL(L, fl_fsync_dir(fl_lcheckpath(L, 1, "fsync_dir")));
    return 0;
}

/* mkdir(path) → true, or nil + message (an existing directory is fine). */
static int l_mkdir(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "mkdir");
    struct stat sb;
    if (mkdir(path, 0755) == 0 || (errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: cannot create the directory: %s", path, strerror(errno));
    return 2;
}

/* mkdir_p(path) → true, or nil + message: fl_mkdir_p (core/fileio.h), the one mkdir -p; fp8.checkpointing (the
 * directories above a checkpoint), fp8.profiler (output_trace_dir) and fp8.args.out_dir (a script's --out) use
 * it. A NUL in the name is refused (the C string would end there). */
static int l_mkdir_p(lua_State *L) {
    size_t n;
    const char *path = luaL_checklstring(L, 1, &n);
    fl_status st = strlen(path) != n ? FL_ERR(FL_EINVAL, "mkdir_p: a directory name cannot contain a NUL byte")
                                     : fl_mkdir_p(path);
    if (st == FL_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, fl_last_error_detail());
    return 2;
}

/* listdir(path) → sorted names (without . and ..), or nil + message. The entries are read by getdents64 into a
 * buffer on the stack, not by opendir, which allocates its 32 KiB buffer: under a narrow address space (`ulimit -v`)
 * that failed with ENOMEM, and save_state's cleanup took the failed listing for an empty directory and left its
 * <dir>.tmp behind (stop 101). The names are pushed in a protected call, so a Lua memory error closes the
 * descriptor before it is raised again. */
static int listdir_entries(lua_State *L) {
    const int fd = (int)lua_tointeger(L, 1);
    lua_newtable(L);
    int n = 0;
    char buf[8192] __attribute__((aligned(8)));
    for (;;) {
        ssize_t got = getdents64(fd, buf, sizeof buf);
        if (got < 0) { lua_pushnil(L); lua_pushinteger(L, errno); return 2; }
        if (got == 0) break;
        for (ssize_t off = 0; off < got;) {
            const struct dirent64 *e = (const struct dirent64 *)(buf + off);
            off += e->d_reclen;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            lua_pushstring(L, e->d_name);
            lua_rawseti(L, -2, ++n);
        }
    }
    return 1;
}

static int l_listdir(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "listdir");
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && fl_lfds_collect(L, errno)) fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* out of descriptors: once more after a collection */
    if (fd < 0) { lua_pushnil(L); lua_pushfstring(L, "%s: %s", path, strerror(errno)); return 2; }
    lua_pushcfunction(L, listdir_entries);
    lua_pushinteger(L, fd);
    const int rc = lua_pcall(L, 1, 2, 0);
    close(fd);
    if (rc != LUA_OK) return lua_error(L);
    if (lua_isnil(L, -2)) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror((int)lua_tointeger(L, -2)));
        return 2;
    }
    lua_pop(L, 1);
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, -3);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    return 1;
}

/* is_dir(path) → boolean */
static int l_is_dir(lua_State *L) {
    struct stat sb;
    lua_pushboolean(L, stat(fl_lcheckpath(L, 1, "is_dir"), &sb) == 0 && S_ISDIR(sb.st_mode));
    return 1;
}

/* is_file(path) → boolean: a regular file (links followed); a file that exists but cannot be read is one, so
 * that reading it says why it cannot be read rather than that it does not exist */
static int l_is_file(lua_State *L) {
    struct stat sb;
    lua_pushboolean(L, stat(fl_lcheckpath(L, 1, "is_file"), &sb) == 0 && S_ISREG(sb.st_mode));
    return 1;
}

/* exists(path) → boolean: anything is there (links followed) */
static int l_exists(lua_State *L) {
    struct stat sb;
    lua_pushboolean(L, stat(fl_lcheckpath(L, 1, "exists"), &sb) == 0);
    return 1;
}

/* is_link(path) → boolean: a symbolic link (not followed), so that removing a tree never walks into what one
 * points at */
static int l_is_link(lua_State *L) {
    struct stat sb;
    lua_pushboolean(L, lstat(fl_lcheckpath(L, 1, "is_link"), &sb) == 0 && S_ISLNK(sb.st_mode));
    return 1;
}

/* copy_mode(from, to) → true, or nil + message: to takes from's permission bits (a checkpoint directory that replaces
 * one made private with chmod 700 stays private). A file system without modes (vfat: EPERM) counts as done. */
static int l_copy_mode(lua_State *L) {
    const char *from = fl_lcheckpath(L, 1, "copy_mode"), *to = fl_lcheckpath(L, 2, "copy_mode");
    struct stat sb;
    if (stat(from, &sb) == 0 && (chmod(to, sb.st_mode & 0777) == 0 || errno == EPERM || errno == ENOTSUP)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: cannot take the permissions of %s: %s", to, from, strerror(errno));
    return 2;
}

/* exchange(a, b) → true, or nil + message: the two paths swap their directories in one step (Linux's
 * renameat2 RENAME_EXCHANGE), so a checkpoint directory is replaced without a moment where its name holds
 * nothing. A file system without it answers EINVAL/ENOSYS; the caller then renames twice. */
static int l_exchange(lua_State *L) {
    const char *a = fl_lcheckpath(L, 1, "exchange"), *b = fl_lcheckpath(L, 2, "exchange");
    if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) { lua_pushboolean(L, 1); return 1; }
    lua_pushnil(L);
    lua_pushfstring(L, "%s <-> %s: %s", a, b, strerror(errno));
    return 2;
}

/* lock_dir(path, wait) → a lock, or nil + "busy" (held by another open of it and wait false), nil + "interrupted" (a
 * signal came during the wait), or nil + message: an
 * exclusive flock on the directory, held until the lock's release(), its <close> or its collection (one of a
 * directory this process holds already is refused: it would wait for itself). save_state
 * holds one on a checkpoint's parent from its first check to its last rename, so that two processes saving into one
 * directory take turns (they removed each other's working directory, and each one's later saves were refused). A
 * file system without flock gives a lock that holds nothing: saves there are as they were. */
#define DIR_LOCK_MT "fp8.DirLock"
/* The directories this process holds locks on: a second lock_dir of one of them would wait for itself (flock
 * conflicts between two opens in one process), so it is refused instead. */
typedef struct { int fd; dev_t dev; ino_t ino; } dir_lock;
#define DIR_LOCKS_MAX 64
static dir_lock *held_locks[DIR_LOCKS_MAX];
static int dirlock_release(lua_State *L) {
    dir_lock *k = luaL_checkudata(L, 1, DIR_LOCK_MT);
    if (k->fd < 0) return 0;
    for (int i = 0; i < DIR_LOCKS_MAX; i++) if (held_locks[i] == k) held_locks[i] = NULL;
    close(k->fd);   /* closing the last descriptor of the open file drops its flock */
    k->fd = -1;
    return 0;
}
static int l_lock_dir(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "lock_dir");
    const bool wait = lua_toboolean(L, 2);
    dir_lock *k = lua_newuserdatauv(L, sizeof *k, 0);
    k->fd = -1;
    luaL_setmetatable(L, DIR_LOCK_MT);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && fl_lfds_collect(L, errno)) fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* (as listdir) */
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        lua_pushnil(L);
        lua_pushfstring(L, "%s: cannot open the directory to lock it: %s", path, strerror(e));
        return 2;
    }
    int slot = -1;
    for (int i = 0; i < DIR_LOCKS_MAX; i++) {
        if (held_locks[i] && held_locks[i]->dev == sb.st_dev && held_locks[i]->ino == sb.st_ino) {
            close(fd);
            lua_pushnil(L);
            lua_pushfstring(L, "%s: this process holds its lock already (release that one first)", path);
            return 2;
        }
        if (!held_locks[i] && slot < 0) slot = i;
    }
    if (slot < 0) {
        close(fd);
        lua_pushnil(L);
        lua_pushfstring(L, "%s: cannot lock it: this process holds %d directory locks already", path, DIR_LOCKS_MAX);
        return 2;
    }
    /* a signal during the wait (Ctrl-C: its handler sets the hook that raises "interrupted!" at the next Lua
     * instruction) returns "interrupted" to the caller, which calls again or lets the hook raise; retried here, the
     * first Ctrl-C was swallowed and the wait went on */
    if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0 && (errno == EWOULDBLOCK || errno == EINTR)) {
        const bool busy = errno == EWOULDBLOCK;
        close(fd);
        lua_pushnil(L);
        lua_pushstring(L, busy ? "busy" : "interrupted");
        return 2;
    }
    /* locked, or flock unsupported there (ENOLCK, EOPNOTSUPP): a lock that holds nothing */
    k->fd = fd; k->dev = sb.st_dev; k->ino = sb.st_ino;
    held_locks[slot] = k;
    return 1;
}

/* dir_id(path) → "device:inode" of the directory (the same for every spelling of its path), or nil + message. */
static int l_dir_id(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "dir_id");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushfstring(L, "%I:%I", (lua_Integer)sb.st_dev, (lua_Integer)sb.st_ino);
    return 1;
}

static int l_clone(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_clone_exact(slot, t));
    return 1;
}

/* copy_exact_(dst, src): src's bytes into dst in place (same dtype and shape; FP8: its scale inverse
 * and axis too), so every holder of dst sees the loaded values. */
static int l_copy_exact_(lua_State *L) {
    fl_tensor *dst = fl_lchecktensor(L, 1), *src = fl_lchecktensor(L, 2);
    char a[96], b[96];
    if (dst->dtype != src->dtype || !fl_shape_equal(dst->ndim, dst->shape, src->ndim, src->shape))
        return luaL_error(L, "copy_exact_: expected a %s tensor of shape %s, got %s of shape %s", fl_format(dst->dtype)->name,
                          fl_shape_str(a, sizeof a, dst->ndim, dst->shape), fl_format(src->dtype)->name,
                          fl_shape_str(b, sizeof b, src->ndim, src->shape));
    fl_tensor *c = NULL;
    FL_LCALL(L, fl_tensor_clone_exact(&c, src));
    /* Swap the copy's storage and scale in (a fresh contiguous layout on dst's device). */
    fl_tensor *m = NULL;
    fl_status st = fl_tensor_to_device(&m, c, dst->device);
    fl_tensor_release(c);
    fl_lcheck(L, st);
    fl_storage *old = dst->storage;
    dst->storage = m->storage; m->storage = old;
    dst->offset = 0;
    memcpy(dst->stride, m->stride, sizeof dst->stride);
    fl_tensor *si = dst->scale_inv;
    dst->scale_inv = m->scale_inv; m->scale_inv = si;
    dst->scale_axis = m->scale_axis;
    dst->qstats = m->qstats;
    fl_stats_future *qf = dst->qfuture;
    dst->qfuture = m->qfuture; m->qfuture = qf;
    fl_tensor_bump(dst);
    fl_tensor_release(m);
    return 0;
}

/* The default generator's state as two 16-digit hex strings (exact, unlike a JSON number). */
static int l_rng_state(lua_State *L) {
    fl_rng *r = fl_default_rng();
    char buf[40];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)r->seed);
    lua_pushstring(L, buf);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)r->counter);
    lua_pushstring(L, buf);
    return 2;
}

static uint64_t check_hex(lua_State *L, int arg) {
    const char *s = luaL_checkstring(L, arg);
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 16);
    if (strlen(s) != 16 || *end) luaL_argerror(L, arg, lua_pushfstring(L, "expected 16 hex digits, got \"%s\"", s));
    return (uint64_t)v;
}

static int l_set_rng_state(lua_State *L) {
    uint64_t seed = check_hex(L, 1), counter = check_hex(L, 2);
    fl_rng *r = fl_default_rng();
    r->seed = seed;
    r->counter = counter;
    return 0;
}

/* ---- JSON ------------------------------------------------------------------------------------
 * Round trips are exact: an integer is written as digits and read back as the same Lua integer (any int64, not
 * only up to 2^53), a float is written with the fewest digits that read back as the same double and always with a
 * '.' or an exponent (1.0, not 1), so it reads back as a float. What cannot come back the same is refused on
 * write, naming its key path: inf and NaN, a string or key holding a NUL byte (cJSON keeps C strings). */

#define JSON_MAX_DEPTH 64

typedef struct {
    int depth;                                   /* the levels below the root in `key` / `idx` */
    const char *key[JSON_MAX_DEPTH + 2];         /* an object's key at that level, or NULL for an array index */
    lua_Integer idx[JSON_MAX_DEPTH + 2];
    char err[408];                               /* set when to_json fails: "key '<199>': <199>" fits */
} json_ctx;

/* The failure, prefixed with the key path ("key 'a.b.3': ...") when there is one; to_json then returns NULL. */
static cJSON *json_fail(json_ctx *c, const char *fmt, ...) {
    char path[200] = "", what[200];
    size_t n = 0;
    for (int i = 0; i < c->depth && n < sizeof path - 1; i++) {
        int w = c->key[i] ? snprintf(path + n, sizeof path - n, "%s%s", i ? "." : "", c->key[i])
                          : snprintf(path + n, sizeof path - n, "%s%lld", i ? "." : "", (long long)c->idx[i]);
        if (w < 0) break;
        n += (size_t)w;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->depth > 0) snprintf(c->err, sizeof c->err, "key '%s': %s", path, what);
    else snprintf(c->err, sizeof c->err, "%s", what);
    return NULL;
}

/* The shortest %.Ng (N = 15..17) that reads back as d, with ".0" added when it would read as an integer. */
static void format_double(char *buf, size_t size, double d) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", size - strlen(buf) - 1);
}

static cJSON *to_json(lua_State *L, int idx, json_ctx *c) {
    if (c->depth > JSON_MAX_DEPTH) return json_fail(c, "nested deeper than %d levels (a cycle?)", JSON_MAX_DEPTH);
    luaL_checkstack(L, 4, "json_encode: nested too deep");
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return cJSON_CreateNull();
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (strlen(s) != len) return json_fail(c, "the string holds a NUL byte, which cannot be read back from JSON here");
        return cJSON_CreateString(s);
    }
    case LUA_TNUMBER: {
        char buf[64];
        if (lua_isinteger(L, idx)) snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, idx));
        else {
            double d = lua_tonumber(L, idx);
            if (!isfinite(d)) return json_fail(c, "%s cannot be stored in JSON", isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
            format_double(buf, sizeof buf, d);
        }
        return cJSON_CreateRaw(buf);
    }
    case LUA_TTABLE: {
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) { count++; lua_pop(L, 1); }
        /* A sequence (an empty table too: a shape [] must stay a list) is an array, else an object. */
        int array = n == count;
        cJSON *out = array ? cJSON_CreateArray() : cJSON_CreateObject();
        if (!out) return json_fail(c, "out of memory");
        c->depth++;
        if (array) {
            for (lua_Integer i = 1; i <= n; i++) {
                c->key[c->depth - 1] = NULL;
                c->idx[c->depth - 1] = i;
                lua_rawgeti(L, idx, i);
                cJSON *item = to_json(L, -1, c);
                lua_pop(L, 1);
                if (!item) { cJSON_Delete(out); c->depth--; return NULL; }
                cJSON_AddItemToArray(out, item);
            }
            c->depth--;
            return out;
        }
        /* Keys sorted, so the same value always gives the same text (Lua's table order varies by process). The key
         * strings stay alive in the table while the array points at them. */
        const char **keys = malloc(((size_t)count + 1) * sizeof *keys);
        if (!keys) { cJSON_Delete(out); c->depth--; return json_fail(c, "out of memory"); }
        int nk = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (lua_type(L, -2) != LUA_TSTRING) {
                const char *kt = luaL_typename(L, -2);   /* a static name: valid after the pop */
                lua_pop(L, 2);
                free(keys); cJSON_Delete(out); c->depth--;
                return json_fail(c, "object keys must be strings (or the table a sequence 1..n), got a %s key", kt);
            }
            size_t len;
            const char *k = lua_tolstring(L, -2, &len);
            keys[nk++] = k;
            lua_pop(L, 1);
            if (strlen(k) != len) {
                lua_pop(L, 1);
                free(keys); cJSON_Delete(out); c->depth--;
                return json_fail(c, "a key holds a NUL byte (\"%s...\"), which cannot be read back from JSON here", k);
            }
        }
        qsort(keys, (size_t)nk, sizeof *keys, cmp_str);
        for (int i = 0; i < nk; i++) {
            c->key[c->depth - 1] = keys[i];
            lua_getfield(L, idx, keys[i]);
            cJSON *item = to_json(L, -1, c);
            lua_pop(L, 1);
            if (!item) { free(keys); cJSON_Delete(out); c->depth--; return NULL; }
            cJSON_AddItemToObject(out, keys[i], item);
        }
        free(keys);
        c->depth--;
        return out;
    }
    default:
        return json_fail(c, "cannot store a %s", luaL_typename(L, idx));
    }
}
/* json_encode(value) → text; an error names the key path of what cannot be stored. */
static int l_json_encode(lua_State *L) {
    fl_lmaxargs(L, 1, "json_encode", "(value)");
    luaL_checkany(L, 1);
    json_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);   /* collected with the stack: no leak when a Lua call raises */
    c->depth = 0;
    c->err[0] = 0;
    cJSON *j = to_json(L, 1, c);
    if (!j) return luaL_error(L, "json_encode: %s", c->err);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (!s) return luaL_error(L, "json_encode: out of memory");
    lua_pushstring(L, s);
    free(s);
    return 1;
}

/* The number literals of a JSON text in document order (the order a depth-first walk of cJSON's tree meets them):
 * whether each is written as an integer, and its exact value then. cJSON keeps only a double. */
typedef struct { int is_int; long long v; } json_num;

static size_t scan_numbers(const char *s, size_t len, json_num *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        char ch = s[i];
        if (ch == '"') {
            for (i++; i < len && s[i] != '"'; i++) if (s[i] == '\\') i++;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t b = i;
            int is_int = 1;
            while (i < len && strchr("0123456789+-.eE", s[i]) && s[i]) {
                if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') is_int = 0;
                i++;
            }
            if (out) {
                char buf[64];
                long long v = 0;
                if (is_int && i - b < sizeof buf) {
                    memcpy(buf, s + b, i - b);
                    buf[i - b] = 0;
                    char *end;
                    errno = 0;
                    v = strtoll(buf, &end, 10);
                    if (errno || *end) is_int = 0;   /* past int64: a float, as Lua's own tonumber reads it */
                } else {
                    is_int = 0;
                }
                out[n] = (json_num){ is_int, v };
            }
            n++;
        } else {
            i++;
        }
    }
    return n;
}

typedef struct { const json_num *nums; size_t n, next; } json_read;

static void from_json(lua_State *L, const cJSON *j, json_read *r) {
    luaL_checkstack(L, 4, "json_decode: nested too deep");
    if (cJSON_IsNull(j)) lua_pushnil(L);
    else if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
    else if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
    else if (cJSON_IsNumber(j)) {
        const json_num *num = r->next < r->n ? &r->nums[r->next] : NULL;
        r->next++;
        if (num && num->is_int) lua_pushinteger(L, (lua_Integer)num->v);
        else lua_pushnumber(L, j->valuedouble);
    } else if (cJSON_IsArray(j)) {
        lua_createtable(L, cJSON_GetArraySize(j), 0);
        int i = 1;
        for (const cJSON *c = j->child; c; c = c->next) { from_json(L, c, r); lua_rawseti(L, -2, i++); }
    } else {
        lua_createtable(L, 0, cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) { from_json(L, c, r); lua_setfield(L, -2, c->string); }
    }
}

/* json_decode(text [, what]) → value; an error names `what`. Integers come back as Lua integers, exactly; numbers
 * written with a '.' or an exponent as floats. */
static int l_json_decode(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *what = luaL_optstring(L, 2, "json_decode");
    size_t n = scan_numbers(s, len, NULL);
    json_num *nums = lua_newuserdatauv(L, (n + 1) * sizeof *nums, 0);   /* on the stack: freed by the collector */
    scan_numbers(s, len, nums);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    if (!j) return luaL_error(L, "%s: not valid JSON", what);
    /* what cJSON does not refuse and would lose: text after the value (a second document, an edit's leftovers) and a
     * \u0000 escape, where cJSON's C string ends the string (json_encode refuses a NUL byte for that reason) */
    const char *bad = NULL;
    for (const char *p = end; p < s + len && !bad; p++)
        if (!*p || !strchr(" \t\n\r", *p)) bad = "bytes after the JSON value";
    bool in_str = false;
    for (size_t i = 0; i < len && !bad; i++) {
        if (s[i] == '"') in_str = !in_str;
        else if (in_str && s[i] == '\\') {
            if (i + 5 < len && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0)
                bad = "a string holds \\u0000 (NUL)";
            i++;
        }
    }
    if (bad) {
        cJSON_Delete(j);
        return luaL_error(L, "%s: not valid here: %s", what, bad);
    }
    json_read r = { nums, n, 0 };
    from_json(L, j, &r);   /* raises only on stack exhaustion */
    cJSON_Delete(j);
    return 1;
}

static const luaL_Reg so_methods[] = {
    {"keys", so_keys}, {"metadata", so_metadata}, {"get_tensor", so_get_tensor}, {"close", so_close_method},
    {NULL, NULL},
};

static const luaL_Reg ckpt_funcs[] = {
    {"write_atomic", l_write_atomic}, {"mkdir", l_mkdir}, {"mkdir_p", l_mkdir_p}, {"listdir", l_listdir}, {"is_dir", l_is_dir}, {"is_file", l_is_file}, {"exists", l_exists}, {"is_link", l_is_link}, {"exchange", l_exchange}, {"lock_dir", l_lock_dir}, {"dir_id", l_dir_id}, {"fsync_dir", l_fsync_dir}, {"clone", l_clone}, {"copy_exact_", l_copy_exact_}, {"rng_state", l_rng_state},
    {"copy_mode", l_copy_mode},
    {"set_rng_state", l_set_rng_state}, {"json_encode", l_json_encode}, {"json_decode", l_json_decode}, {NULL, NULL},
};

/* Registers save_file/load_file/safe_open into the fp8.core table at -1; fp8._checkpoint is the helpers. */
int luaopen_fp8_checkpoint_c(lua_State *L) {
    if (luaL_newmetatable(L, SAFE_OPEN_MT)) {
        luaL_newlib(L, so_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, so_close); lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, so_close_method); lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, so_tostring); lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, DIR_LOCK_MT)) {
        lua_pushcfunction(L, dirlock_release); lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, dirlock_release); lua_setfield(L, -2, "__close");
        lua_newtable(L);
        lua_pushcfunction(L, dirlock_release); lua_setfield(L, -2, "release");
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_newlib(L, ckpt_funcs);
    lua_pushcfunction(L, l_save_file); lua_setfield(L, -2, "save_file");
    lua_pushcfunction(L, l_load_file); lua_setfield(L, -2, "load_file");
    lua_pushcfunction(L, l_safe_open); lua_setfield(L, -2, "safe_open");
    return 1;
}
