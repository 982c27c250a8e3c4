/* l_util.c — the shared binding helpers declared in l_util.h (status → Lua error, tensor boxes,
 * dtype argument parsing). */
#include "l_util.h"
#include "device.h"
#include "settings.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

int fl_lcheck(lua_State *L, fl_status s) {
    if (s == FL_OK) return 0;
    if (s == FL_EINTR) return luaL_error(L, "interrupted");
    const char *msg = fl_last_error_detail();
    if (!msg || !*msg) msg = "core operation failed (no detail recorded)";
    return luaL_error(L, "%s", msg);
}

/* Lua's collector paces itself by the bytes of its own heap, where a tensor is an 8-byte box; the
 * megabytes of core storage behind it are invisible, so dead activations would pile up for many
 * training steps before a cycle ran (RSS grew by ~100 MiB a step on the benchmark GPT). So every new
 * tensor box (fl_lnewbox: any binding's result; F.gelu, fp8.load_file and the loaders' batches polled nothing, and
 * 4 GB of dead tensors piled up in a loop of gelu) and l_tensor.c's __index (every method call and field read)
 * poll the core's count of live storage bytes per device, and once it has
 * grown by a quarter since the last collection (and by at least GC_MIN_GROWTH) run a full collection
 * and take the new live total as the base. Memory then stays within ~1.25x of what is reachable; the
 * growth is geometric, so a training step costs a handful of full cycles of a small Lua heap (~0.7 ms
 * each on the benchmark GPT, against a step of hundreds). The threshold lives in a registry userdata
 * (no C globals). */
#define GC_MIN_GROWTH ((size_t)32 << 20)
static const char gc_key = 0;   /* its address keys the state in the registry */
typedef struct { size_t base[FL_DEV_COUNT], next[FL_DEV_COUNT]; } gc_state;

static void gc_rebase_dev(gc_state *g, int d) {
    size_t live = fl_bytes_live(d), grow = live / 4;
    g->base[d] = live;
    g->next[d] = live + (grow > GC_MIN_GROWTH ? grow : GC_MIN_GROWTH);
}

static void gc_rebase(gc_state *g) {
    for (int d = 0; d < FL_DEV_COUNT; d++) gc_rebase_dev(g, d);
}

void fl_lgc_poll(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &gc_key);
    gc_state *g = (gc_state *)lua_touserdata(L, -1);
    lua_pop(L, 1);   /* the registry keeps it alive */
    if (!g || !lua_gc(L, LUA_GCISRUNNING)) return;   /* collectgarbage("stop") is respected */
    for (int d = 0; d < FL_DEV_COUNT; d++) {
        size_t live = fl_bytes_live(d);
        if (live > g->next[d]) {
            lua_gc(L, LUA_GCCOLLECT);
            gc_rebase(g);
            return;
        }
        /* live storage fell to under half the last base (a big phase ended, a collection the program ran): the
         * threshold follows it down, so memory stays within ~1.25x of what is live now, not of an old peak */
        if (live < g->base[d] / 2) gc_rebase_dev(g, d);
    }
}

void fl_lgc_init(lua_State *L) {
    gc_rebase((gc_state *)lua_newuserdatauv(L, sizeof(gc_state), 0));
    lua_rawsetp(L, LUA_REGISTRYINDEX, &gc_key);
}

bool fl_lfds_collect(lua_State *L, int e) {
    if (e != EMFILE && e != ENFILE) return false;
    lua_gc(L, LUA_GCCOLLECT);
    return true;
}

fl_tensor **fl_lnewbox(lua_State *L) {
    fl_lgc_poll(L);   /* before the box: dead tensors of earlier results go first (see above) */
    fl_tensor **slot = (fl_tensor **)lua_newuserdatauv(L, sizeof(fl_tensor *), 0);
    *slot = NULL;
    luaL_setmetatable(L, FL_TENSOR_MT);
    return slot;
}

int fl_ltensor_op2(lua_State *L, const char *fname, const char *takes,
                   fl_status (*fn)(fl_tensor **, const fl_tensor *, const fl_tensor *)) {
    fl_tensor *a = fl_lchecktensor(L, 1), *b = fl_lchecktensor(L, 2);
    fl_lmaxargs(L, 2, fname, takes);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fn(slot, a, b));
    return 1;
}

/* ---- releases that wait for the C function using the tensor ----------------------------------------------
 * t:free() (and __close) drops the box's reference at once. But a binding keeps raw pointers to its tensor arguments
 * while it runs, and Lua code can run inside it: a metamethod of an argument it reads (an options table's __index, a
 * list's __len) and any finalizer (__gc), which a collection started by one of its allocations runs (fl_lnewbox's
 * poll collects fully). A free() there freed the memory the binding went on to read (x:quantize("e4m3", opts) with
 * an opts.__index that frees x; x + y while a finalizer frees x). So free() looks down the call stack (this thread's,
 * and the main thread's from a coroutine): if a C function runs there that is not known to call Lua without holding
 * a tensor (Lua's libraries, the host, no_grad), the box reads as released at once and its reference moves to a
 * hidden box, which the next free() made outside such a call releases (or the collector, once the freed box is
 * unreachable). Not seen: a binding in a coroutine other than the main thread that resumed this one. */
static const char safe_key = 0;    /* registry: {[lightuserdata(C function)] = true} */
static const char defer_key = 0;   /* registry: ephemeron {[freed box] = hidden box holding the reference} */

static void *cfunc_key(lua_CFunction f) { void *p; memcpy(&p, &f, sizeof p); return p; }

void fl_lpush_reg_table(lua_State *L, const void *key, const char *mode) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_newtable(L);
    if (mode) {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, mode);
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
    }
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

void fl_lcallback_safe(lua_State *L, lua_CFunction f) {
    fl_lpush_reg_table(L, &safe_key, NULL);
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, cfunc_key(f));
    lua_pop(L, 1);
}

/* The C function at -1, if any, as safe (popped). */
static void safe_top(lua_State *L) {
    if (lua_iscfunction(L, -1)) fl_lcallback_safe(L, lua_tocfunction(L, -1));
    lua_pop(L, 1);
}

void fl_lcallback_safe_std(lua_State *L) {
    static const char *const libs[] = { "_G", "coroutine", "table", "string", "math", "io", "os", "utf8", "debug",
                                        "package", NULL };
    int top = lua_gettop(L);
    for (int i = 0; libs[i]; i++) {
        if (lua_getglobal(L, libs[i]) == LUA_TTABLE) {
            lua_pushnil(L);
            while (lua_next(L, -2)) safe_top(L);
            if (strcmp(libs[i], "package") == 0 && lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
                lua_pushnil(L);
                while (lua_next(L, -2)) safe_top(L);
            }
        }
        lua_settop(L, top);
    }
    /* the C functions the libraries hand out, which call metamethods or resume Lua code: ipairs' iterator, wrap's */
    if (lua_getglobal(L, "ipairs") == LUA_TFUNCTION) {
        lua_newtable(L);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK) safe_top(L);
    }
    lua_settop(L, top);
    if (lua_getglobal(L, "coroutine") == LUA_TTABLE && lua_getfield(L, -1, "wrap") == LUA_TFUNCTION &&
        luaL_loadstring(L, "return") == LUA_OK && lua_pcall(L, 1, 1, 0) == LUA_OK)
        safe_top(L);
    lua_settop(L, top);
}

/* Whether a C function not marked safe runs in T's stack (from level `from`); the lookups use L's stack. */
static bool unsafe_frame(lua_State *L, lua_State *T, int from) {
    lua_Debug ar;
    fl_lpush_reg_table(L, &safe_key, NULL);
    bool found = false;
    for (int level = from; !found && lua_getstack(T, level, &ar); level++) {
        if (T != L && !lua_checkstack(T, 1)) return lua_pop(L, 1), true;   /* cannot look: assume the worst */
        if (!lua_getinfo(T, "f", &ar)) continue;
        if (T != L) lua_xmove(T, L, 1);
        if (lua_iscfunction(L, -1)) {
            found = lua_rawgetp(L, -2, cfunc_key(lua_tocfunction(L, -1))) != LUA_TBOOLEAN;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return found;
}

bool fl_lrelease_must_wait(lua_State *L) {
    luaL_checkstack(L, 6, "release");
    if (unsafe_frame(L, L, 1)) return true;
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *M = lua_tothread(L, -1);
    lua_pop(L, 1);
    return M && M != L && unsafe_frame(L, M, 0);
}

void fl_lrelease_later(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    fl_lpush_reg_table(L, &defer_key, "k");
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 2);
}

void fl_lrelease_deferred(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &defer_key) != LUA_TTABLE) { lua_pop(L, 1); return; }
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &defer_key);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (luaL_callmeta(L, -1, "__gc")) lua_pop(L, 1);   /* the holder's own release; its later __gc does nothing */
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

void fl_lrelease_box(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    fl_tensor **slot = (fl_tensor **)luaL_checkudata(L, idx, FL_TENSOR_MT);
    if (!*slot) return;
    if (fl_lrelease_must_wait(L)) {
        fl_tensor **hidden = (fl_tensor **)lua_newuserdatauv(L, sizeof(fl_tensor *), 0);   /* no poll: no collection */
        *hidden = *slot;
        luaL_setmetatable(L, FL_TENSOR_MT);   /* its __gc releases it */
        *slot = NULL;
        fl_lrelease_later(L, idx);
        return;
    }
    fl_tensor_release(*slot);
    *slot = NULL;
    fl_lrelease_deferred(L);   /* nothing uses the references kept for later any more */
}

fl_tensor *fl_ltotensor(lua_State *L, int idx) {
    fl_tensor **slot = (fl_tensor **)luaL_testudata(L, idx, FL_TENSOR_MT);
    return slot ? *slot : NULL;
}

fl_tensor *fl_lchecktensor(lua_State *L, int arg) {
    fl_tensor **slot = (fl_tensor **)luaL_testudata(L, arg, FL_TENSOR_MT);
    if (!slot) {
        const char *got = luaL_typename(L, arg);
        luaL_argerror(L, arg, lua_pushfstring(L, "expected a tensor, got %s", got));
        __builtin_unreachable();   /* luaL_argerror raises a Lua error: it does not return */
    }
    if (!*slot) luaL_argerror(L, arg, "tensor has been released (freed or closed)");
    return *slot;
}

/* The value at idx as a message shows it: luaL_tolstring's text (pushed), but a table's own __tostring is not run: one
 * that raises or answers no string made the message itself a raw Lua error ("'__tostring' must return a string"). */
const char *fl_lshow(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TTABLE && luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
        lua_pop(L, 1);
        return lua_pushstring(L, "a table");
    }
    return luaL_tolstring(L, idx, NULL);
}

static const char *value_str(lua_State *L, int arg);

/* Every key of the table at arg (absolute) is an integer in 1..n: a list, whose other keys nothing would read.
 * what: the table's name in the message (NULL: "expected a plain list"). */
static void check_list_keys(lua_State *L, int arg, lua_Integer n, const char *fname, const char *what) {
    lua_pushnil(L);
    while (lua_next(L, arg)) {
        lua_pop(L, 1);
        int isint = 0;
        lua_Integer k = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || k < 1 || k > n) {
            const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_pushfstring(L, "'%s'", lua_tostring(L, -1))
                                                            : value_str(L, -1);
            if (!what) luaL_error(L, "%s: expected a plain list (keys 1..%I), got the key %s", fname, n, key);
            luaL_error(L, "%s: %s must be a list (keys 1..%I), got the key %s", fname, what, n, key);
        }
    }
}

lua_Integer fl_lcheckrawlist(lua_State *L, int arg, const char *fname) {
    arg = lua_absindex(L, arg);
    luaL_checktype(L, arg, LUA_TTABLE);
    for (int k = 0; k < 2; k++) {
        const char *ev = k ? "__len" : "__index";
        if (luaL_getmetafield(L, arg, ev) != LUA_TNIL)
            luaL_error(L, "%s: expected a plain list, got a table whose metatable has %s", fname, ev);
    }
    const lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
    check_list_keys(L, arg, n, fname, NULL);   /* a key past 1..n would be read by nothing ({a, b, dim=2}) */
    return n;
}

void *fl_lrawlistobj(lua_State *L, int arg, lua_Integer i, const char *fname, const char *mt, const char *what) {
    lua_rawgeti(L, arg, i);   /* the table keeps the box alive after the pop */
    void *box = luaL_testudata(L, -1, mt), *obj;
    if (!box) {
        luaL_error(L, "%s: element %I of the list: expected %s, got %s", fname, i, what, luaL_typename(L, -1));
        __builtin_unreachable();   /* luaL_error raises a Lua error: it does not return */
    }
    memcpy(&obj, box, sizeof obj);
    if (!obj) luaL_error(L, "%s: element %I of the list: %s has been released", fname, i, what);
    lua_pop(L, 1);
    return obj;
}

fl_tensor **fl_lchecktensorlist(lua_State *L, int arg, const char *fname, int *n) {
    arg = lua_absindex(L, arg);
    lua_Integer len = fl_lcheckrawlist(L, arg, fname);
    if (len > 1 << 20) luaL_error(L, "%s: expected a list of at most %d tensors, got %I", fname, 1 << 20, len);
    fl_tensor **ts = lua_newuserdatauv(L, (size_t)(len ? len : 1) * sizeof *ts, 0);
    for (lua_Integer i = 1; i <= len; i++) ts[i - 1] = fl_lrawlistobj(L, arg, i, fname, FL_TENSOR_MT, "a tensor");
    *n = (int)len;
    return ts;
}

/* "a, b, c" of a NULL-terminated list, pushed. */
static const char *push_joined(lua_State *L, const char *const *names) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; names[i]; i++) { if (i) luaL_addstring(&b, ", "); luaL_addstring(&b, names[i]); }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

void fl_lmaxargs(lua_State *L, int n, const char *fname, const char *takes) {
    int more = lua_gettop(L) - n;
    if (more > 0) luaL_error(L, "%s: takes %s; got %d more argument%s", fname, takes, more, more == 1 ? "" : "s");
}

fl_tensor *fl_lchecknoargs(lua_State *L, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 1, fname, "no arguments");
    return t;
}

void fl_lcheckopts(lua_State *L, int idx, const char *fname, const char *const *valid) {
    if (lua_isnoneornil(L, idx)) return;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx)) {
        const char *got = luaL_typename(L, idx);
        luaL_error(L, "%s: options must be a table {%s}, got %s", fname, push_joined(L, valid), got);
    }
    /* a proxy (a metatable with __index or __pairs) is refused, as fp8.opts.check does (its proxy_text, stop 102):
     * the keys are read raw below and the values through lookups, so its keys went unchecked and its values unread
     * or read unchecked. The metatable is read raw too (lua_getmetatable ignores __metatable). */
    if (lua_getmetatable(L, idx)) {
        const char *which = NULL;
        lua_pushliteral(L, "__index");
        if (lua_rawget(L, -2) != LUA_TNIL) which = "__index";
        lua_pop(L, 1);
        lua_pushliteral(L, "__pairs");
        if (!which && lua_rawget(L, -2) != LUA_TNIL) which = "__pairs";
        lua_pop(L, 2);
        if (which)
            luaL_error(L, "%s: options must be a plain table {name = value}, got a table whose metatable has %s (a "
                       "proxy's options are not read through it: copy them into a plain table)", fname, which);
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        bool ok = false;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; !ok && valid[i]; i++) ok = strcmp(lua_tostring(L, -1), valid[i]) == 0;
        if (!ok) {
            const char *key = fl_lshow(L, -1);   /* (pushes: the key lua_next reads stays as it is) */
            size_t n = 0;
            while (valid[n]) n++;
            const char *near = lua_type(L, -2) == LUA_TSTRING ? fl_suggest(key, valid, n) : NULL;   /* -2: the key */
            const char *hint = near ? lua_pushfstring(L, " (did you mean '%s'?)", near) : "";
            luaL_error(L, "%s: unknown option '%s'%s (valid: %s)", fname, key, hint, push_joined(L, valid));
        }
    }
}

/* Pushes opts[key] (nil when idx is none or nil) and returns its type. */
static int push_opt(lua_State *L, int idx, const char *key) {
    if (lua_isnoneornil(L, idx)) { lua_pushnil(L); return LUA_TNIL; }
    return lua_getfield(L, idx, key);
}

/* Pushes opts[key] and tells whether it is there; a value of a type other than `type` is an error ("fname: key
 * must be what, got string"). */
static bool push_field(lua_State *L, int idx, const char *fname, const char *key, int type, const char *what) {
    int t = push_opt(L, idx, key);
    if (t != LUA_TNIL && t != type) luaL_error(L, "%s: %s must be %s, got %s", fname, key, what, luaL_typename(L, -1));
    return t != LUA_TNIL;
}

bool fl_lfieldnumber_opt(lua_State *L, int idx, const char *fname, const char *key, double *out) {
    bool there = push_field(L, idx, fname, key, LUA_TNUMBER, "a number");
    if (there) *out = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return there;
}

double fl_lfieldnumber(lua_State *L, int idx, const char *fname, const char *key, double def) {
    fl_lfieldnumber_opt(L, idx, fname, key, &def);
    return def;
}

bool fl_lfieldbool(lua_State *L, int idx, const char *fname, const char *key, bool def) {
    bool v = push_field(L, idx, fname, key, LUA_TBOOLEAN, "a boolean") ? lua_toboolean(L, -1) : def;
    lua_pop(L, 1);
    return v;
}

int fl_lfieldint(lua_State *L, int idx, const char *fname, const char *key, int def) {
    int v = def;
    if (push_opt(L, idx, key) != LUA_TNIL) {
        int isint = 0;
        lua_Integer x = lua_tointegerx(L, -1, &isint);
        if (!isint || x < INT_MIN || x > INT_MAX)
            luaL_error(L, "%s: %s must be an integer, got %s", fname, key, fl_lshow(L, -1));
        v = (int)x;
    }
    lua_pop(L, 1);
    return v;
}

const char *fl_lfieldchoice(lua_State *L, int idx, const char *fname, const char *key, const char *def,
                            const char *const *choices) {
    if (push_opt(L, idx, key) == LUA_TNIL) { lua_pop(L, 1); return def; }
    if (lua_type(L, -1) == LUA_TSTRING)
        for (int i = 0; choices[i]; i++)
            if (strcmp(lua_tostring(L, -1), choices[i]) == 0) { lua_pop(L, 1); return choices[i]; }
    const char *got = fl_lshow(L, -1);
    luaL_error(L, "%s: %s must be one of %s, got %s", fname, key, push_joined(L, choices), got);
    return def;
}

void fl_lpushretained(lua_State *L, fl_tensor *t) {
    fl_tensor **slot = fl_lnewbox(L);
    *slot = fl_tensor_retain(t);
}

fl_dtype fl_ldtype_from(lua_State *L, const char *name, const char *what) {
    fl_dtype dt;
    if (!fl_dtype_from_name(name, &dt))
        luaL_error(L, "unknown %s '%s' (valid: %s)", what, name, fl_dtype_choices());
    return dt;
}

fl_dtype fl_lcheckdtype(lua_State *L, int arg) {
    if (lua_type(L, arg) != LUA_TSTRING)
        luaL_argerror(L, arg, lua_pushfstring(L, "expected a dtype name (%s), got %s",
                                              fl_dtype_choices(), luaL_typename(L, arg)));
    const char *name = lua_tostring(L, arg);
    fl_dtype dt;
    if (!fl_dtype_from_name(name, &dt))
        luaL_argerror(L, arg, lua_pushfstring(L, "unknown dtype '%s' (valid: %s)", name,
                                              fl_dtype_choices()));
    return dt;
}

void fl_lcheck_distinct(lua_State *L, const fl_tensor *t, const char *fname) {
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] == 0 && t->shape[d] > 1)
            luaL_error(L, "%s: more than one element of the tensor refers to one memory location (an expanded "
                       "view); write to a copy (:clone() or :contiguous())", fname);
}

fl_dtype fl_lcheckfp8(lua_State *L, int arg) {
    if (lua_type(L, arg) != LUA_TSTRING)
        luaL_argerror(L, arg, lua_pushfstring(L, "expected an FP8 format name (e4m3, e5m2), got %s",
                                              luaL_typename(L, arg)));
    const char *name = lua_tostring(L, arg);
    fl_dtype dt;
    if (!fl_dtype_from_name(name, &dt) || !fl_format(dt)->is_fp8)
        luaL_argerror(L, arg, lua_pushfstring(L, "unknown FP8 format '%s' (valid: e4m3, e5m2)", name));
    return dt;
}

int fl_device_from_name(const char *name, int *dev) {
    for (int d = 0; d < FL_DEV_COUNT; d++)
        if (strcmp(name, fl_device_name(d)) == 0) { *dev = d; return 1; }
    return 0;
}

int fl_lcheckdevice(lua_State *L, int arg, const char *fname) {
    int dev = FL_DEV_CPU;
    if (lua_type(L, arg) != LUA_TSTRING)
        luaL_error(L, "%s: device must be \"cpu\" or \"cuda\", got %s", fname, luaL_typename(L, arg));
    if (!fl_device_from_name(lua_tostring(L, arg), &dev))
        luaL_error(L, "%s: unknown device '%s' (valid: cpu, cuda)", fname, lua_tostring(L, arg));
    return dev;
}

const char *fl_lpushshape(lua_State *L, int ndim, const int64_t *shape) {
    char buf[8 * 24 + 8];
    fl_shape_str(buf, sizeof buf, ndim, shape);
    return lua_pushstring(L, buf);
}

/* ---- argument checking -------------------------------------------------------------------- */

static const char *value_str(lua_State *L, int arg) {
    int t = lua_type(L, arg);
    if (t == LUA_TNUMBER || t == LUA_TBOOLEAN) return luaL_tolstring(L, arg, NULL);   /* pushes; fine before an error */
    if (t == LUA_TSTRING) {
        size_t n; const char *s = lua_tolstring(L, arg, &n);
        return lua_pushfstring(L, "string \"%s%s\"", n > 40 ? lua_pushlstring(L, s, 40) : s, n > 40 ? "..." : "");
    }
    return luaL_typename(L, arg);
}

lua_Integer fl_lcheckint(lua_State *L, int arg, const char *fname, const char *what, lua_Integer min, lua_Integer max) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, arg, &isint);
    if (!isint || lua_type(L, arg) != LUA_TNUMBER || v < min || v > max) {
        arg = lua_absindex(L, arg);
        luaL_error(L, "%s: %s must be an integer in [%I, %I], got %s", fname, what, min, max, value_str(L, arg));
    }
    return v;
}

lua_Integer fl_loptint(lua_State *L, int arg, const char *fname, const char *what, lua_Integer min, lua_Integer max,
                       lua_Integer def) {
    if (lua_isnoneornil(L, arg)) return def;
    return fl_lcheckint(L, arg, fname, what, min, max);
}

lua_Number fl_lcheckfinite(lua_State *L, int arg, const char *fname, const char *what, lua_Number min, lua_Number max) {
    if (lua_type(L, arg) != LUA_TNUMBER)
        luaL_error(L, "%s: %s must be a number, got %s", fname, what, value_str(L, lua_absindex(L, arg)));
    lua_Number v = lua_tonumber(L, arg);
    if (!isfinite(v) || v < min || v > max)
        luaL_error(L, "%s: %s must be a finite number in [%f, %f], got %f", fname, what, min, max, v);
    return v;
}

lua_Integer fl_lchecklen(lua_State *L, int arg, const char *fname, const char *what, lua_Integer max) {
    arg = lua_absindex(L, arg);
    if (lua_type(L, arg) != LUA_TTABLE)
        luaL_error(L, "%s: %s must be a table, got %s", fname, what, value_str(L, arg));
    lua_len(L, arg);
    int isint = 0;
    lua_Integer n = lua_tointegerx(L, -1, &isint);
    if (!isint || n < 0 || n > max)
        luaL_error(L, "%s: %s has length %s (expected an integer 0..%I; does its __len lie?)", fname, what,
                   fl_lshow(L, -1), max);
    lua_pop(L, 1);
    /* a list: a key past 1..n would be read by nothing ({2, 3, dtype="bf16"}, {2, keepdim=true}); a table whose
     * __len gives its length keeps its entries as it likes */
    if (luaL_getmetafield(L, arg, "__len") != LUA_TNIL) {
        lua_pop(L, 1);
        return n;
    }
    check_list_keys(L, arg, n, fname, what);
    return n;
}

const char *fl_lcheckpath(lua_State *L, int arg, const char *fname) {
    size_t n;
    const char *s = luaL_checklstring(L, arg, &n);
    if (strlen(s) != n) luaL_error(L, "%s: path must not contain a NUL byte, got \"%s\\0...\"", fname, s);
    return s;
}

int64_t fl_lchecknumel(lua_State *L, const char *fname, int ndim, const int64_t *shape, int64_t limit) {
    int64_t n = 0;
    if (fl_shape_numel(fname, ndim, shape, &n) != FL_OK) fl_lcheck(L, FL_EINVAL);
    if (limit > 0 && n > limit)
        luaL_error(L, "%s: too large: %I elements (limit %I)", fname, (lua_Integer)n, (lua_Integer)limit);
    return n;
}

int fl_lcheckf(lua_State *L, fl_status s, const char *fname) {
    if (s == FL_OK) return 0;
    if (s == FL_EINTR) return luaL_error(L, "interrupted");
    const char *msg = fl_last_error_detail();
    if (!msg || !*msg) msg = "core operation failed (no detail recorded)";
    if (strstr(msg, fname)) return luaL_error(L, "%s", msg);
    return luaL_error(L, "%s: %s", fname, msg);
}
