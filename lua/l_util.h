/* l_util.h — helpers shared by the Lua binding files (lua/l_*.c): turning a core status into a
 * Lua error, the ENOMEM retry, the fp8.Tensor userdata box, and argument parsing for dtypes. */
#ifndef FL_L_UTIL_H
#define FL_L_UTIL_H

#include <lua.h>
#include <lauxlib.h>
#include "error.h"
#include "format.h"
#include "tensor.h"

#define FL_TENSOR_MT "fp8.Tensor"

/* Raise a Lua error for a failed core call (no-op on FL_OK). The core message is passed as an
 * argument, never as the format, since it may contain '%'. */
int fl_lcheck(lua_State *L, fl_status s);

/* Run a core call; on FL_ENOMEM collect all Lua garbage (which may free tensors) and retry once
 * (Torch7's THCudaMalloc pattern), and the same when a file could not be opened for want of descriptors
 * (fl_error_out_of_fds: safe_open handles and Lua files left to the collector hold theirs until a cycle runs,
 * which descriptors never start; the core marks only an open made before anything was written or moved, FL_ERR_SYS).
 * `expr` is evaluated at most twice, so it must be repeatable: write results only into a box slot that starts NULL. */
#define FL_LCALL(L, expr)                                                   \
    do {                                                                    \
        fl_status fl__ls = (expr);                                          \
        if (fl__ls == FL_ENOMEM || fl_error_out_of_fds(fl__ls)) { lua_gc((L), LUA_GCCOLLECT); fl__ls = (expr); } \
        fl_lcheck((L), fl__ls);                                             \
    } while (0)

/* Push a new, empty fp8.Tensor box and return its slot. Fill the slot with a core call after
 * the box exists, so an error never leaks the tensor: the box owns exactly one reference. */
fl_tensor **fl_lnewbox(lua_State *L);

/* Pushes the registry table at key (made on first use; mode "k" or "v" for a weak one, NULL for none). */
void fl_lpush_reg_table(lua_State *L, const void *key, const char *mode);
/* After a system call of the binding itself failed with errno e: true (after a full collection) when e says the
 * process or the system is out of descriptors, so the call is worth making once more (FL_LCALL's rule). */
bool fl_lfds_collect(lua_State *L, int e);
/* Lua cannot see tensor storage: a full collection once the live storage bytes grew by a quarter (and 32 MiB)
 * since the last (l_util.c). fl_lnewbox polls; fl_lgc_init (fl_lopen_tensor) sets the first threshold. */
void fl_lgc_poll(lua_State *L);
/* t:free() and __close: the reference goes now, or, while a C function that may hold the tensor's pointer runs
 * below on the stack (a binding whose argument's metamethod, or a finalizer its allocation started, called free),
 * once that is over (l_util.c). fl_lcallback_safe(L, f) names a C function that holds no tensor pointer while it
 * calls Lua (Lua's libraries, the host, no_grad); fl_lcallback_safe_std(L) names Lua's libraries'. */
void fl_lrelease_box(lua_State *L, int idx);
/* The same for other handles with an explicit close: whether the release must wait; if so, the caller moves the
 * resource into a holder of the same metatable (its __gc releases it), pushes it and calls fl_lrelease_later(L,
 * idx of the closed handle), which pops it; otherwise it releases and calls fl_lrelease_deferred(L). */
bool fl_lrelease_must_wait(lua_State *L);
void fl_lrelease_later(lua_State *L, int idx);
void fl_lrelease_deferred(lua_State *L);
void fl_lcallback_safe(lua_State *L, lua_CFunction f);
void fl_lcallback_safe_std(lua_State *L);
void fl_lgc_init(lua_State *L);
/* The tensor at `arg`; raises an argument error for non-tensors and for released tensors. */
fl_tensor *fl_lchecktensor(lua_State *L, int arg);
/* The length of the plain list at `arg`: a table whose metatable, if any, has neither __index nor __len (else an
 * error naming fname), measured raw. Functions that keep pointers to a list's elements read it with lua_rawgeti:
 * the table then holds every element, where a metamethod could hand out values only the C side refers to, which
 * the collector would free under it. */
lua_Integer fl_lcheckrawlist(lua_State *L, int arg, const char *fname);
/* The list of live tensors at `arg` (a plain list as above, of at most 2^20), in an array owned by
 * a userdata this pushes
 * (collected with it, so an element's error leaks nothing); *n gets its length. Errors name fname and the
 * element: "fname: element 3 of the list: expected a tensor, got string". */
fl_tensor **fl_lchecktensorlist(lua_State *L, int arg, const char *fname, int *n);
/* Element i (1-based) of the plain list at `arg` (absolute index): a box of metatable mt whose first member is
 * its object's pointer; returns that pointer, which the list keeps alive. Errors name fname, the element and
 * `what` (with its article): "fname: element 3 of the list: expected an FP8Meta, got table", "... has been
 * released". */
void *fl_lrawlistobj(lua_State *L, int arg, lua_Integer i, const char *fname, const char *mt, const char *what);
/* The binding of a core op of two tensors, fn(a, b) boxed: two tensors (fl_lchecktensor), nothing after them
 * (fl_lmaxargs's message with fname and takes); returns 1, the result pushed. */
int fl_ltensor_op2(lua_State *L, const char *fname, const char *takes,
                   fl_status (*fn)(fl_tensor **, const fl_tensor *, const fl_tensor *));
/* A function called with more than n arguments would drop the rest silently (x:t(3), fp8.zeros({2}, "bf16", 5)):
 * an error "fname: takes <takes>; got k more argument(s)". */
void fl_lmaxargs(lua_State *L, int n, const char *fname, const char *takes);
/* A tensor method of no arguments (t:dim(), t:detach()): the tensor at 1 (a released one is named first, as
 * fl_lchecktensor does), nothing after it ("fname: takes no arguments; got 1 more argument"). */
fl_tensor *fl_lchecknoargs(lua_State *L, const char *fname);
/* Option tables. fl_lcheckopts passes none/nil, and refuses a non-table or any key not in `valid`
 * (NULL-terminated): "fname: unknown option 'x' (valid: a, b)", with " (did you mean 'b'?)" after the key when a
 * valid name is near it (fl_suggest). The getters read opts[key] from the table at
 * idx (none/nil: no table) and return def when it is absent; a value of the wrong kind is an error naming fname
 * and key ("fname: key must be a boolean, got string"). fl_lfieldchoice returns the matching entry of choices
 * (a static string, never the Lua one). */
/* The value at idx for a message (pushed): luaL_tolstring's text, without running a table's own __tostring. */
const char *fl_lshow(lua_State *L, int idx);
void fl_lcheckopts(lua_State *L, int idx, const char *fname, const char *const *valid);
double fl_lfieldnumber(lua_State *L, int idx, const char *fname, const char *key, double def);
/* The same without a default: whether opts[key] is there (then *out holds it; otherwise *out is untouched). */
bool fl_lfieldnumber_opt(lua_State *L, int idx, const char *fname, const char *key, double *out);
bool fl_lfieldbool(lua_State *L, int idx, const char *fname, const char *key, bool def);
int fl_lfieldint(lua_State *L, int idx, const char *fname, const char *key, int def);
const char *fl_lfieldchoice(lua_State *L, int idx, const char *fname, const char *key, const char *def,
                          const char *const *choices);
/* The tensor at idx, or NULL when the value is not a (live) tensor. */
fl_tensor *fl_ltotensor(lua_State *L, int idx);
/* Push a new box owning one new reference to t (retains it). */
void fl_lpushretained(lua_State *L, fl_tensor *t);

/* A dtype name at `arg` (any name fl_dtype_from_name knows); error lists the valid ones. */
fl_dtype fl_lcheckdtype(lua_State *L, int arg);
/* Raises "<fname>: more than one element of the tensor refers to one memory location ..." for t with a stride of 0
 * on a dim of more than one element (an expand): a write to it would write one memory location several times, as
 * torch refuses it. */
void fl_lcheck_distinct(lua_State *L, const fl_tensor *t, const char *fname);
/* Same, for a name already read; `what` names the argument in the message. */
fl_dtype fl_ldtype_from(lua_State *L, const char *name, const char *what);
/* An FP8 format ("e4m3" | "e5m2", aliases accepted). */
fl_dtype fl_lcheckfp8(lua_State *L, int arg);
/* A device name ("cpu" | "cuda") at `arg`; the error names fname and the valid devices. */
int fl_lcheckdevice(lua_State *L, int arg, const char *fname);
/* Whether name is a device name; sets *dev. */
int fl_device_from_name(const char *name, int *dev);
/* Shape string "[2, 3]" pushed on the stack and returned. */
const char *fl_lpushshape(lua_State *L, int ndim, const int64_t *shape);

/* ---- argument checking (every binding uses these; messages name the function and the argument) --
 * fname is the Lua-visible name ("fp8.zeros", "gather"); what names the argument ("indices", "dim 2"). */

/* An integer in [min, max] at arg (floats with an exact integer value count; NaN, inf, 1.5 do not):
 * "fname: what must be an integer in [min, max], got V". */
lua_Integer fl_lcheckint(lua_State *L, int arg, const char *fname, const char *what, lua_Integer min, lua_Integer max);
/* Same for an optional argument: def when nil or absent. */
lua_Integer fl_loptint(lua_State *L, int arg, const char *fname, const char *what, lua_Integer min, lua_Integer max,
                       lua_Integer def);
/* A finite number at arg (NaN and ±inf refused), optionally within [min, max]. */
lua_Number fl_lcheckfinite(lua_State *L, int arg, const char *fname, const char *what, lua_Number min, lua_Number max);
/* The length of the table at arg, via luaL_len (so __len is honoured) but range-checked: a length that is
 * negative or above max (a __len that lies) raises "fname: what has length N (expected 0..max)". */
lua_Integer fl_lchecklen(lua_State *L, int arg, const char *fname, const char *what, lua_Integer max);
/* A file name at arg: a string without a NUL byte (the C string would end there, and the call would act on
 * another file: save_file(t, "a.safetensors\0.bak") wrote a.safetensors): "fname: path must not contain a NUL byte". */
const char *fl_lcheckpath(lua_State *L, int arg, const char *fname);
/* The element count of a shape, overflow-safe: raises "fname: too large: N elements (limit L)" above
 * FL_MAX_NUMEL or limit (whichever is smaller; 0 = FL_MAX_NUMEL). */
int64_t fl_lchecknumel(lua_State *L, const char *fname, int ndim, const int64_t *shape, int64_t limit);
/* Raise a Lua error for a failed core call, the message prefixed with "fname: " unless it already names it. */
int fl_lcheckf(lua_State *L, fl_status s, const char *fname);
/* The most elements a buffer staged from a Lua table may have (tensor from nested tables, index lists):
 * a Lua table cannot hold more than 2^31 entries anyway, so a longer claimed length is a lie. */
#define FL_LMAX_TABLE_LEN ((lua_Integer)1 << 31)

/* Autograd fields of tensors (l_autograd.c): push t.<key> and return 1, or return 0 when the key is
 * not one; assign t.<key> = value at stack index val and return 1, or 0 when not one. */
int fl_lautograd_field(lua_State *L, fl_tensor *t, const char *key);
int fl_lautograd_setfield(lua_State *L, fl_tensor *t, const char *key, int val);
/* Settings (l_settings.c over core/settings.h). The Lua value at idx as setting k (an fl_setting_id)
 * stores it, checked by the settings table; raises "origin: expected …, got …" (origin NULL: the
 * setting's name). strings_as_text: a string is read as a flag's text ("false", "3") whatever the type. */
int fl_lchecksetting(lua_State *L, int idx, int k, const char *origin, int strings_as_text);
/* Push stored value v of setting k as Lua sees it ("te", 3, true, {false, false, true}). */
void fl_lpushsetting(lua_State *L, int k, int v);
/* Push fp8.settings.parse as a closure whose messages name it fname (fp8.config.check). */
void fl_lpush_settings_parse(lua_State *L, const char *fname);

void fl_lopen_autograd(lua_State *L);   /* into the fp8.core table at -1, after fl_lopen_tensor */
void fl_lopen_nn(lua_State *L);         /* sets core._nn and package.loaded["fp8._nn"] */

/* Registration of the tensor class and its factories (l_tensor.c) into the table at -1. */
void fl_lopen_tensor(lua_State *L);

#endif
