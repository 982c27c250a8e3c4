/* l_util.c — the shared binding helpers declared in l_util.h (status → Lua error, tensor boxes,
 * dtype argument parsing). */
#include "l_util.h"
#include "device.h"
#include <string.h>

int fl_lcheck(lua_State *L, fl_status s) {
    if (s == FL_OK) return 0;
    if (s == FL_EINTR) return luaL_error(L, "interrupted");
    const char *msg = fl_last_error_detail();
    if (!msg || !*msg) msg = "core operation failed (no detail recorded)";
    return luaL_error(L, "%s", msg);
}

fl_tensor **fl_lnewbox(lua_State *L) {
    fl_tensor **slot = (fl_tensor **)lua_newuserdatauv(L, sizeof(fl_tensor *), 0);
    *slot = NULL;
    luaL_setmetatable(L, FL_TENSOR_MT);
    return slot;
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
    }
    if (!*slot) luaL_argerror(L, arg, "tensor has been released (freed or closed)");
    return *slot;
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
