/* l_autograd.c — the autograd surface of fp8.Tensor (requires_grad, the t.grad field, backward, retain_grad,
 * register_hook, register_post_accumulate_grad_hook, detach, zero_grad, is_leaf, grad_fn) and the grad/autocast mode
 * functions of fp8.
 * t.grad is a FIELD (tensor or nil), read and assigned through l_tensor.c's __index/__newindex;
 * t:grad() also works: a tensor called as g(owner) returns g when it is owner's gradient. */
#include <stdlib.h>
#include <string.h>
#include "l_util.h"
#include "autograd.h"
#include "ops.h"
#include "device.h"

/* t:requires_grad() -> bool; t:requires_grad(bool) -> t (so fp8.randn(3, 4):requires_grad(true) chains) */
static int m_requires_grad(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "requires_grad", "([flag])");
    if (lua_isnone(L, 2)) { lua_pushboolean(L, t->requires_grad); return 1; }
    if (!lua_isboolean(L, 2))
        return luaL_argerror(L, 2, lua_pushfstring(L, "expected a boolean, got %s", luaL_typename(L, 2)));
    fl_lcheck(L, fl_tensor_set_requires_grad(t, lua_toboolean(L, 2)));
    lua_settop(L, 1);
    return 1;
}

/* t:requires_grad_([flag=true]) -> t: torch's in-place spelling */
static int m_requires_grad_(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "requires_grad_", "([flag=true])");
    if (!lua_isnone(L, 2) && !lua_isboolean(L, 2))
        return luaL_argerror(L, 2, lua_pushfstring(L, "expected a boolean, got %s", luaL_typename(L, 2)));
    fl_lcheck(L, fl_tensor_set_requires_grad(t, lua_isnone(L, 2) || lua_toboolean(L, 2)));
    lua_settop(L, 1);
    return 1;
}

static int m_is_leaf(lua_State *L) { lua_pushboolean(L, fl_lchecknoargs(L, "is_leaf")->grad_fn == NULL); return 1; }

static int m_grad_fn(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "grad_fn");
    if (t->grad_fn) lua_pushstring(L, t->grad_fn->name); else lua_pushnil(L);
    return 1;
}

/* t:retain_grad() -> t: a backward fills t.grad although an op made t (torch's retain_grad; it returns None) */
static int m_retain_grad(lua_State *L) {
    fl_lcheck(L, fl_tensor_retain_grad(fl_lchecknoargs(L, "retain_grad")));
    lua_settop(L, 1);
    return 1;
}

/* t:retains_grad() -> bool: torch's t.retains_grad (false for a leaf, whose .grad is filled anyway) */
static int m_retains_grad(lua_State *L) {
    const fl_tensor *t = fl_lchecknoargs(L, "retains_grad");
    lua_pushboolean(L, t->retains_grad && t->grad_fn);
    return 1;
}

static int m_detach(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "detach");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_detach(slot, t));
    return 1;
}

static int m_zero_grad(lua_State *L) {
    fl_tensor_zero_grad(fl_lchecknoargs(L, "zero_grad"));
    return 0;
}

/* ---- gradient hooks: t:register_hook(fn) -------------------------------------------------------------------
 * The core calls lua_grad_hook with the hook's key; the Lua function is found under that key. A hook list can be
 * freed anywhere (a tensor dropped by a collection, at exit), so the core's ud_free only queues the key; the tables
 * drop the queued keys at the next register_hook, remove or backward, where a state is at hand. The hooks run in
 * the state that started the backward (m_backward sets it).
 *
 * How a function is held (so that one that refers to its own tensor, `t:register_hook(function(g) ... t ... end)`,
 * is collected with it, as torch's collector frees that cycle): while the tensor is held by the box it was
 * registered on and nothing else (no graph node, no other box, no C structure; its grad_fn, where it has one, held
 * by it alone), nothing but that box can reach the hook, so the function is held through the box only (an
 * ephemeron, weak keys {[box] = {[key] = fn}}): a cycle box -> fn -> box is collected. Otherwise it is held from the
 * registry (hook_fns[key] = fn). The core says when such a tensor gains a second reference (fl_set_hooks_shared):
 * hooks_shared pins its functions at once, without allocating (hook_fns[key] holds false for a weak one, so the
 * slot exists), on a thread of this state kept for it; the tensor's box is on some stack or reachable when that
 * happens, so the function is still there. Back to one reference, it is made weak again at once where the box is
 * that one holder (weaken_now), else the key is queued and push_hook_fns checks it again. A hook the core frees lets
 * go of its function at once (hook_ud_free). */
static const char hook_fns_key = 0;    /* {[key] = fn (held) | false (held through its box)} */
static const char hook_weak_key = 0;   /* weak values {[key] = fn}: finds a weak one's function */
static const char hook_eph_key = 0;    /* weak keys {[box] = {[key] = fn}}: a weak one's hold */
static _Thread_local lua_State *hook_L;
static _Thread_local lua_State *pin_L;   /* a thread of the hooks' state, never run: the pins' stack room */
static const char pin_thread_key = 0;   /* the registry's anchor of pin_L */
static _Thread_local uint64_t next_hook_key;
static _Thread_local uint64_t *unref_q, *unshare_q;
static _Thread_local size_t unref_n, unref_cap, unshare_n, unshare_cap;

static void queue_key(uint64_t **q, size_t *n, size_t *cap, uint64_t key) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        uint64_t *nq = realloc(*q, c * sizeof *nq);
        if (!nq) return;   /* out of memory: an unref leaves a few bytes in the table, an unshare a strong hold */
        *q = nq;
        *cap = c;
    }
    (*q)[(*n)++] = key;
}

/* The core freed a hook (its tensor freed, or removed): its function is let go at once (hook_fns[key] = nil: no
 * allocation), the key queued for the other tables. Until stop 97 the function stayed held until the next backward,
 * register_hook or remove, and with it what it refers to (a dropped model's tensors, through the hook's upvalues). */
static void hook_ud_free(void *ud) {
    lua_State *P = pin_L;
    if (P) {
        if (lua_rawgetp(P, LUA_REGISTRYINDEX, &hook_fns_key) == LUA_TTABLE) {
            lua_pushnil(P);
            lua_rawseti(P, -2, (lua_Integer)(uintptr_t)ud);
        }
        lua_pop(P, 1);
    }
    queue_key(&unref_q, &unref_n, &unref_cap, (uint64_t)(uintptr_t)ud);
}

/* Pushes the function of hook key held through its box (pushes nil where there is none): the weak table's, or where
 * that has lost it, the ephemeron's. Lua clears a weak value that only objects being finalized reach before their
 * finalizers run, but keeps an ephemeron's entry whose key (the box) is being finalized until the next cycle (the
 * manual, 2.5.4), so a box used in another object's __gc after both became unreachable finds its hooks there (they
 * were skipped until stop 97). The scan (no allocation) runs only on such a miss. */
static void push_weak_fn(lua_State *L, lua_Integer key) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hook_weak_key) == LUA_TTABLE) lua_rawgeti(L, -1, key);
    else lua_pushnil(L);
    lua_remove(L, -2);
    if (!lua_isnil(L, -1)) return;
    lua_pop(L, 1);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hook_eph_key) == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {   /* eph, box, {[key] = fn} */
            if (lua_type(L, -1) == LUA_TTABLE) {
                if (lua_rawgeti(L, -1, key) != LUA_TNIL) {   /* eph, box, t, fn */
                    lua_replace(L, -4);
                    lua_pop(L, 2);
                    return;
                }
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    lua_pushnil(L);
}

static const char post_boxes_key;
static bool hook_unshared(lua_State *L, int boxes, lua_Integer key);

/* Hook key's function held through its box again, where it is held from the registry and the box registered on is
 * the tensor's one holder: true when done. No allocation (hook_fns[key] exists; it takes false), so the callback
 * below does it at once; until stop 97 the key was only queued, and the function stayed strongly held until the
 * next backward, register_hook or remove (a model dropped with no later backward kept its hooks' closures). Where
 * it is not done (the tables not made yet, the box not the holder) the key is queued for push_hook_fns as before. */
static bool weaken_now(lua_State *P, lua_Integer key) {
    const int top = lua_gettop(P);
    bool done = false;
    if (lua_rawgetp(P, LUA_REGISTRYINDEX, &hook_fns_key) == LUA_TTABLE && lua_rawgeti(P, -1, key) == LUA_TFUNCTION
        && lua_rawgetp(P, LUA_REGISTRYINDEX, &post_boxes_key) == LUA_TTABLE
        && hook_unshared(P, lua_absindex(P, -1), key)) {
        lua_pushboolean(P, 0);
        lua_rawseti(P, top + 1, key);
        done = true;
    }
    lua_settop(P, top);
    return done;
}

/* fl_set_hooks_shared's callback: t's Lua hooks held strongly now (shared), or held through their box again (not,
 * weaken_now). No allocation, no error: it runs inside the core. */
static void hooks_shared(fl_tensor *t, bool shared) {
    lua_State *P = pin_L;
    if (!P) return;
    fl_grad_hooks *lists[2] = { t->hooks, t->post_hooks };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && i < lists[l]->n; i++) {
            if (lists[l]->v[i].ud_free != hook_ud_free) continue;   /* not a Lua hook */
            const lua_Integer key = (lua_Integer)(uintptr_t)lists[l]->v[i].ud;
            if (!shared) {   /* back to one holder: held through its box at once where that box is the holder */
                if (!weaken_now(P, key)) queue_key(&unshare_q, &unshare_n, &unshare_cap, (uint64_t)key);
                continue;
            }
            lua_rawgetp(P, LUA_REGISTRYINDEX, &hook_fns_key);
            if (lua_rawgeti(P, -1, key) == LUA_TBOOLEAN) {   /* weak: hook_fns[key] = the function */
                push_weak_fn(P, key);
                if (lua_isnil(P, -1)) lua_pop(P, 1);
                else lua_rawseti(P, -3, key);   /* an existing key: no allocation */
            }
            lua_pop(P, 2);
        }
}

/* A post-accumulate-grad hook's tensor as registered (the box), held weakly under the hook's key: the hook gets the
 * very object it was registered on while Lua holds it (torch's, so a table keyed by parameters finds it); every
 * hook's box, for the weak holds above. */
static const char post_boxes_key = 0;   /* (declared above) */

/* Whether hook key's function may be held through its box: the box registered on still holds the tensor, which
 * nothing else holds, and whose grad_fn (where it has one) nothing but it holds. boxes: the boxes' table. */
static bool hook_unshared(lua_State *L, int boxes, lua_Integer key) {
    bool yes = false;
    lua_rawgeti(L, boxes, key);
    fl_tensor **slot = luaL_testudata(L, -1, FL_TENSOR_MT);
    fl_tensor *t = slot ? *slot : NULL;
    if (t && t->refcount == 1 && (!t->grad_fn || t->grad_fn->refcount == 1)) {
        fl_grad_hooks *lists[2] = { t->hooks, t->post_hooks };
        for (int l = 0; l < 2 && !yes; l++)
            for (size_t i = 0; lists[l] && i < lists[l]->n && !yes; i++)
                yes = lists[l]->v[i].ud_free == hook_ud_free && (lua_Integer)(uintptr_t)lists[l]->v[i].ud == key;
    }
    lua_pop(L, 1);
    return yes;
}

/* __gc of the pins' anchor (the state is closing): no pins after it, the thread goes with the state */
static int pin_anchor_gc(lua_State *L) {
    (void)L;
    pin_L = NULL;
    fl_set_hooks_shared(NULL);
    return 0;
}

/* Pushes the state's table of hook functions (made on first use) after dropping the queued keys and making the
 * queued ones weak where they may be (pin_L and the core's callback set up on first use). */
static void push_hook_fns(lua_State *L) {
    if (!pin_L) {
        lua_State *P = lua_newthread(L);
        lua_checkstack(P, 12);   /* the pins' room, taken now: a pin must not allocate */
        lua_newuserdatauv(L, 1, 1);   /* the anchor: holds the thread; its __gc (at lua_close) ends the pins */
        lua_insert(L, -2);
        lua_setiuservalue(L, -2, 1);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, pin_anchor_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &pin_thread_key);   /* anchored for the state's life */
        fl_lpush_reg_table(L, &hook_fns_key, NULL);
        fl_lpush_reg_table(L, &hook_weak_key, "v");
        lua_pop(L, 2);
        pin_L = P;
        fl_set_hooks_shared(hooks_shared);
    }
    fl_lpush_reg_table(L, &hook_eph_key, "k");
    fl_lpush_reg_table(L, &post_boxes_key, "v");
    fl_lpush_reg_table(L, &hook_weak_key, "v");
    fl_lpush_reg_table(L, &hook_fns_key, NULL);   /* -1 fns, -2 weak, -3 boxes, -4 eph */
    for (size_t i = 0; i < unref_n; i++) {
        const lua_Integer k = (lua_Integer)unref_q[i];
        if (lua_rawgeti(L, -3, k) != LUA_TNIL && lua_rawget(L, -5) == LUA_TTABLE) {   /* eph[box][k] = nil */
            lua_pushnil(L);
            lua_rawseti(L, -2, k);
        }
        lua_pop(L, 1);
        for (int j = -1; j >= -3; j--) { lua_pushnil(L); lua_rawseti(L, j - 1, k); }
    }
    unref_n = 0;
    for (size_t i = 0; i < unshare_n; i++) {
        const lua_Integer k = (lua_Integer)unshare_q[i];
        const bool held = lua_rawgeti(L, -1, k) == LUA_TFUNCTION;
        lua_pop(L, 1);
        if (held && hook_unshared(L, lua_absindex(L, -3), k)) { lua_pushboolean(L, 0); lua_rawseti(L, -2, k); }
    }
    unshare_n = 0;
    lua_replace(L, -4);
    lua_pop(L, 2);
}

/* The start of a Lua hook's call (key ud): its function pushed on the backward's state *Lp; *top the height to
 * restore. *pushed false: the hook was removed meanwhile and nothing is to be called. */
static fl_status hook_fn_push(lua_State **Lp, void *ud, int *top, bool *pushed) {
    lua_State *L = *Lp = hook_L;
    *pushed = false;
    if (!L) return FL_ERR(FL_EINVAL, "backward: a tensor's hook runs only in a backward started from Lua");
    if (!lua_checkstack(L, 5)) return FL_ERR(FL_ENOMEM, "backward: no Lua stack left for a tensor's hook");
    *top = lua_gettop(L);
    push_hook_fns(L);
    if (lua_rawgeti(L, -1, (lua_Integer)(uintptr_t)ud) == LUA_TBOOLEAN) {   /* held through its box */
        lua_pop(L, 1);
        push_weak_fn(L, (lua_Integer)(uintptr_t)ud);
    }
    *pushed = !lua_isnil(L, -1);
    if (!*pushed) lua_settop(L, *top);
    else lua_remove(L, -2);
    return FL_OK;
}

/* The error a Lua hook raised in the backward now unwinding, kept in the registry under hook_err_key: the backward's
 * entry (backward_check) raises it as it was, a table as itself and a message whole (torch re-raises the hook's own
 * exception), where the core's copy of the message is cut at its 1 KiB buffer. Each backward starts with none. */
static const char hook_err_key = 0;

/* A message that starts with this came from a backward of the user's own that a hook runs (fp8.autograd.Function's,
 * a checkpoint's recompute: lua/fp8/autograd_function.lua's _link): kept as the user's code raised it, without the
 * hook's prefix (torch re-raises such a backward's exception as it is). core._RAW_BACKWARD_ERROR in Lua. */
#define RAW_MARK "\x01fp8 backward\x01"

/* Keeps the error value on top of the stack (popped): a message behind `prefix` (not behind RAW_MARK, which is
 * dropped), any other value as it is (in a one-slot table, so that a nil or a number comes back as itself:
 * lua_tostring turned a number into a message, and a nil kept looked like none kept). */
static void hook_err_keep(lua_State *L, const char *prefix) {
    if (lua_type(L, -1) == LUA_TSTRING && strncmp(lua_tostring(L, -1), RAW_MARK, sizeof RAW_MARK - 1) == 0) {
        lua_pushstring(L, lua_tostring(L, -1) + sizeof RAW_MARK - 1);
        lua_remove(L, -2);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        lua_pushstring(L, prefix);
        lua_insert(L, -2);
        lua_concat(L, 2);
    }
    lua_createtable(L, 1, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hook_err_key);
}

/* The text of the error value on top of the stack for the core's message, without converting a number in place. */
static const char *hook_err_text(lua_State *L) {
    if (lua_type(L, -1) != LUA_TSTRING) return luaL_typename(L, -1);
    const char *m = lua_tostring(L, -1);
    return strncmp(m, RAW_MARK, sizeof RAW_MARK - 1) == 0 ? m + sizeof RAW_MARK - 1 : m;
}

static void hook_err_clear(lua_State *L) {
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hook_err_key);
}

/* fl_lcheck for a backward's status: a hook's kept error raised in place of the core's message of it. */
static void backward_check(lua_State *L, fl_status st) {
    if (st != FL_OK) {
        if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hook_err_key) != LUA_TNIL && st != FL_EINTR) {
            hook_err_clear(L);
            fl_clear_error();
            lua_rawgeti(L, -1, 1);   /* the value kept */
            if (lua_type(L, -1) == LUA_TSTRING) luaL_error(L, "%s", lua_tostring(L, -1));
            lua_error(L);
        }
        lua_pop(L, 1);
        hook_err_clear(L);
    }
    fl_lcheck(L, st);
}

static fl_status lua_grad_hook(void *ud, const fl_tensor *grad, fl_tensor **out) {
    lua_State *L;
    char a[200], b[200];
    int top;
    bool pushed;
    fl_status st = hook_fn_push(&L, ud, &top, &pushed);
    if (st != FL_OK || !pushed) return st;
    fl_lpushretained(L, (fl_tensor *)grad);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        st = FL_ERR(FL_EINVAL, "backward: a tensor's hook raised: %s", hook_err_text(L));
        hook_err_keep(L, "backward: a tensor's hook raised: ");
    } else if (!lua_isnil(L, -1)) {
        const fl_tensor *r = fl_ltotensor(L, -1);
        if (!r)
            st = FL_ERR(FL_EINVAL, "backward: a tensor's hook returned %s; it returns nothing, or a tensor: the "
                        "gradient to use instead", luaL_testudata(L, -1, FL_TENSOR_MT) ? "a released tensor"
                                                                                        : luaL_typename(L, -1));
        else if (!fl_shape_equal(r->ndim, r->shape, grad->ndim, grad->shape))
            st = FL_ERR(FL_EINVAL, "backward: a tensor's hook returned a tensor of shape %s for a gradient of shape %s",
                        fl_shape_str(a, sizeof a, r->ndim, r->shape),
                        fl_shape_str(b, sizeof b, grad->ndim, grad->shape));
        else if (r->device != grad->device)
            st = FL_ERR(FL_EINVAL, "backward: a tensor's hook returned a tensor on %s for a gradient on %s",
                        fl_device_name(r->device), fl_device_name(grad->device));
        else if (fl_format(r->dtype)->is_fp8)
            st = FL_ERR(FL_EINVAL, "backward: a tensor's hook returned an %s tensor; return a gradient in fp32, "
                        "bf16 or fp16 (dequantize it)", fl_format(r->dtype)->name);
        else if (r->dtype == FL_F32 && fl_tensor_is_contiguous(r))
            *out = fl_tensor_retain((fl_tensor *)r);
        else
            st = fl_tensor_to(out, r, FL_F32);
    }
    lua_settop(L, top);
    return st;
}

/* A post-accumulate-grad hook: fn(t) with the tensor as registered where Lua still holds that box, else a new box
 * of it; it returns nothing (torch's must return None). */
static fl_status lua_post_hook(void *ud, fl_tensor *t) {
    lua_State *L;
    int top;
    bool pushed;
    fl_status st = hook_fn_push(&L, ud, &top, &pushed);
    if (st != FL_OK || !pushed) return st;
    fl_lpush_reg_table(L, &post_boxes_key, "v");
    lua_rawgeti(L, -1, (lua_Integer)(uintptr_t)ud);
    lua_remove(L, -2);
    if (fl_ltotensor(L, -1) != t) { lua_pop(L, 1); fl_lpushretained(L, t); }
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        st = FL_ERR(FL_EINVAL, "backward: a tensor's post-accumulate-grad hook raised: %s", hook_err_text(L));
        hook_err_keep(L, "backward: a tensor's post-accumulate-grad hook raised: ");
    } else if (!lua_isnil(L, -1))
        st = FL_ERR(FL_EINVAL, "backward: a tensor's post-accumulate-grad hook returned %s; it returns nothing (it "
                    "reads or changes t.grad, or t itself, in place)",
                    luaL_testudata(L, -1, FL_TENSOR_MT) ? (fl_ltotensor(L, -1) ? "a tensor" : "a released tensor")
                                                       : luaL_typename(L, -1));
    lua_settop(L, top);
    return st;
}

/* A handle: the tensor's hook list (a reference, so removing works after the tensor is gone) and the hook's id. */
#define HOOK_HANDLE_MT "fp8.TensorHookHandle"
typedef struct { fl_grad_hooks *list; uint64_t id; } hook_handle;

/* t:<fname>(fn): the checks, then the handle pushed (first: an error below leaves nothing half-made) and fn kept under
 * a new key, returned; with box, t's box too (held weakly: a post-accumulate-grad hook gets it back). */
static uint64_t hook_register(lua_State *L, const char *fname, bool box, fl_tensor **t, hook_handle **h) {
    *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, fname, "(hook)");
    if (!lua_isfunction(L, 2) && !luaL_getmetafield(L, 2, "__call"))
        luaL_argerror(L, 2, lua_pushfstring(L, "expected a function (hook), got %s", luaL_typename(L, 2)));
    lua_settop(L, 2);
    *h = lua_newuserdatauv(L, sizeof **h, 0);
    (*h)->list = NULL;
    (*h)->id = 0;
    luaL_setmetatable(L, HOOK_HANDLE_MT);
    const uint64_t key = ++next_hook_key;
    const lua_Integer k = (lua_Integer)key;
    (void)box;   /* every hook's box is kept (weakly): a post-accumulate-grad hook gets it back */
    push_hook_fns(L);                            /* 4 */
    lua_pushvalue(L, 2);
    lua_rawseti(L, 4, k);                        /* held from the registry; hook_settle may hold it through t's box */
    fl_lpush_reg_table(L, &hook_weak_key, "v");   /* 5 */
    lua_pushvalue(L, 2);
    lua_rawseti(L, 5, k);
    fl_lpush_reg_table(L, &post_boxes_key, "v");  /* 6 */
    lua_pushvalue(L, 1);
    lua_rawseti(L, 6, k);
    fl_lpush_reg_table(L, &hook_eph_key, "k");    /* 7 */
    lua_pushvalue(L, 1);
    if (lua_rawget(L, 7) != LUA_TTABLE) {        /* 8: the box's {[key] = fn} */
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, 1);
        lua_pushvalue(L, -2);
        lua_rawset(L, 7);
    }
    lua_pushvalue(L, 2);
    lua_rawseti(L, 8, k);
    lua_settop(L, 3);                            /* the handle */
    return key;
}

/* t:register_hook(fn) -> handle: fn(grad) runs when a backward has t's gradient (fl_tensor_add_grad_hook); it
 * returns nothing or the gradient to use instead. handle:remove() takes it out. */
/* After the core took hook key: held through its box where nothing else holds the tensor (push_hook_fns checks). */
static void hook_settle(lua_State *L, uint64_t key) {
    queue_key(&unshare_q, &unshare_n, &unshare_cap, key);
    push_hook_fns(L);
    lua_pop(L, 1);
}

static int m_register_hook(lua_State *L) {
    fl_tensor *t;
    hook_handle *h;
    const uint64_t key = hook_register(L, "register_hook", false, &t, &h);
    fl_lcheck(L, fl_tensor_add_grad_hook(t, lua_grad_hook, (void *)(uintptr_t)key, hook_ud_free, &h->id, &h->list));
    hook_settle(L, key);
    return 1;
}

/* t:register_post_accumulate_grad_hook(fn) -> handle: fn(t) runs after a backward has added t's gradient into
 * t.grad (fl_tensor_add_post_accumulate_grad_hook); a leaf's only. handle:remove() takes it out. */
static int m_register_post_accumulate_grad_hook(lua_State *L) {
    fl_tensor *t;
    hook_handle *h;
    const uint64_t key = hook_register(L, "register_post_accumulate_grad_hook", true, &t, &h);
    fl_lcheck(L, fl_tensor_add_post_accumulate_grad_hook(t, lua_post_hook, (void *)(uintptr_t)key, hook_ud_free,
                                                         &h->id, &h->list));
    hook_settle(L, key);
    return 1;
}

static int hook_handle_remove(lua_State *L) {
    hook_handle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    fl_lmaxargs(L, 1, "remove", "no arguments");
    if (h->list) {
        fl_grad_hooks_remove(h->list, h->id);
        fl_grad_hooks_release(h->list);
        h->list = NULL;
    }
    push_hook_fns(L);   /* drops the function now */
    return 0;
}

/* __close(handle, err): `local h <close> = t:register_hook(fn)` removes the hook at the block's end */
static int hook_handle_close(lua_State *L) {
    lua_settop(L, 1);
    return hook_handle_remove(L);
}

static int hook_handle_gc(lua_State *L) {
    hook_handle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    fl_grad_hooks_release(h->list);   /* the hook stays on the tensor, as torch's when its handle is dropped */
    h->list = NULL;
    return 0;
}

static int hook_handle_index(lua_State *L) {
    hook_handle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "id") == 0) lua_pushinteger(L, (lua_Integer)h->id);
    else if (k && strcmp(k, "remove") == 0) lua_pushcfunction(L, hook_handle_remove);
    else lua_pushnil(L);
    return 1;
}

static int hook_handle_tostring(lua_State *L) {
    hook_handle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    lua_pushfstring(L, "RemovableHandle(id=%I)", (lua_Integer)h->id);
    return 1;
}

/* The tensor at the top of the stack, entry i (1-based) of list `what` of function fname (popped); nil gives NULL
 * where nil_ok; otherwise an error naming the entry: released, or not a tensor. The list holds the tensor. */
static fl_tensor *list_entry(lua_State *L, const char *fname, const char *what, int i, bool nil_ok) {
    fl_tensor *t = fl_ltotensor(L, -1);
    if (!t && !(nil_ok && lua_isnil(L, -1)))
        luaL_error(L, "%s: %s[%d] %s", fname, what, i, luaL_testudata(L, -1, FL_TENSOR_MT)
                   ? "has been released (freed or closed)"
                   : lua_pushfstring(L, "is %s; expected a tensor%s", luaL_typename(L, -1), nil_ok ? " or nil" : ""));
    lua_pop(L, 1);
    return t;
}

/* t:backward([grad][, {retain_graph=bool, inputs=tensor|{tensors}}]) — grad may be omitted for a one-element t;
 * inputs: fill only their .grad (torch's), running only the graph between t and them. */
/* How many walks restricted to some inputs (fp8.autograd.grad, a backward's inputs=) run now on this thread:
 * activation checkpointing (lua/fp8/activation_checkpoint.lua) refuses to run its recomputation's backward, which
 * fills the parameters' .grad as a plain one, inside one (fp8.core._restricted_walks) */
static _Thread_local int restricted_walks;

static int m_backward(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "backward", "([gradient] [, {retain_graph=, inputs=}])");
    fl_tensor *g = NULL;
    int opts = 0;
    if (!lua_isnoneornil(L, 2)) {
        if (lua_istable(L, 2) && !fl_ltotensor(L, 2)) opts = 2;
        else g = fl_lchecktensor(L, 2);
    }
    if (!opts && !lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        opts = 3;
    } else if (opts == 2 && !lua_isnone(L, 3)) {   /* the options came second: a third argument was dropped */
        luaL_error(L, "backward: takes ([gradient] [, {retain_graph=, inputs=}]): the options table came second, so "
                      "nothing follows it; got %s", luaL_typename(L, 3));
    }
    static const char *const keys[] = { "retain_graph", "inputs", NULL };
    if (opts) fl_lcheckopts(L, opts, "backward", keys);
    bool retain = opts && fl_lfieldbool(L, opts, "backward", "retain_graph", false);
    /* inputs= (torch's): a tensor or a list of them, copied into a userdata the stack holds (the list's own
     * entries hold the tensors: a plain table, read raw, so no metamethod runs) */
    fl_tensor **ins = NULL;
    int nin = 0;
    if (opts && lua_getfield(L, opts, "inputs") != LUA_TNIL) {
        const int li = lua_gettop(L);
        fl_tensor *one = fl_ltotensor(L, li);
        if (!one && luaL_testudata(L, li, FL_TENSOR_MT))
            return luaL_error(L, "backward: inputs has been released (freed or closed)");
        if (!one && (!lua_istable(L, li) || lua_getmetatable(L, li)))
            return luaL_error(L, "backward: inputs must be a tensor or a list of tensors, got %s",
                              luaL_typename(L, li));
        const lua_Integer n = one ? 1 : (lua_Integer)lua_rawlen(L, li);
        if (n < 1) return luaL_error(L, "backward: inputs is empty; give the tensors to fill the .grad of");
        if (n > (1 << 20)) return luaL_error(L, "backward: inputs holds %I tensors; at most 2^20", n);
        ins = lua_newuserdatauv(L, sizeof *ins * (size_t)n, 0);
        for (lua_Integer i = 0; i < n && !one; i++) {
            lua_rawgeti(L, li, i + 1);
            ins[i] = list_entry(L, "backward", "inputs", (int)i + 1, false);
        }
        if (one) ins[0] = one;
        nin = (int)n;
    }
    lua_State *prev = hook_L;   /* tensor hooks run in this state (a nested backward restores the outer one's) */
    hook_L = L;
    hook_err_clear(L);
    const fl_tensor *gs[1] = { g };
    if (ins) restricted_walks++;
    fl_status st = fl_backward_many(&t, gs, 1, retain, ins, nin);
    /* FL_LCALL's retry, only where the walk changed nothing: once a node ran, its gradients are in the leaves and the
     * nodes that ran are freed, so a second walk answered 'trying to backward through the graph a second time' in
     * place of the out of memory (or, with retain_graph, added those gradients twice) */
    if (st == FL_ENOMEM && fl_autograd_walk_untouched()) {
        lua_gc(L, LUA_GCCOLLECT);
        st = fl_backward_many(&t, gs, 1, retain, ins, nin);
    }
    if (ins) restricted_walks--;
    hook_L = prev;
    push_hook_fns(L);   /* the functions of hooks removed meanwhile go */
    lua_pop(L, 1);
    backward_check(L, st);
    return 0;
}

/* The tensors of list idx (a Lua array of n tensors, checked by lua/fp8/autograd.lua) into v[0..n); nil_ok: nil
 * entries give NULL. */
static void list_tensors(lua_State *L, const char *fname, int idx, const char *what, fl_tensor **v, int n,
                         bool nil_ok) {
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        v[i] = list_entry(L, fname, what, i + 1, nil_ok);
    }
}

/* The pointer lists of fp8.autograd's calls in one userdata; its __gc releases the results not yet boxed (an error
 * while boxing them leaks none). */
#define GRAD_LISTS_MT "fp8.autograd_grad_lists"
typedef struct { lua_Integer nres; fl_tensor **res; } grad_lists;
static int grad_lists_gc(lua_State *L) {
    grad_lists *g = luaL_checkudata(L, 1, GRAD_LISTS_MT);
    for (lua_Integer i = 0; g->res && i < g->nres; i++) { fl_tensor_release(g->res[i]); g->res[i] = NULL; }
    return 0;
}

/* The arguments of fp8.core._autograd_grad and _autograd_backward: (outputs, inputs|nil, grad_outputs|nil, retain)
 * as lists made by lua/fp8/autograd.lua, read into a grad_lists userdata pushed on the stack: outs[no], gouts[no]
 * (NULL entries: ones), ins[ni] (ni 0 where inputs is nil), res[ni] (NULL). */
typedef struct { fl_tensor **outs, **gouts, **ins, **res; int no, ni; bool retain; } grad_args;
static grad_args read_grad_args(lua_State *L, const char *fname) {
    grad_args a;
    luaL_checktype(L, 1, LUA_TTABLE);
    const bool has_in = !lua_isnoneornil(L, 2), has_g = !lua_isnoneornil(L, 3);
    if (has_in) luaL_checktype(L, 2, LUA_TTABLE);
    if (has_g) luaL_checktype(L, 3, LUA_TTABLE);
    a.retain = lua_toboolean(L, 4);
    const lua_Integer no = luaL_len(L, 1), ni = has_in ? luaL_len(L, 2) : 0;
    if (no < 1 || no > (1 << 20) || ni < (has_in ? 1 : 0) || ni > (1 << 20))
        luaL_error(L, "%s: expected 1 to 2^20 outputs and inputs, got %d and %d", fname, (int)no, (int)ni);
    grad_lists *gl = lua_newuserdatauv(L, sizeof *gl + sizeof(fl_tensor *) * (size_t)(2 * no + 2 * ni), 0);
    gl->nres = 0;
    gl->res = NULL;
    luaL_setmetatable(L, GRAD_LISTS_MT);
    a.outs = (fl_tensor **)(gl + 1);
    a.gouts = a.outs + no;
    a.ins = a.gouts + no;
    a.res = a.ins + ni;
    for (lua_Integer i = 0; i < ni; i++) a.res[i] = NULL;
    gl->res = a.res;
    gl->nres = ni;
    a.no = (int)no;
    a.ni = (int)ni;
    list_tensors(L, fname, 1, "outputs", a.outs, a.no, false);
    list_tensors(L, fname, 2, "inputs", a.ins, a.ni, false);
    for (int i = 0; i < a.no; i++) a.gouts[i] = NULL;
    if (has_g) list_tensors(L, fname, 3, "grad_outputs", a.gouts, a.no, true);
    return a;
}

/* fp8.core._autograd_grad(outputs, inputs, grad_outputs|nil, retain_graph) -> {n = #inputs, grads...}: the lists
 * made and checked by fp8.autograd.grad (lua/fp8/autograd.lua); a nil entry where no gradient reached the input. */
static int l_autograd_grad(lua_State *L) {
    luaL_checktype(L, 2, LUA_TTABLE);
    grad_args a = read_grad_args(L, "grad");
    const fl_tensor *const *g = (const fl_tensor *const *)a.gouts;
    lua_State *prev = hook_L;   /* the tensors' hooks run in this state, as m_backward's */
    hook_L = L;
    hook_err_clear(L);
    restricted_walks++;
    fl_status st = fl_autograd_grad(a.outs, g, a.no, a.ins, a.ni, a.retain, a.res);
    if (st == FL_ENOMEM && fl_autograd_walk_untouched()) {
        lua_gc(L, LUA_GCCOLLECT);
        st = fl_autograd_grad(a.outs, g, a.no, a.ins, a.ni, a.retain, a.res);
    }
    restricted_walks--;
    hook_L = prev;
    push_hook_fns(L);
    lua_pop(L, 1);
    backward_check(L, st);
    lua_createtable(L, a.ni, 1);
    for (int i = 0; i < a.ni; i++) {
        if (!a.res[i]) continue;
        fl_tensor **slot = fl_lnewbox(L);   /* takes the reference */
        *slot = a.res[i];
        a.res[i] = NULL;
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, a.ni);
    lua_setfield(L, -2, "n");
    return 1;
}

/* fp8.core._autograd_backward(tensors, inputs|nil, grad_tensors|nil, retain_graph): torch.autograd.backward, the
 * lists made and checked by fp8.autograd.backward (lua/fp8/autograd.lua). */
static int l_autograd_backward(lua_State *L) {
    grad_args a = read_grad_args(L, "backward");
    const fl_tensor *const *g = (const fl_tensor *const *)a.gouts;
    fl_tensor *const *ins = a.ni ? a.ins : NULL;
    lua_State *prev = hook_L;
    hook_L = L;
    hook_err_clear(L);
    if (ins) restricted_walks++;
    fl_status st = fl_backward_many(a.outs, g, a.no, a.retain, ins, a.ni);
    if (st == FL_ENOMEM && fl_autograd_walk_untouched()) {
        lua_gc(L, LUA_GCCOLLECT);
        st = fl_backward_many(a.outs, g, a.no, a.retain, ins, a.ni);
    }
    if (ins) restricted_walks--;
    hook_L = prev;
    push_hook_fns(L);
    lua_pop(L, 1);
    backward_check(L, st);
    return 0;
}

/* Tensor __call: g(owner) -> g when g is owner's gradient, which makes t:grad() read like t.grad. */
static int m_call(lua_State *L) {
    fl_tensor *g = fl_lchecktensor(L, 1);
    fl_tensor *owner = fl_ltotensor(L, 2);
    if (!owner || owner->grad != g)
        return luaL_error(L, "a tensor is not callable (t:grad() works as the field t.grad)");
    if (lua_gettop(L) > 2)   /* t:grad(x) would read the field and drop x */
        return luaL_error(L, "grad: takes no arguments; got %d more argument%s", lua_gettop(L) - 2,
                          lua_gettop(L) > 3 ? "s" : "");
    lua_settop(L, 1);
    return 1;
}

/* __eq: two boxes are equal when they hold the same core tensor (t.grad makes a new box per read). */
static int m_eq(lua_State *L) {
    fl_tensor *a = fl_ltotensor(L, 1), *b = fl_ltotensor(L, 2);
    lua_pushboolean(L, a && a == b);
    return 1;
}

/* __lt / __le: a one-element tensor compares with a number or another as its value (torch's `if loss < 1:`, whose
 * bool() of one element is its truth); any other tensor has no single truth value: named, with the elementwise
 * methods (Lua's own error said only "attempt to compare fp8.Tensor with number"). */
static double cmp_operand(lua_State *L, int i, const char *op) {
    if (lua_type(L, i) == LUA_TNUMBER) return lua_tonumber(L, i);
    fl_tensor *t = fl_ltotensor(L, i);
    if (!t) {
        if (luaL_testudata(L, i, FL_TENSOR_MT)) luaL_error(L, "%s: the tensor has been released (freed or closed)", op);
        luaL_error(L, "%s: cannot compare a tensor with %s", op, luaL_typename(L, i));
    }
    if (fl_tensor_numel(t) != 1) {
        char sh[200];
        luaL_error(L, "%s: a tensor of shape %s has no single truth value (compare elementwise with :lt, :le, :gt, "
                      ":ge, or read one element's value with :item())", op,
                   fl_shape_str(sh, sizeof sh, t->ndim, t->shape));
    }
    if (fl_format(t->dtype)->is_fp8) luaL_error(L, "%s: the tensor is %s; dequantize it first", op, fl_format(t->dtype)->name);
    int64_t idx[FL_MAX_DIMS] = {0};
    double v = 0;
    fl_lcheck(L, fl_tensor_get(t, idx, &v));
    return v;
}
static int m_lt(lua_State *L) { lua_pushboolean(L, cmp_operand(L, 1, "<") < cmp_operand(L, 2, "<")); return 1; }
static int m_le(lua_State *L) { lua_pushboolean(L, cmp_operand(L, 1, "<=") <= cmp_operand(L, 2, "<=")); return 1; }

/* __index hook for string keys l_tensor.c does not find among the methods: "grad". */
int fl_lautograd_field(lua_State *L, fl_tensor *t, const char *key) {
    if (strcmp(key, "grad") == 0) {
        if (t->grad) fl_lpushretained(L, t->grad); else lua_pushnil(L);
        return 1;
    }
    /* t._version (torch's): how many in-place writes t's storage has had (views share it); a saved tensor's
     * version checked at its use tells whether it changed since it was saved (fp8.autograd.Function does) */
    if (strcmp(key, "_version") == 0) {
        if (!t->storage) return luaL_error(L, "t._version: the tensor has been released (freed or closed)");
        lua_pushinteger(L, (lua_Integer)t->storage->version);
        return 1;
    }
    /* t.data (torch's): t without history, sharing its storage (t:detach()); an in-place write through it is not
     * refused for t's sake, but still counts as a change of the storage for a backward that saved t */
    if (strcmp(key, "data") == 0) {
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_tensor_detach(slot, t));
        return 1;
    }
    return 0;
}

/* __newindex hook: t.grad = nil | tensor of t's shape (stored as fp32). Returns 0 for other keys. */
int fl_lautograd_setfield(lua_State *L, fl_tensor *t, const char *key, int val) {
    if (strcmp(key, "grad") != 0) return 0;
    if (lua_isnil(L, val)) { fl_tensor_zero_grad(t); return 1; }
    fl_tensor *g = fl_ltotensor(L, val);
    if (!g) return luaL_error(L, "t.grad must be a tensor or nil, got %s", luaL_typename(L, val));
    if (!fl_shape_equal(g->ndim, g->shape, t->ndim, t->shape)) {
        lua_pushstring(L, "t.grad: gradient shape ");
        fl_lpushshape(L, g->ndim, g->shape);
        lua_pushstring(L, " does not match the tensor's shape ");
        fl_lpushshape(L, t->ndim, t->shape);
        lua_concat(L, 4);
        return lua_error(L);
    }
    /* torch: "can't assign Variable as its own grad"; a view of t too: the next backward would add into t */
    if (g->storage && g->storage == t->storage)
        return luaL_error(L, "t.grad: the gradient shares the tensor's own storage (the next backward would add into "
                             "the tensor itself); assign a copy (g:clone())");
    /* gradients accumulate in place: a layout with overlapping elements (expand) or a strided view is copied */
    fl_tensor *c = NULL;
    if (g->dtype == FL_F32 && fl_tensor_is_contiguous(g)) c = fl_tensor_retain(g);
    else fl_lcheck(L, fl_tensor_to(&c, g, FL_F32));
    fl_tensor_release(t->grad);
    t->grad = c;
    return 1;
}

/* ---- modes -------------------------------------------------------------------------------- */

/* After a failed lua_pcall whose error is at -1: a yield refused at the C boundary (Lua's own "attempt to yield
 * across a C-call boundary", which names nothing) becomes "<name>: a coroutine yielded inside it (not allowed:
 * <why>); yield outside it". */
static void name_refused_yield(lua_State *L, const char *name, const char *why) {
    if (lua_type(L, -1) == LUA_TSTRING &&
        strcmp(lua_tostring(L, -1), "attempt to yield across a C-call boundary") == 0) {
        lua_pop(L, 1);
        lua_pushfstring(L, "%s: a coroutine yielded inside it (not allowed: %s); yield outside it", name, why);
    }
}

/* Run fn(...) with grad mode `on`, restoring the previous mode even when fn raises. fn may not yield: grad mode is
 * process-wide, and a suspended coroutine would leave it set for every other piece of code. */
static int with_grad_mode(lua_State *L, bool on, const char *fname) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    bool prev = fl_set_grad_enabled(on);
    int nargs = lua_gettop(L) - 1;
    int st = lua_pcall(L, nargs, LUA_MULTRET, 0);
    fl_set_grad_enabled(prev);
    if (st != LUA_OK) {
        name_refused_yield(L, fname, on ? "grad mode is process-wide, and would stay on for the rest of the program "
                                          "while the coroutine is suspended"
                                        : "grad mode is process-wide, and would stay off for the rest of the program "
                                          "while the coroutine is suspended");
        return lua_error(L);   /* rethrow the original error value */
    }
    return lua_gettop(L);
}
static int l_no_grad(lua_State *L) { return with_grad_mode(L, false, "no_grad"); }
static int l_enable_grad(lua_State *L) { return with_grad_mode(L, true, "enable_grad"); }
static int l_is_grad_enabled(lua_State *L) { fl_lmaxargs(L, 0, "is_grad_enabled", "no arguments"); lua_pushboolean(L, fl_grad_enabled()); return 1; }
static int l_set_grad_enabled(lua_State *L) {
    fl_lmaxargs(L, 1, "set_grad_enabled", "(flag)");
    if (!lua_isboolean(L, 1)) return luaL_argerror(L, 1, lua_pushfstring(L, "expected a boolean, got %s", luaL_typename(L, 1)));
    lua_pushboolean(L, fl_set_grad_enabled(lua_toboolean(L, 1)));   /* the previous mode */
    return 1;
}

/* fp8.core._pcall_scoped(name, fn, ...) -> pcall(fn, ...)'s results, but fn may not yield: the callers (autocast,
 * fp8_autocast, no_sync) hold a process-wide setting while fn runs, which a suspended coroutine would leave on for
 * every other piece of code until it resumed, or for good (no_grad refuses the same way). A yield's error says so. */
static int l_pcall_scoped(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int st = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
    if (st != LUA_OK)
        name_refused_yield(L, name, "its setting is process-wide, and would stay on for the rest of the program "
                                    "while the coroutine is suspended");
    lua_pushboolean(L, st == LUA_OK);
    lua_replace(L, 1);   /* (name's slot) */
    return lua_gettop(L);
}

/* fp8.core._pcall_noyield(name, why, fn, ...) -> pcall(fn, ...)'s results, fn refused a yield with the message
 * "<name>: a coroutine yielded inside it (not allowed: <why>); yield outside it" (save_state / load_state: the other
 * processes wait for this one in their collectives). name and why stay on the stack below fn while it runs. */
static int l_pcall_noyield(lua_State *L) {
    const char *name = luaL_checkstring(L, 1), *why = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int st = lua_pcall(L, lua_gettop(L) - 3, LUA_MULTRET, 0);
    if (st != LUA_OK) name_refused_yield(L, name, why);
    lua_pushboolean(L, st == LUA_OK);
    lua_replace(L, 1);   /* (name's slot; why's goes) */
    lua_remove(L, 2);
    return lua_gettop(L);
}

static const char *const autocast_names[] = { "fp32", "bf16", "fp16", NULL };
static const fl_dtype autocast_dts[] = { FL_F32, FL_BF16, FL_F16 };

static int l_autocast_dtype(lua_State *L) {
    fl_lmaxargs(L, 0, "autocast_dtype", "no arguments");
    fl_dtype dt = fl_autocast_dtype();
    lua_pushstring(L, fl_format(dt)->name);
    return 1;
}
/* set_autocast_dtype("fp32"|"bf16"|"fp16") -> previous name */
static int l_set_autocast_dtype(lua_State *L) {
    fl_lmaxargs(L, 1, "set_autocast_dtype", "(dtype)");
    const char *name = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (!name) return luaL_argerror(L, 1, lua_pushfstring(L, "expected a dtype name (fp32, bf16, fp16), got %s", luaL_typename(L, 1)));
    fl_dtype dt;
    int idx = -1;
    if (fl_dtype_from_name(name, &dt))
        for (int i = 0; autocast_names[i]; i++) if (autocast_dts[i] == dt) idx = i;
    if (idx < 0) return luaL_argerror(L, 1, lua_pushfstring(L, "autocast dtype must be one of fp32, bf16, fp16, got '%s'", name));
    fl_dtype prev = fl_set_autocast_dtype(autocast_dts[idx]);
    lua_pushstring(L, fl_format(prev)->name);
    return 1;
}

static const luaL_Reg tensor_methods[] = {
    {"requires_grad", m_requires_grad}, {"requires_grad_", m_requires_grad_}, {"is_leaf", m_is_leaf},
    {"grad_fn", m_grad_fn}, {"retain_grad", m_retain_grad}, {"retains_grad", m_retains_grad},
    {"register_hook", m_register_hook}, {"register_post_accumulate_grad_hook", m_register_post_accumulate_grad_hook},
    {"detach", m_detach}, {"zero_grad", m_zero_grad}, {"backward", m_backward},
    {NULL, NULL},
};

/* fp8.core._backwards_started() -> how many backwards have run on this thread (fl_autograd_backwards_started) */
static int l_backwards_started(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)fl_autograd_backwards_started());
    return 1;
}

/* fp8.core._name_grad_fn(t, name): t's grad_fn prints as name from now on (fp8.autograd.Function's results:
 * "SquareBackward", as torch names a custom Function's node). The name is kept in a registry table, so the pointer
 * the node holds stays valid while the state lives; one copy per distinct name. */
static const char node_names_key = 0;
static int l_name_grad_fn(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    size_t len;
    const char *name = luaL_checklstring(L, 2, &len);
    fl_lmaxargs(L, 2, "_name_grad_fn", "(tensor, name)");
    if (len == 0 || len > 200 || strlen(name) != len) return luaL_error(L, "_name_grad_fn: a name of 1-200 characters");
    if (!t->grad_fn) return luaL_error(L, "_name_grad_fn: the tensor has no grad_fn");
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &node_names_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &node_names_key);
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 2);
    lua_rawset(L, -3);   /* names[name] = name: the string stays alive, and with it its bytes */
    t->grad_fn->name = lua_tostring(L, 2);
    return 0;
}

/* fp8.core._link(t, s) -> t's data, its history leading to s (fl_autograd_link) */
static int l_link(lua_State *L) { return fl_ltensor_op2(L, "_link", "(tensor, link)", fl_autograd_link); }

/* fp8.core._restricted_walks() -> how many walks restricted to some inputs run now (restricted_walks) */
static int l_restricted_walks(lua_State *L) {
    lua_pushinteger(L, restricted_walks);
    return 1;
}

static const luaL_Reg funcs[] = {
    {"_restricted_walks", l_restricted_walks}, {"_backwards_started", l_backwards_started},
    {"_name_grad_fn", l_name_grad_fn}, {"_link", l_link},
    {"_autograd_grad", l_autograd_grad},
    {"_autograd_backward", l_autograd_backward},
    {"no_grad", l_no_grad}, {"enable_grad", l_enable_grad}, {"is_grad_enabled", l_is_grad_enabled},
    {"set_grad_enabled", l_set_grad_enabled}, {"autocast_dtype", l_autocast_dtype},
    {"set_autocast_dtype", l_set_autocast_dtype}, {"_pcall_scoped", l_pcall_scoped},
    {"_pcall_noyield", l_pcall_noyield},
    {NULL, NULL},
};

/* Called with the fp8.core table at -1 (after fl_lopen_tensor, which set core.Tensor and _metatable). */
void fl_lopen_autograd(lua_State *L) {
    int lib = lua_gettop(L);
    luaL_setfuncs(L, funcs, 0);
    /* they call fn holding no tensor: a free() inside fn releases at once (fl_lrelease_box) */
    fl_lcallback_safe(L, l_no_grad);
    fl_lcallback_safe(L, l_enable_grad);
    fl_lcallback_safe(L, l_pcall_scoped);
    fl_lcallback_safe(L, l_pcall_noyield);
    lua_pushstring(L, RAW_MARK);
    lua_setfield(L, lib, "_RAW_BACKWARD_ERROR");
    lua_getfield(L, lib, "Tensor");
    luaL_setfuncs(L, tensor_methods, 0);
    lua_pop(L, 1);
    luaL_newmetatable(L, GRAD_LISTS_MT);
    lua_pushcfunction(L, grad_lists_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, HOOK_HANDLE_MT);
    lua_pushstring(L, "RemovableHandle");
    lua_setfield(L, -2, "__name");
    lua_pushstring(L, "Tensor:backward");   /* help(h) and help(h.remove): the entry that documents these hooks */
    lua_setfield(L, -2, "__help");
    lua_pushcfunction(L, hook_handle_remove);
    lua_setfield(L, -2, "remove");
    lua_pushcfunction(L, hook_handle_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, hook_handle_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, hook_handle_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, hook_handle_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_getmetatable(L, FL_TENSOR_MT);
    lua_pushcfunction(L, m_call);
    lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, m_eq);
    lua_setfield(L, -2, "__eq");
    lua_pushcfunction(L, m_lt);
    lua_setfield(L, -2, "__lt");
    lua_pushcfunction(L, m_le);
    lua_setfield(L, -2, "__le");
    lua_pop(L, 1);
}
