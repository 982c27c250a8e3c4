/* l_fp8_layer.c — module fp8._fp8_layer: the C half of an FP8 layer — its per-role scaling state
 * (fp8.FP8Meta userdata over core/fp8_linear.h), the recipe's configuration of it (layer_config over
 * core/recipe.c), the FP8 linear op, FP8 weight gradients (set_grad_dtype), the amax all-reduce across
 * ranks and the scale rule for teaching. lua/fp8/nn/fp8_linear.lua and lua/fp8/accelerator.lua are
 * the user-facing API. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "l_util.h"
#include "fp8_linear.h"
#include "recipe.h"
#include "dist_amax.h"

#define META_MT "fp8.FP8Meta"

typedef struct { fl_fp8_layer *l; } meta_box;

static fl_fp8_layer *check_meta(lua_State *L, int arg) {
    meta_box *b = luaL_checkudata(L, arg, META_MT);
    if (!b->l) luaL_argerror(L, arg, "FP8 layer state was released");
    return b->l;
}

/* The field k of the role table at t must be there: layer_config spells every field out, and a role
 * has no defaults of its own (the recipe's are the settings table's). */
static void need(lua_State *L, int t, const char *k, const char *where) {
    if (lua_getfield(L, t, k) == LUA_TNIL)
        luaL_error(L, "%s: %s missing (fp8._fp8_layer.layer_config(recipe) gives every field)", where, k);
    lua_pop(L, 1);
}

/* One role from the table at index t: {format=, rule="delayed"|"current", pow2=, margin=, algo=,
 * amax_history_len=, interval=}, every field given. The numeric ranges are fl_scaling_init's. */
static void role_from(lua_State *L, int t, const char *name, fl_scaling *s) {
    char where[64];
    snprintf(where, sizeof where, "FP8 layer role %s", name);
    static const char *const rules[] = { "delayed", "current", NULL };
    static const char *const algos[] = { "max", "most_recent", NULL };
    static const char *const fmts[] = { "e4m3", "e5m2", NULL };
    static const char *const fields[] = { "format", "rule", "pow2", "margin", "algo", "amax_history_len", "interval",
                                          "warmup", NULL };
    int top = lua_gettop(L);
    lua_getfield(L, t, name);
    if (!lua_istable(L, -1)) luaL_error(L, "%s: expected a table, got %s", where, luaL_typename(L, -1));
    int r = lua_gettop(L);
    fl_lcheckopts(L, r, where, fields);
    for (size_t i = 0; fields[i]; i++) if (strcmp(fields[i], "warmup") != 0) need(L, r, fields[i], where);   /* warmup: 0 */
    const char *fmt = fl_lfieldchoice(L, r, where, "format", NULL, fmts);
    const char *rule = fl_lfieldchoice(L, r, where, "rule", NULL, rules);
    const char *algo = fl_lfieldchoice(L, r, where, "algo", NULL, algos);
    bool pow2 = fl_lfieldbool(L, r, where, "pow2", false);
    int margin = fl_lfieldint(L, r, where, "margin", 0);
    int amax_history_len = fl_lfieldint(L, r, where, "amax_history_len", 0);
    int interval = fl_lfieldint(L, r, where, "interval", 0);
    fl_lcheck(L, fl_scaling_init(s, strcmp(fmt, "e5m2") == 0 ? FL_E5M2 : FL_E4M3,
                                 strcmp(rule, "current") == 0 ? FL_SCALE_CURRENT : FL_SCALE_DELAYED, pow2, margin,
                                 strcmp(algo, "max") == 0 ? FL_AMAX_MAX : FL_AMAX_MOST_RECENT, amax_history_len, interval));
    int warmup = fl_lfieldint(L, r, where, "warmup", 0);
    if (warmup < 0 || warmup > FL_HISTORY_MAX) luaL_error(L, "%s: warmup must be in 0..%d, got %d", where, FL_HISTORY_MAX, warmup);
    if (warmup > 0 && s->rule != FL_SCALE_DELAYED) luaL_error(L, "%s: warmup is for the delayed rule, got rule current", where);
    s->warmup = warmup;
    lua_settop(L, top);
}

/* The three roles while layer_new builds them, in a userdata whose __gc frees what they hold: a Lua error in a later
 * role (a field missing or out of range) raised past the amax histories made for the earlier ones, which leaked
 * (4 bytes per history entry, up to 2^20 entries a role, at every failed call; docs/robustness.md, stop 94). */
typedef struct { fl_scaling r[FL_NROLES]; } roles_box;

static int roles_gc(lua_State *L) {
    roles_box *rb = luaL_checkudata(L, 1, "fp8.FP8Meta.roles");
    for (int i = 0; i < FL_NROLES; i++) fl_scaling_free(&rb->r[i]);
    memset(rb, 0, sizeof *rb);
    return 0;
}

/* layer_new{input={…}, weight={…}, grad={…}, hp={fprop, dgrad, wgrad}, granularity=, fast_accum=} */
static int l_layer_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *const keys[] = { "input", "weight", "grad", "hp", "granularity", "fast_accum", NULL };
    fl_lcheckopts(L, 1, "FP8 layer", keys);
    static const char *const grans[] = { "tensor", "rowwise", "rowwise_with_gw_hp", NULL };
    const char *gran = fl_lfieldchoice(L, 1, "FP8 layer", "granularity", "tensor", grans);
    bool fast = fl_lfieldbool(L, 1, "FP8 layer", "fast_accum", true);
    bool hp[3] = { false, false, false };
    lua_getfield(L, 1, "hp");
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) return luaL_error(L, "FP8 layer: hp must be a list of 3 booleans, got %s", luaL_typename(L, -1));
        for (int i = 0; i < 3; i++) {
            lua_rawgeti(L, -1, i + 1);
            if (!lua_isboolean(L, -1)) return luaL_error(L, "FP8 layer: hp[%d] must be a boolean, got %s", i + 1, luaL_typename(L, -1));
            hp[i] = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    roles_box *rb = lua_newuserdatauv(L, sizeof *rb, 0);   /* (its __gc frees the roles if an error comes first) */
    memset(rb, 0, sizeof *rb);
    if (luaL_newmetatable(L, "fp8.FP8Meta.roles")) {
        lua_pushcfunction(L, roles_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    fl_scaling *roles = rb->r;
    role_from(L, 1, fl_fp8_role_names[FL_ROLE_INPUT], &roles[FL_ROLE_INPUT]);
    role_from(L, 1, fl_fp8_role_names[FL_ROLE_WEIGHT], &roles[FL_ROLE_WEIGHT]);
    role_from(L, 1, fl_fp8_role_names[FL_ROLE_GRAD], &roles[FL_ROLE_GRAD]);
    meta_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->l = NULL;
    luaL_setmetatable(L, META_MT);
    fl_status st = fl_fp8_layer_new(&b->l, roles, hp, strcmp(gran, "rowwise") == 0 ? FL_GRAN_ROWWISE
                                                     : strcmp(gran, "tensor") == 0 ? FL_GRAN_TENSOR : FL_GRAN_ROWWISE_GW_HP);
    if (st != FL_OK) for (int i = 0; i < FL_NROLES; i++) fl_scaling_free(&roles[i]);   /* now, not at a collection */
    memset(rb, 0, sizeof *rb);   /* taken over by the layer, or freed */
    fl_lcheck(L, st);
    b->l->fast_accum = fast;
    return 1;
}

/* A role's configuration into the table at -1: the fields role_from reads back (but the history length). */
static void set_role_fields(lua_State *L, fl_dtype fmt, fl_scale_rule rule, bool pow2, int margin, fl_amax_algo algo,
                            int interval) {
    lua_pushstring(L, fl_format(fmt)->name); lua_setfield(L, -2, "format");
    lua_pushstring(L, rule == FL_SCALE_CURRENT ? "current" : "delayed"); lua_setfield(L, -2, "rule");
    lua_pushboolean(L, pow2); lua_setfield(L, -2, "pow2");
    lua_pushinteger(L, margin); lua_setfield(L, -2, "margin");
    lua_pushstring(L, algo == FL_AMAX_MAX ? "max" : "most_recent"); lua_setfield(L, -2, "algo");
    lua_pushinteger(L, interval); lua_setfield(L, -2, "interval");
}

/* layer_config(recipe) -> the table layer_new takes: {input=role, weight=role, grad=role, hp={3},
 * granularity=}, each role fully spelled out — core/recipe.c's fl_recipe_layer_config on the resolved
 * recipe settings (fp8.kwargs.resolve's fp8_recipe). Each field is checked by the settings table, as a
 * kwarg is; a field left out takes the table's default. */
static int l_layer_config(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    fl_settings s;
    fl_settings_init(&s);
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *row = fl_setting_info((fl_setting_id)k);
        if (!row || (row->backends == 0 && k != FL_SET_BACKEND) || row->type == FL_SETTING_FUNC) continue;
        if (lua_getfield(L, 1, row->name) != LUA_TNIL) {
            const char *origin = lua_pushfstring(L, "fp8 recipe: %s", row->name);
            fl_settings_put(&s, (fl_setting_id)k, fl_lchecksetting(L, -2, k, origin, 0));
            lua_pop(L, 1);
        } else if (k == FL_SET_BACKEND) {
            return luaL_error(L, "fp8 recipe: backend missing (one of te, ao, msamp)");
        }
        lua_pop(L, 1);
    }
    fl_recipe r;
    fl_recipe_from_settings(&r, &s);
    fl_layer_config c;
    fl_lcheck(L, fl_recipe_layer_config(&r, &c));
    static const char *const grans[] = { "tensor", "rowwise", "rowwise_with_gw_hp" };   /* fl_fp8_granularity */
    lua_createtable(L, 0, 5);
    for (int i = 0; i < FL_NROLES; i++) {
        const fl_role_config *rc = &c.role[i];
        lua_createtable(L, 0, 7);
        set_role_fields(L, rc->fmt, rc->rule, rc->pow2, rc->margin, rc->algo, rc->interval);
        lua_pushinteger(L, rc->amax_history_len); lua_setfield(L, -2, "amax_history_len");
        lua_pushinteger(L, rc->warmup); lua_setfield(L, -2, "warmup");
        lua_setfield(L, -2, fl_fp8_role_names[i]);
    }
    lua_createtable(L, 3, 0);
    for (int i = 0; i < 3; i++) { lua_pushboolean(L, c.hp[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "hp");
    lua_pushstring(L, grans[c.gran]); lua_setfield(L, -2, "granularity");
    return 1;
}

static int l_meta_gc(lua_State *L) {
    meta_box *b = luaL_checkudata(L, 1, META_MT);
    fl_fp8_layer_release(b->l);
    b->l = NULL;
    return 0;
}

static int l_meta_update(lua_State *L) { fl_lcheck(L, fl_fp8_layer_update(check_meta(L, 1))); return 0; }
static int l_meta_drop_cache(lua_State *L) { fl_fp8_layer_drop_cache(check_meta(L, 1)); return 0; }

static void push_role(lua_State *L, const fl_scaling *s) {
    lua_createtable(L, 0, 16);
    set_role_fields(L, s->fmt, s->rule, s->pow2, s->margin, s->algo, s->interval);
    lua_pushnumber(L, s->scale); lua_setfield(L, -2, "scale");
    lua_pushnumber(L, s->scale_inv); lua_setfield(L, -2, "scale_inv");
    lua_pushnumber(L, fl_scaling_amax(s)); lua_setfield(L, -2, "amax_history_value");
    float hmax = 0.0f;
    for (int i = 0; i < s->amax_history_len; i++) if (s->history[i] > hmax || isnan(s->history[i])) hmax = s->history[i];
    lua_pushnumber(L, hmax); lua_setfield(L, -2, "amax_history_max");
    lua_pushnumber(L, s->last_amax); lua_setfield(L, -2, "amax");
    lua_pushinteger(L, s->last_n); lua_setfield(L, -2, "numel");
    lua_pushinteger(L, s->last_underflow); lua_setfield(L, -2, "underflow");
    lua_pushinteger(L, s->last_saturated); lua_setfield(L, -2, "saturated");
    lua_pushinteger(L, s->last_nan); lua_setfield(L, -2, "nan");
    lua_pushinteger(L, s->updates); lua_setfield(L, -2, "updates");
    lua_pushinteger(L, s->warmup); lua_setfield(L, -2, "warmup");
    lua_pushinteger(L, s->warm); lua_setfield(L, -2, "warm");
    lua_pushboolean(L, fl_scaling_in_time(s)); lua_setfield(L, -2, "in_time");
    lua_createtable(L, s->amax_history_len, 0);
    for (int i = 0; i < s->amax_history_len; i++) { lua_pushnumber(L, s->history[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "history");
}

/* meta:state() -> {input=role, weight=role, grad=role, hp={…}, granularity=, forwards=, …} */
static int l_meta_state(lua_State *L) {
    fl_fp8_layer *l = check_meta(L, 1);
    const char *const *keys = fl_fp8_role_names;
    static const char *const grans[] = { "tensor", "rowwise", "rowwise_with_gw_hp" };
    for (int i = 0; i < FL_NROLES; i++) fl_lcheck(L, fl_scaling_flush(&l->role[i]));   /* casts still pending */
    lua_createtable(L, 0, 14);
    for (int i = 0; i < FL_NROLES; i++) { push_role(L, &l->role[i]); lua_setfield(L, -2, keys[i]); }
    lua_createtable(L, 3, 0);
    for (int i = 0; i < 3; i++) { lua_pushboolean(L, l->hp[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "hp");
    lua_pushstring(L, grans[l->gran]); lua_setfield(L, -2, "granularity");
    lua_pushboolean(L, l->fast_accum); lua_setfield(L, -2, "fast_accum");
    lua_pushinteger(L, l->forwards); lua_setfield(L, -2, "forwards");
    lua_pushinteger(L, l->backwards); lua_setfield(L, -2, "backwards");
    lua_pushinteger(L, l->weight_casts); lua_setfield(L, -2, "weight_casts");
    lua_pushinteger(L, l->cache_hits); lua_setfield(L, -2, "cache_hits");
    lua_pushinteger(L, l->fused_input_casts); lua_setfield(L, -2, "fused_input_casts");
    lua_pushinteger(L, l->dy_handovers); lua_setfield(L, -2, "dy_handovers");
    lua_pushinteger(L, l->residual_adds); lua_setfield(L, -2, "residual_adds");
    return 1;
}

/* A count field (updates, warm) of the role table at the top: absent -> *present false; else an integer >= 0 (a
 * whole float too, as fp8_state.unpack reads them), or an error naming it (a NaN, 1.5 or -5 was taken as it was, or
 * left the layer's own count without a word). */
static lua_Integer role_count(lua_State *L, const char *role, const char *k, bool *present) {
    lua_getfield(L, -1, k);
    *present = !lua_isnil(L, -1);
    int isint = 0;
    lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (*present && (!isint || v < 0))
        luaL_error(L, "load_state: %s.%s must be an integer >= 0, got %s", role, k,
                   lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    lua_pop(L, 1);
    return v;
}

/* meta:load_state(t): scales, histories and update counts from a table made by state() (checkpoints). Every role is
 * checked before any is written, so a refused table leaves the layer as it was: the scale as fp32 holds it finite and
 * > 0 with a finite reciprocal (1e-50 became 0 and 1e39 inf, and every later cast of the role NaN), no negative amax in
 * the history (NaN and inf are recorded states), the counts integers >= 0, and a format, where the table names one,
 * the role's own (a HYBRID grad scale is for E5M2's range). */
static int l_meta_load_state(lua_State *L) {
    fl_fp8_layer *l = check_meta(L, 1);
    fl_lmaxargs(L, 2, "load_state", "(state table from meta:state())");
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *const *keys = fl_fp8_role_names;
    float scale[FL_NROLES];
    lua_Integer upd[FL_NROLES], warm[FL_NROLES];
    bool has_upd[FL_NROLES], has_warm[FL_NROLES];
    /* the checked histories, kept here: the second pass reads nothing from the table again (a proxy table's __index
     * could answer otherwise the second time: a history that was no table then crashed lua_rawgeti) */
    size_t total = 0, off[FL_NROLES];
    for (int i = 0; i < FL_NROLES; i++) { off[i] = total; total += (size_t)l->role[i].amax_history_len; }
    float *hist = lua_newuserdatauv(L, (total ? total : 1) * sizeof(float), 0);
    for (int i = 0; i < FL_NROLES; i++) {
        const fl_scaling *s = &l->role[i];
        lua_getfield(L, 2, keys[i]);
        if (!lua_istable(L, -1)) return luaL_error(L, "load_state: missing role '%s'", keys[i]);
        lua_getfield(L, -1, "scale");
        if (lua_type(L, -1) != LUA_TNUMBER)
            return luaL_error(L, "load_state: %s.scale must be a number, got %s", keys[i], luaL_typename(L, -1));
        double sc = lua_tonumber(L, -1);
        lua_pop(L, 1);
        scale[i] = (float)sc;
        if (!(sc > 0) || !isfinite(sc) || !(scale[i] > 0) || !isfinite(scale[i]) || !isfinite(1.0f / scale[i]))
            return luaL_error(L, "load_state: %s.scale must be finite and > 0 in fp32, with a finite reciprocal "
                                 "(from about 2.9e-39 to 3.4e38), got %s", keys[i], (lua_pushnumber(L, sc), lua_tostring(L, -1)));
        lua_getfield(L, -1, "format");
        if (!lua_isnil(L, -1)) {
            const char *f = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            if (!f || strcmp(f, fl_format(s->fmt)->name) != 0)
                return luaL_error(L, "load_state: %s.format is %s, but this layer casts the %s role to %s (its scale "
                                     "is for another format's range)", keys[i], f ? f : luaL_typename(L, -1), keys[i],
                                  fl_format(s->fmt)->name);
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "history");
        if (!lua_istable(L, -1) || (int)lua_rawlen(L, -1) != s->amax_history_len)
            return luaL_error(L, "load_state: %s.history must be a list of %d numbers (the layer's amax_history_len)",
                              keys[i], s->amax_history_len);
        for (int k = 0; k < s->amax_history_len; k++) {
            lua_rawgeti(L, -1, k + 1);
            if (lua_type(L, -1) != LUA_TNUMBER) return luaL_error(L, "load_state: %s.history[%d] is not a number", keys[i], k + 1);
            if (lua_tonumber(L, -1) < 0)
                return luaL_error(L, "load_state: %s.history[%d] is %s (an amax is >= 0)", keys[i], k + 1,
                                  lua_tostring(L, -1));
            hist[off[i] + (size_t)k] = (float)lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        upd[i] = role_count(L, keys[i], "updates", &has_upd[i]);
        warm[i] = role_count(L, keys[i], "warm", &has_warm[i]);
        lua_pop(L, 1);
    }
    for (int i = 0; i < FL_NROLES; i++) fl_lcheck(L, fl_scaling_flush(&l->role[i]));   /* then overwritten */
    for (int i = 0; i < FL_NROLES; i++) {
        fl_scaling *s = &l->role[i];
        for (int k = 0; k < s->amax_history_len; k++) s->history[k] = hist[off[i] + (size_t)k];
        if (has_upd[i]) s->updates = upd[i];
        /* the warm-up count (state layout 2); absent (layout 1, made before warm-up existed): over */
        s->warm = has_warm[i] ? warm[i] : s->warmup;
        s->scale = scale[i];
        s->scale_inv = 1.0f / s->scale;
        /* current scaling: the saved history[0] is the last step's max (a checkpoint is made after a step), which the
         * next cast replaces, as it does after the update in a run not interrupted (it kept it as the new max) */
        s->step_ended = s->rule != FL_SCALE_DELAYED;
    }
    l->syncs++;
    fl_fp8_layer_drop_cache(l);
    return 0;
}

/* meta:_syncs() -> the layer's update calls and state loads (core/fp8_linear.h), cheap: fp8_linear.lua reads it at
 * every recording forward */
static int l_meta_syncs(lua_State *L) {
    fl_fp8_layer *l = check_meta(L, 1);
    fl_lmaxargs(L, 1, "_syncs", "no arguments");
    lua_pushinteger(L, l->syncs);
    return 1;
}

/* FL_LCALL for a layer's forward: the call counts itself in the layer's counters (fp8.stats' forwards, weight casts,
 * cache hits, fused casts, residual adds) before its casts and GEMM allocate, so after an out of memory there the
 * retry counted the forward twice; they are put back before it. The amaxes the retry records again are the same (a
 * role's history[0] keeps the larger: the same value) and its weight cast is the cached one. */
#define LAYER_LCALL(L, l, expr)                                                                                      \
    do {                                                                                                             \
        const int64_t c_[5] = { (l)->forwards, (l)->weight_casts, (l)->cache_hits, (l)->fused_input_casts,          \
                                (l)->residual_adds };                                                                \
        fl_status s_ = (expr);                                                                                       \
        if (s_ == FL_ENOMEM || fl_error_out_of_fds(s_)) {                                                            \
            (l)->forwards = c_[0], (l)->weight_casts = c_[1], (l)->cache_hits = c_[2];                               \
            (l)->fused_input_casts = c_[3], (l)->residual_adds = c_[4];                                              \
            lua_gc((L), LUA_GCCOLLECT);                                                                              \
            s_ = (expr);                                                                                             \
        }                                                                                                            \
        fl_lcheck((L), s_);                                                                                          \
    } while (0)

/* linear(x, w, b|nil, meta, record, w_fp8|nil, residual|nil) -> y (residual + the layer, the add in the GEMM's
 * store where it can: fl_fp8_linear); linear_gelu(...) the same layer of GELU(x) (tanh form), its input cast in
 * GELU's pass where the layer allows it (fl_fp8_linear_gelu) */
static int linear_call(lua_State *L, bool gelu) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2);
    fl_tensor *b = lua_isnoneornil(L, 3) ? NULL : fl_lchecktensor(L, 3);
    fl_fp8_layer *l = check_meta(L, 4);
    bool record = lua_toboolean(L, 5);
    fl_tensor *wq = lua_isnoneornil(L, 6) ? NULL : fl_lchecktensor(L, 6);
    fl_tensor *res = lua_isnoneornil(L, 7) ? NULL : fl_lchecktensor(L, 7);
    fl_tensor **box = fl_lnewbox(L);
    LAYER_LCALL(L, l, (gelu ? fl_fp8_linear_gelu : fl_fp8_linear)(box, x, w, b, l, record, wq, res));
    return 1;
}
static int l_linear(lua_State *L) { return linear_call(L, false); }
static int l_linear_gelu(lua_State *L) { return linear_call(L, true); }

/* linear_layernorm(x, ln_w|nil, ln_b|nil, eps, w, b|nil, meta, record, w_fp8|nil) -> y: the layer of
 * LayerNorm(x), its input cast in LayerNorm's pass where the layer allows it (fl_fp8_linear_layernorm) */
static int l_linear_layernorm(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    fl_tensor *lw = lua_isnoneornil(L, 2) ? NULL : fl_lchecktensor(L, 2);
    fl_tensor *lb = lua_isnoneornil(L, 3) ? NULL : fl_lchecktensor(L, 3);
    double eps = luaL_checknumber(L, 4);
    fl_tensor *w = fl_lchecktensor(L, 5);
    fl_tensor *b = lua_isnoneornil(L, 6) ? NULL : fl_lchecktensor(L, 6);
    fl_fp8_layer *l = check_meta(L, 7);
    bool record = lua_toboolean(L, 8);
    fl_tensor *wq = lua_isnoneornil(L, 9) ? NULL : fl_lchecktensor(L, 9);
    fl_tensor **box = fl_lnewbox(L);
    LAYER_LCALL(L, l, fl_fp8_linear_layernorm(box, x, lw, lb, eps, w, b, l, record, wq));
    return 1;
}

/* set_grad_dtype(t, "fp32"|"e4m3"|"e5m2") */
static int l_set_grad_dtype(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_dtype d = fl_lcheckdtype(L, 2);
    if (d != FL_F32 && !fl_format(d)->is_fp8) return luaL_error(L, "set_grad_dtype: expected fp32, e4m3 or e5m2, got %s", fl_format(d)->name);
    t->grad_dtype = d;
    return 0;
}

/* scale_for(amax, fmt, margin, pow2) -> scale (the recipes' rule, for teaching and tests) */
static int l_scale_for(lua_State *L) {
    double amax = luaL_checknumber(L, 1);
    fl_dtype f = fl_lcheckdtype(L, 2);
    lua_Integer margin = luaL_optinteger(L, 3, 0);
    luaL_argcheck(L, margin >= 0 && margin <= 64, 3, "margin must be in 0..64");
    lua_pushnumber(L, fl_scale_for((float)amax, f, (int)margin, lua_toboolean(L, 4), 1.0f));
    return 1;
}

static const luaL_Reg meta_methods[] = {
    {"update", l_meta_update},
    {"drop_cache", l_meta_drop_cache},
    {"state", l_meta_state},
    {"load_state", l_meta_load_state},
    {"_syncs", l_meta_syncs},
    {NULL, NULL},
};

/* reduce_amax(list of FP8Meta) -> number of amaxes MAX-reduced across ranks (core/dist_amax.h) */
static int l_reduce_amax(lua_State *L) {
    lua_Integer len = fl_lcheckrawlist(L, 1, "reduce_amax");
    if (len > 1 << 24) return luaL_error(L, "reduce_amax: expected at most %d entries, got %I", 1 << 24, len);
    int n = (int)len;
    fl_fp8_layer **ls = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ls, 0);
    for (int i = 0; i < n; i++) ls[i] = fl_lrawlistobj(L, 1, i + 1, "reduce_amax", META_MT, "an FP8Meta");
    int m = 0;
    fl_lcheck(L, fl_fp8_layers_reduce_amax(ls, n, &m));
    lua_pushinteger(L, m);
    return 1;
}

static const luaL_Reg layer_funcs[] = {
    {"reduce_amax", l_reduce_amax},
    {"layer_new", l_layer_new},
    {"layer_config", l_layer_config},
    {"linear", l_linear}, {"linear_gelu", l_linear_gelu}, {"linear_layernorm", l_linear_layernorm},
    {"set_grad_dtype", l_set_grad_dtype},
    {"scale_for", l_scale_for},
    {NULL, NULL},
};

int luaopen_fp8_layer_c(lua_State *L) {
    if (luaL_newmetatable(L, META_MT)) {
        luaL_newlib(L, meta_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_meta_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushstring(L, "FP8Meta");
        lua_setfield(L, -2, "__name");
    }
    lua_pop(L, 1);
    luaL_newlib(L, layer_funcs);
    return 1;
}
