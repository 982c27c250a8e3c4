/* autograd.c — the reverse-mode engine declared in autograd.h: grad/autocast modes, nodes, the
 * topological backward walk with gradient accumulation, and graph release. */
#include "autograd.h"
#include "device.h"
#include "fp8_grad.h"
#include "ops_raw.h"
#include "cpu/par.h"
#include "profiler.h"
#include <math.h>
#include "ops.h"
#include <stdlib.h>
#include <string.h>

/* ---- modes -------------------------------------------------------------------------------- */

static _Thread_local bool grad_off;            /* zero-initialised: grad mode on by default */
static _Thread_local fl_dtype autocast_dt = FL_F32;

bool fl_grad_enabled(void) { return !grad_off; }
bool fl_set_grad_enabled(bool on) { bool prev = !grad_off; grad_off = !on; return prev; }
fl_dtype fl_autocast_dtype(void) { return autocast_dt; }
fl_dtype fl_set_autocast_dtype(fl_dtype dt) { fl_dtype prev = autocast_dt; autocast_dt = dt; return prev; }

static bool autocast_float(fl_dtype d) { return d == FL_F32 || d == FL_BF16 || d == FL_F16; }

bool fl_autocast_gemm(fl_dtype a, fl_dtype b, fl_dtype *cdt, fl_dtype *odt) {
    fl_dtype ac = autocast_dt;
    if ((ac != FL_BF16 && ac != FL_F16) || !autocast_float(a) || !autocast_float(b)) return false;
    *cdt = ac;
    *odt = a == ac && b == ac ? ac : FL_F32;
    return true;
}

bool fl_any_requires_grad(int n, const fl_tensor *const *ts) {
    if (grad_off) return false;
    for (int i = 0; i < n; i++) if (ts[i] && ts[i]->requires_grad) return true;
    return false;
}

/* ---- nodes -------------------------------------------------------------------------------- */

fl_status fl_node_new(fl_node **out, const char *name, fl_backward_fn fn, int ninputs, const fl_tensor *const *inputs) {
    *out = NULL;
    if (ninputs < 0 || ninputs > FL_NODE_MAX_INPUTS)
        return FL_ERR(FL_EINVAL, "autograd: a node takes at most %d inputs, got %d", FL_NODE_MAX_INPUTS, ninputs);
    fl_node *n = calloc(1, sizeof *n);
    if (!n) return FL_ERR(FL_ENOMEM, "autograd: out of memory allocating a node");
    n->refcount = 1;
    n->name = name;
    n->backward = fn;
    n->ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) {
        n->inputs[i] = fl_tensor_retain((fl_tensor *)inputs[i]);
        n->input_version[i] = inputs[i] && inputs[i]->storage ? inputs[i]->storage->version : 0;
        if (inputs[i] && inputs[i]->requires_grad) n->inputs_grad |= 1u << i;
    }
    *out = n;
    return FL_OK;
}

void fl_node_save(fl_node *n, int slot, const fl_tensor *t) {
    if (slot < 0 || slot >= FL_NODE_MAX_SAVED) return;
    fl_tensor *old = n->saved[slot];
    n->saved[slot] = fl_tensor_retain((fl_tensor *)t);
    n->saved_version[slot] = t && t->storage ? t->storage->version : 0;
    fl_tensor_release(old);
}

/* Whether nd's backward reads saved[j]'s values: always, or for an input in saved_for[j] that takes a gradient. */
static bool saved_read(const fl_node *nd, int j) {
    if (!nd->saved_for[j]) return true;
    for (int i = 0; i < nd->ninputs; i++)
        if ((nd->saved_for[j] >> i & 1u) && fl_node_input_needs_grad(nd, i)) return true;
    return false;
}

/* FL_OK, or the error naming the first input or saved tensor of nd written in place since the forward took it. */
static fl_status check_versions(const fl_node *nd) {
    for (int i = 0; i < nd->ninputs + FL_NODE_MAX_SAVED; i++) {
        bool in = i < nd->ninputs;
        const fl_tensor *t = in ? nd->inputs[i] : nd->saved[i - nd->ninputs];
        uint64_t seen = in ? nd->input_version[i] : nd->saved_version[i - nd->ninputs];
        if (!t || !t->storage || t->storage->version == seen) continue;
        if (in && !(nd->inputs_read >> i & 1u)) continue;   /* a shape the backward needs, not the values */
        if (!in && !saved_read(nd, i - nd->ninputs)) continue;
        char s[64];
        return FL_ERR(FL_EINVAL, "backward: a tensor %s needs (%s %d, shape %s) was written in place after the forward "
                      "(its storage is at version %llu, the forward saw %llu): write to a copy (clone()) or before "
                      "the forward", nd->name, in ? "input" : "saved tensor", in ? i + 1 : i - nd->ninputs + 1,
                      fl_shape_str(s, sizeof s, t->ndim, t->shape), (unsigned long long)t->storage->version,
                      (unsigned long long)seen);
    }
    return FL_OK;
}

bool fl_node_input_needs_grad(const fl_node *n, int i) {
    return i >= 0 && i < n->ninputs && n->inputs[i] && n->inputs[i]->requires_grad && (n->inputs_grad >> i & 1u);
}

/* Drops everything a node holds. The node stays as a marker: backward == NULL means "freed by a
 * backward without retain_graph" (the engine reports a second backward through it). */
static void node_clear(fl_node *n) {
    for (int i = 0; i < FL_NODE_MAX_INPUTS; i++) { fl_tensor_release(n->inputs[i]); n->inputs[i] = NULL; }
    for (int i = 0; i < FL_NODE_MAX_SAVED; i++) { fl_tensor_release(n->saved[i]); n->saved[i] = NULL; }
    if (n->ctx && n->ctx_free) n->ctx_free(n->ctx);
    n->ctx = NULL;
    n->ninputs = 0;
    n->backward = NULL;
    fl_grad_hooks_release(n->orphan_hooks);
    n->orphan_hooks = NULL;
}

/* Releasing a node releases its inputs, which release their nodes, ... A long chain would recurse
 * once per node, so nested releases are queued and the outermost call drains the queue. */
static _Thread_local fl_node **rel_queue;
static _Thread_local size_t rel_len, rel_cap;
static _Thread_local bool rel_active;

void fl_node_release(fl_node *n) {
    if (!n) return;
    if (--n->refcount > 0) {
        if (n->refcount == 1 && n->owner) fl_hooks_shared_note(n->owner, false);
        return;
    }
    if (rel_active) {
        if (rel_len == rel_cap) {
            size_t cap = rel_cap ? rel_cap * 2 : 64;
            fl_node **q = realloc(rel_queue, cap * sizeof *q);
            if (!q) { node_clear(n); free(n); return; }   /* out of memory: fall back to recursion */
            rel_queue = q;
            rel_cap = cap;
        }
        rel_queue[rel_len++] = n;
        return;
    }
    rel_active = true;
    node_clear(n);
    free(n);
    while (rel_len > 0) {
        fl_node *m = rel_queue[--rel_len];
        node_clear(m);
        free(m);
    }
    rel_active = false;
}

void fl_autograd_attach(fl_tensor *out, fl_node *node) {
    if (out->grad_fn && out->grad_fn->owner == out) out->grad_fn->owner = NULL;
    fl_node_release(out->grad_fn);
    out->grad_fn = node;
    out->requires_grad = true;
    if ((out->retains_grad || out->hooks) && node) node->owner = out;   /* a new history keeps them, as torch's */
}

fl_status fl_autograd_record(fl_tensor **out, fl_node **np, const char *name, fl_backward_fn fn, int n,
                             const fl_tensor *const *ins) {
    fl_node *nd;
    fl_status st = fl_node_new(&nd, name, fn, n, ins);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; return st; }
    fl_autograd_attach(*out, nd);
    if (np) *np = nd;
    return FL_OK;
}

fl_status fl_autograd_record_ctx(fl_tensor **out, const char *name, fl_backward_fn fn, const fl_tensor *x, void *ctx,
                                 void (*ctx_free)(void *)) {
    fl_node *nd = NULL;
    fl_status st = fl_autograd_record(out, &nd, name, fn, 1, &x);
    if (st != FL_OK) { ctx_free(ctx); return st; }
    nd->ctx = ctx;
    nd->ctx_free = ctx_free;
    st = fl_node_input_stub(nd, 0);   /* its shape alone is read */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* The link's backward: s takes a zero of its shape; the walk's order is what the link carries, not a value. */
static fl_status link_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    (void)g;
    if (!fl_node_input_needs_grad(n, 0)) return FL_OK;
    const fl_tensor *s = n->inputs[0];
    return fl_tensor_zeros(&gin[0], FL_F32, s->ndim, s->shape, s->device);
}

fl_status fl_autograd_link(fl_tensor **out, const fl_tensor *t, const fl_tensor *s) {
    *out = NULL;
    FL_TRY(fl_tensor_detach(out, t));
    if (!fl_grad_enabled() || !s->requires_grad) return FL_OK;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, "LinkBackward", link_bwd, 1, &s));
    fl_status st = fl_node_input_stub(n, 0);   /* its backward reads s's shape alone: s's data is not kept */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_node_save_detached(fl_node *n, int slot, const fl_tensor *t) {
    fl_tensor *d;
    FL_TRY(fl_tensor_detach(&d, t));
    fl_node_save(n, slot, d);
    fl_tensor_release(d);
    return FL_OK;
}

/* ---- tensor-level helpers ---------------------------------------------------------------- */

fl_status fl_tensor_set_requires_grad(fl_tensor *t, bool on) {
    if (t->grad_fn) {
        if (on) return FL_OK;   /* already part of a graph: requires grad by construction */
        return FL_ERR(FL_EINVAL, "requires_grad: only leaf tensors can change requires_grad; this one was made by %s "
                      "(use :detach() to get a tensor without history)", t->grad_fn->name);
    }
    if (on && fl_format(t->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "requires_grad: %s tensors cannot require gradients (they hold quantized data); "
                      "keep an fp32 master copy and quantize it in forward", fl_format(t->dtype)->name);
    t->requires_grad = on;
    return FL_OK;
}

/* t becomes its node's owner (retain_grad, hooks): one tensor per node */
static fl_status own_node(fl_tensor *t, const char *fname) {
    if (t->grad_fn->owner && t->grad_fn->owner != t)
        return FL_ERR(FL_EINVAL, "%s: another tensor already asked for the gradient of this %s output", fname,
                      t->grad_fn->name);
    t->grad_fn->owner = t;
    return FL_OK;
}

fl_status fl_tensor_retain_grad(fl_tensor *t) {
    if (!t->requires_grad)
        return FL_ERR(FL_EINVAL, "retain_grad: the tensor does not require grad (a leaf: call :requires_grad(true) "
                      "first; a result: compute it from tensors that require grad, outside no_grad)");
    if (!t->grad_fn) return FL_OK;   /* a leaf keeps its gradient anyway (torch: a no-op) */
    FL_TRY(own_node(t, "retain_grad"));
    t->retains_grad = true;
    return FL_OK;
}

/* ---- gradient hooks ------------------------------------------------------------------------ */

static fl_status accumulate(fl_tensor **acc, const fl_tensor *g);

static _Thread_local fl_hooks_shared_fn hooks_shared;
void fl_set_hooks_shared(fl_hooks_shared_fn fn) { hooks_shared = fn; }
void fl_hooks_shared_note(fl_tensor *t, bool shared) {
    if (hooks_shared && t && ((t->hooks && t->hooks->n) || (t->post_hooks && t->post_hooks->n))) hooks_shared(t, shared);
}

/* A node gains a reference: where its owner's hooks run at it, the owner is now shared (fl_set_hooks_shared) */
static void node_retain(fl_node *n) {
    if (n->refcount++ == 1 && n->owner) fl_hooks_shared_note(n->owner, true);
}

fl_grad_hooks *fl_grad_hooks_retain(fl_grad_hooks *h) { if (h) h->refcount++; return h; }

void fl_grad_hooks_release(fl_grad_hooks *h) {
    if (!h || --h->refcount > 0) return;
    for (size_t i = 0; i < h->n; i++) if (h->v[i].ud_free) h->v[i].ud_free(h->v[i].ud);
    free(h->v);
    free(h);
}

bool fl_grad_hooks_remove(fl_grad_hooks *h, uint64_t id) {
    for (size_t i = 0; h && i < h->n; i++)
        if (h->v[i].id == id && !h->v[i].removed) {
            if (h->running) { h->v[i].removed = true; return true; }   /* let go when the call ends (run_hook_list) */
            fl_grad_hook gone = h->v[i];
            memmove(h->v + i, h->v + i + 1, (h->n - i - 1) * sizeof *h->v);
            h->n--;
            if (gone.ud_free) gone.ud_free(gone.ud);
            return true;
        }
    return false;
}

static _Thread_local uint64_t hook_ids;

/* Appends hk to the list at *slot (made on first use: the tensor's reference); *id and *list (a new reference) as
 * fl_tensor_add_grad_hook's. On failure hk's ud_free has run. */
static fl_status hooks_append(fl_grad_hooks **slot, fl_grad_hook hk, const char *fname, uint64_t *id,
                              fl_grad_hooks **list) {
    fl_status st = FL_OK;
    if (!*slot) {
        if (!(*slot = calloc(1, sizeof **slot))) st = FL_ERR(FL_ENOMEM, "%s: out of memory", fname);
        else (*slot)->refcount = 1;
    }
    fl_grad_hooks *h = st == FL_OK ? *slot : NULL;
    if (h && h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 4;
        fl_grad_hook *v = realloc(h->v, cap * sizeof *v);
        if (!v) st = FL_ERR(FL_ENOMEM, "%s: out of memory", fname);
        else { h->v = v; h->cap = cap; }
    }
    if (st != FL_OK) {
        if (hk.ud_free) hk.ud_free(hk.ud);
        return st;
    }
    hk.id = ++hook_ids;
    h->v[h->n++] = hk;
    *id = hk.id;
    if (list) *list = fl_grad_hooks_retain(h);
    return FL_OK;
}

fl_status fl_tensor_add_grad_hook(fl_tensor *t, fl_grad_hook_fn fn, void *ud, void (*ud_free)(void *), uint64_t *id,
                                  fl_grad_hooks **list) {
    fl_status st = FL_OK;
    if (!t->requires_grad)
        st = FL_ERR(FL_EINVAL, "register_hook: the tensor does not require grad, so no gradient would reach the hook "
                    "(a leaf: call :requires_grad(true) first)");
    if (st == FL_OK && t->grad_fn) st = own_node(t, "register_hook");
    if (st != FL_OK) {
        if (ud_free) ud_free(ud);
        return st;
    }
    return hooks_append(&t->hooks, (fl_grad_hook){ .fn = fn, .ud = ud, .ud_free = ud_free }, "register_hook", id, list);
}

fl_status fl_tensor_add_post_accumulate_grad_hook(fl_tensor *t, fl_post_grad_hook_fn fn, void *ud,
                                                  void (*ud_free)(void *), uint64_t *id, fl_grad_hooks **list) {
    static const char *const NAME = "register_post_accumulate_grad_hook";
    fl_status st = FL_OK;
    if (t->grad_fn)   /* torch: "post accumulate grad hooks cannot be registered on non-leaf tensors" */
        st = FL_ERR(FL_EINVAL, "%s: only a leaf tensor has its gradient accumulated into .grad; this one was made by "
                    "%s (register_hook sees a result's gradient)", NAME, t->grad_fn->name);
    else if (!t->requires_grad)
        st = FL_ERR(FL_EINVAL, "%s: the tensor does not require grad, so no gradient would be accumulated (call "
                    ":requires_grad(true) first)", NAME);
    if (st != FL_OK) {
        if (ud_free) ud_free(ud);
        return st;
    }
    return hooks_append(&t->post_hooks, (fl_grad_hook){ .post = fn, .ud = ud, .ud_free = ud_free }, NAME, id, list);
}

/* *g ← t's gradient hooks applied to it in turn (each may replace it); g NULL: t's post-accumulate-grad hooks, each
 * called with t. The hooks called are those of the list as this call began, torch 2.15's (it iterates over a copy
 * of the hooks): one removed by an earlier hook still runs (it is only marked, fl_grad_hooks_remove, and let go
 * here at the end: until stop 98 it was skipped), one added runs from the next call on. Each is looked up by id (a
 * hook that adds one may move the array; a nested call on the list sees what was removed before it as removed).
 * *g stays ours to release. */
static fl_status run_hook_list(fl_grad_hooks *list, fl_tensor *t, fl_tensor **g, bool *replaced) {
    fl_grad_hooks *h = fl_grad_hooks_retain(list);
    if (!h) return FL_OK;
    size_t n = 0;
    uint64_t *ids = malloc((h->n ? h->n : 1) * sizeof *ids);
    fl_status st = ids ? FL_OK : FL_ERR(FL_ENOMEM, "backward: out of memory for a tensor's hooks");
    for (size_t i = 0; st == FL_OK && i < h->n; i++) if (!h->v[i].removed) ids[n++] = h->v[i].id;
    h->running++;
    for (size_t i = 0; st == FL_OK && i < n; i++) {
        const fl_grad_hook *hk = NULL;
        for (size_t j = 0; j < h->n; j++) if (h->v[j].id == ids[i]) hk = &h->v[j];
        if (!hk) continue;
        if (!g) { st = hk->post(hk->ud, t); continue; }
        fl_tensor *out = NULL;
        st = hk->fn(hk->ud, *g, &out);
        if (st == FL_OK && out) { fl_tensor_release(*g); *g = out; if (replaced) *replaced = true; }
        else fl_tensor_release(out);
    }
    if (--h->running == 0) {   /* the hooks removed during the call go now */
        size_t k = 0;
        for (size_t i = 0; i < h->n; i++) {
            if (!h->v[i].removed) h->v[k++] = h->v[i];
            else if (h->v[i].ud_free) h->v[i].ud_free(h->v[i].ud);
        }
        h->n = k;
    }
    free(ids);
    fl_grad_hooks_release(h);
    return st;
}
static fl_status run_grad_hooks(fl_tensor *t, fl_tensor **g, bool *replaced) {
    return run_hook_list(g ? t->hooks : t->post_hooks, t, g, replaced);
}

/* A hooked leaf's gradients in this backward, summed over its uses until the last, then hooked and added to .grad */
typedef struct { fl_tensor *leaf; fl_tensor *sum; } leaf_pending;

static fl_status pending_add(leaf_pending **p, size_t *n, fl_tensor *leaf, const fl_tensor *g) {
    for (size_t i = 0; i < *n; i++)
        if ((*p)[i].leaf == leaf) return accumulate(&(*p)[i].sum, g);
    leaf_pending *q = realloc(*p, (*n + 1) * sizeof *q);
    if (!q) return FL_ERR(FL_ENOMEM, "backward: out of memory");
    *p = q;
    q[*n] = (leaf_pending){ leaf, NULL };
    (*n)++;
    return accumulate(&q[*n - 1].sum, g);
}

/* Whether leaf's gradient goes through the pending list (its hooks want it summed, or once accumulated). */
static bool leaf_hooked(const fl_tensor *leaf) { return leaf->hooks || leaf->post_hooks; }

/* The leaf's gradient for this backward is complete: its gradient hooks, .grad += it, its post-accumulate-grad
 * hooks (only where a gradient reached it, as torch's AccumulateGrad runs only then). into (fl_autograd_grad's
 * slot for the leaf) non-NULL: the hooked gradient is added there instead, and .grad and the post hooks left. */
static fl_status pending_flush(leaf_pending *p, size_t n, const fl_tensor *leaf, fl_tensor **into) {
    for (size_t i = 0; i < n; i++) {
        if (p[i].leaf != leaf || !p[i].sum) continue;
        fl_tensor *g = p[i].sum;
        p[i].sum = NULL;
        fl_status st = run_grad_hooks(p[i].leaf, &g, NULL);
        if (st == FL_OK) st = into ? accumulate(into, g) : fl_accumulate_grad(p[i].leaf, g);
        fl_tensor_release(g);
        if (st == FL_OK && !into) st = run_grad_hooks(p[i].leaf, NULL, NULL);
        return st;
    }
    return FL_OK;
}

fl_status fl_tensor_detach(fl_tensor **out, const fl_tensor *t) {
    /* A header over the same storage with t's strides (torch's detach keeps them all; a view of the same shape
     * recomputed a size-1 dim's, stop 105); the layout functions never copy history. */
    return fl_tensor_alias(out, t);
}

void fl_tensor_zero_grad(fl_tensor *t) {
    fl_tensor_release(t->grad);
    t->grad = NULL;
}

/* A gradient tensor we may write in place: fp32, contiguous, and the only reference to its memory. */
static bool exclusively_owned(const fl_tensor *g) {
    return g->refcount == 1 && g->storage->refcount == 1 && g->dtype == FL_F32 && fl_tensor_is_contiguous(g) &&
           !g->grad_fn;
}

/* One fp32 element on device expanded over its shape (every stride 0): SumBackward's and MeanBackward's gradient
 * of a whole reduction (ops_grad.c reduce_bwd). */
static bool broadcast_f32_on(const fl_tensor *t, int device) {
    if (t->dtype != FL_F32 || t->device != device) return false;
    for (int i = 0; i < t->ndim; i++) if (t->stride[i] != 0 && t->shape[i] != 1) return false;
    return true;
}

/* d += s for fp32 tensors of one shape on one device, in place: d contiguous, s contiguous or one element expanded
 * (broadcast_f32_on; each d[i] + v, the sum a filled s gave). */
static fl_status add_inplace(fl_tensor *d, const fl_tensor *s) {
    if (d->device == FL_DEV_CPU) {
        float *pd = fl_tensor_data(d);
        const float *ps = fl_tensor_data(s);
        int64_t n = fl_tensor_numel(d);
        if (!fl_tensor_is_contiguous(s) && !fl_tensor_is_dense(s)) {   /* (dense: d's strides, accumulate_as) */
            const float v = n ? ps[0] : 0.0f;
            FL_PAR_FOR_SIMD(n >= (1 << 16),,
            for (int64_t i = 0; i < n; i++) pd[i] += v;);
            return FL_OK;
        }
        FL_PAR_FOR_SIMD(n >= (1 << 16),,
        for (int64_t i = 0; i < n; i++) pd[i] += ps[i];);
        return FL_OK;
    }
    /* Elementwise, so the device may read and write the same buffer (s broadcast: the device's stride-0 operand). */
    return fl_device_get(d->device)->binary(FL_OP_ADD, d, d, s);
}

static bool f32_contiguous_on(const fl_tensor *t, int device) {
    return t->dtype == FL_F32 && fl_tensor_is_contiguous(t) && t->device == device;
}

/* Whether add_inplace takes s into an fp32 contiguous tensor on device. */
static bool addable_on(const fl_tensor *s, int device) {
    return f32_contiguous_on(s, device) || broadcast_f32_on(s, device);
}

/* A fresh fp32 contiguous copy of g (or g itself, retained, when it already is one we own); one element expanded on
 * the host (a whole sum's gradient) is filled with its value, as reduce_bwd filled it before stop 101 (a plain
 * loop: the tiles' strided copy took ~20% longer on one thread). */
static fl_status own_f32(fl_tensor **out, const fl_tensor *g) {
    if (exclusively_owned(g)) { *out = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
    if (fl_tensor_numel(g) && broadcast_f32_on(g, FL_DEV_CPU))
        return fl_tensor_full(out, FL_F32, g->ndim, g->shape, *(const float *)fl_tensor_data(g), g->device);
    return fl_tensor_to(out, g, FL_F32);
}

/* A dense fp32 tensor that is not contiguous (channels_last, a permutation: torch's non-overlapping and dense) and the
 * only reference to its memory: a gradient kept with its strides for a node that reads such a one (node_takes_dense) */
static bool dense_owned(const fl_tensor *g) {
    return g->refcount == 1 && g->storage->refcount == 1 && g->dtype == FL_F32 && !fl_tensor_is_contiguous(g) &&
           fl_tensor_is_dense(g) && !g->grad_fn;
}

/* own_f32, and where dense (the node the gradient is for reads a dense one: node_takes_dense) a dense gradient that is
 * not contiguous keeps its strides, as torch's autograd hands on the layout its ops produce (stop 102); every other
 * gradient is made contiguous, as before */
static fl_status own_f32_as(fl_tensor **out, const fl_tensor *g, bool dense) {
    if (dense && dense_owned(g)) { *out = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
    if (dense && !fl_format(g->dtype)->is_fp8 && !fl_tensor_is_contiguous(g) && fl_tensor_is_dense(g))
        return fl_tensor_copy_like(out, g, FL_F32);
    return own_f32(out, g);
}

/* *acc += g, in place when *acc is exclusively ours, else by replacing *acc with a new sum; dense: own_f32_as's */
static fl_status accumulate_as(fl_tensor **acc, const fl_tensor *g, bool dense) {
    if (fl_format(g->dtype)->is_fp8 || (*acc && fl_format((*acc)->dtype)->is_fp8)) {
        /* a consumer's FP8 hand-over (fl_autograd_sole_consumer): never summed */
        if (*acc) return FL_ERR(FL_EINVAL, "backward: an FP8 gradient was handed to an output with another consumer");
        *acc = fl_tensor_retain((fl_tensor *)g);
        return FL_OK;
    }
    if (!*acc) return own_f32_as(acc, g, dense);
    fl_tensor *a = *acc;
    if (exclusively_owned(a) && addable_on(g, a->device)) return add_inplace(a, g);
    /* a dense sum of ours on the host and a gradient of its strides (or one element expanded): element i of both
     * memories is the same element, so add_inplace's memory-order loop sums them */
    if (dense_owned(a) && a->device == FL_DEV_CPU && g->device == a->device &&
        (broadcast_f32_on(g, a->device) ||
         (g->dtype == FL_F32 && fl_tensor_is_dense(g) && memcmp(g->stride, a->stride, sizeof a->stride[0] * (size_t)a->ndim) == 0)))
        return add_inplace(a, g);
    fl_tensor *sum = NULL;
    FL_TRY(fl_binary(&sum, FL_OP_ADD, a, g));
    fl_tensor *o = NULL;
    fl_status st = own_f32_as(&o, sum, dense);
    fl_tensor_release(sum);
    if (st != FL_OK) return st;
    fl_tensor_release(a);
    *acc = o;
    return FL_OK;
}

static fl_status accumulate(fl_tensor **acc, const fl_tensor *g) { return accumulate_as(acc, g, false); }

/* The nodes whose backward reads a dense gradient that is not contiguous (a channels_last one) in memory order or
 * through its strides, and gives its inputs' gradients in the layout torch's does (stop 102): the activations' (their
 * saved tensor's layout where the gradient has it), the elementwise ops' (core/ops.c's layout rules), a conversion's
 * (it passes the gradient on) and conv2d's (its direct route reads the output gradient NHWC; the input's gradient
 * channels-last where the conv is, as torch's); since stop 104 the norms', poolings' and dropout's that keep a
 * channels_last input's layout (core/nn.c, max_pool.c, avg_pool.c: they read the gradient NHWC for such an input,
 * contiguous otherwise, copying only one in another layout); since stop 105 a transpose's (its backward is the same
 * transpose of the gradient, a view: a permute's chain of them made the gradient contiguous at each link, a copy per
 * link, and a channels_last input's gradient came out in neither layout). Every other node takes grad_out contiguous
 * (autograd.h). */
static bool node_takes_dense(const fl_node *nd) {
    static const char *const names[] = { "ReluBackward", "SiluBackward", "GeluBackward", "AddBackward", "SubBackward",
                                         "MulBackward", "DivBackward", "ToBackward", "ConvolutionBackward",
                                         "BatchNormBackward", "GroupNormBackward", "MaxPool2DWithIndicesBackward",
                                         "AvgPool2DBackward", "DropoutBackward", "TransposeBackward" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (nd->name && strcmp(nd->name, names[i]) == 0) return true;
    return false;
}

/* The nodes whose backward reads a gradient of one element expanded over the output (broadcast_f32_on, on the host)
 * as it is (core/nn.c act_bwd: dy·f'(x) with the one dy; since stop 102 the elementwise ops' binary_bwd, whose ops
 * then take the other operand's layout, as torch's: a channels_last product's gradient of a sum is channels_last, and
 * an add and a conversion hand the expanded gradient on, as torch's); every other backward takes grad_out contiguous (autograd.h),
 * so the engine copies the expanded gradient of a whole sum or mean (reduce_bwd) for it, as it did its fill. */
static bool node_takes_broadcast(const fl_node *nd) {
    static const char *const names[] = { "ReluBackward", "SiluBackward", "GeluBackward", "AddBackward", "SubBackward",
                                         "MulBackward", "DivBackward", "ToBackward" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (nd->name && strcmp(nd->name, names[i]) == 0) return true;
    return false;
}

/* The gradient gi of node nd's output, summed into *acc (grads[]): a first one expanded is kept so for a node that
 * reads it so (torch's SiluBackward0 reads SumBackward0's expanded gradient as it is too), else accumulate's. */
static fl_status accumulate_node(fl_tensor **acc, const fl_tensor *gi, const fl_node *nd) {
    if (!*acc && !fl_tensor_is_contiguous(gi) && broadcast_f32_on(gi, FL_DEV_CPU) && node_takes_broadcast(nd)) {
        *acc = fl_tensor_retain((fl_tensor *)gi);
        return FL_OK;
    }
    return accumulate_as(acc, gi, node_takes_dense(nd));
}

/* with_flops: whether the ops a node's backward runs count their FLOPs, as torch's backward of the same op does: the
 * GEMMs of MmBackward0/BmmBackward0 and AddmmBackward0 (matmul, linear, and the FP8 linear in their place), the
 * aten::mul calls of MulBackward0/1, and whatever a Python autograd.Function's backward calls (fp8.autograd.Function:
 * LinkBackward). Every other node is one uncounted op in torch (ConvolutionBackward0's aten::convolution_backward,
 * SoftmaxBackward0's _softmax_backward_data, ...): the elementwise ops and GEMMs fp8lab's formula runs count none.
 * Since stop 101 also the nodes whose formula (core/ops_grad.c) runs the aten::mul and aten::add calls torch's
 * derivatives.yaml writes for that op, each with the same first operand's size (scripts/gen_profflops.py's
 * unary_backward, div_backward and pow_backward): AbsBackward0 (grad * sgn), ExpBackward0, SqrtBackward0 (2 * result),
 * SinBackward0, CosBackward0, Log1PBackward0 (self + 1), Expm1Backward0 (result + 1, then the product), AtanBackward0
 * (self * self + 1), SinhBackward0, CoshBackward0, Log2Backward0 and Log10Backward0 (self * ln b), Exp2Backward0 and
 * RsqrtBackward0 (two products), DivBackward0 (-grad * ((a / b) / b); x / s: none, as DivBackward1's grad / s) and
 * PowBackward0 (x ^ s: grad * (s * x^(s-1)), two products; s ^ x, PowBackward2: grad * (result * ln s)). Since
 * stop 102 also 0 ^ x, a tensor ^ a tensor (PowBackward1: four), erf and tan; since stop 103 s / x (torch's
 * ReciprocalBackward0 and MulBackward0: three aten::mul), asin and acos (two aten::mul and an aten::add), whose
 * divisions count as torch's products (AS_TORCH_COUNTED_OP, core/ops_grad.c); MatmulBackward counts as torch's
 * MvBackward0 or DotBackward0 where the forward was torch's aten::mv or aten::dot (torch_inner_grad_scope). */
static bool node_counts_flops(const fl_node *nd) {
    static const char *const counted[] = {
        "MatmulBackward", "LinearBackward", "FP8LinearBackward", "MulBackward", "AbsBackward", "ExpBackward",
        "SqrtBackward", "SinBackward", "CosBackward", "Log1PBackward", "Expm1Backward", "AtanBackward", "SinhBackward",
        "CoshBackward", "Log2Backward", "Log10Backward", "Exp2Backward", "RsqrtBackward", "ErfBackward", "TanBackward",
        "AsinBackward", "AcosBackward", "DivBackward", "DotBackward" };
    if (nd->backward == link_bwd) return true;
    if (!nd->name) return false;
    for (size_t i = 0; i < sizeof counted / sizeof *counted; i++)
        if (strcmp(nd->name, counted[i]) == 0) return true;
    /* (a tensor to a tensor's power and 0 ^ x since stop 102: their extra ops are scoped as torch's uncounted ones) */
    if (strcmp(nd->name, "PowBackward") == 0) return true;
    return false;
}

fl_status fl_node_input_stub(fl_node *n, int i) {
    fl_tensor *in = n->inputs[i];
    /* a leaf that takes a gradient is written to (its .grad): the tensor itself stays */
    if (!in || (!in->grad_fn && (n->inputs_grad >> i & 1u))) return FL_OK;
    fl_tensor *h = calloc(1, sizeof *h);
    if (!h) return FL_ERR(FL_ENOMEM, "autograd: out of memory for an input header");
    h->refcount = 1;
    h->dtype = in->dtype;
    h->device = in->device;
    h->ndim = in->ndim;
    memcpy(h->shape, in->shape, sizeof h->shape);
    memcpy(h->stride, in->stride, sizeof h->stride);
    h->scale_axis = -1;
    h->requires_grad = in->requires_grad;
    h->grad_fn = in->grad_fn;
    if (h->grad_fn) node_retain(h->grad_fn);
    n->inputs[i] = h;
    fl_tensor_release(in);
    return FL_OK;
}

fl_status fl_node_drop_unread(fl_node *n, int j, int i) {
    if (!n->saved[j] || !n->saved_for[j] || (n->saved_for[j] & n->inputs_grad)) return FL_OK;
    fl_node_save(n, j, NULL);
    return i >= 0 ? fl_node_input_stub(n, i) : FL_OK;
}

fl_status fl_accumulate_grad(fl_tensor *t, const fl_tensor *g) {
    char a[200], b[200];
    if (!fl_shape_equal(t->ndim, t->shape, g->ndim, g->shape))
        return FL_ERR(FL_EINVAL, "autograd: gradient of shape %s for a tensor of shape %s",
                      fl_shape_str(b, sizeof b, g->ndim, g->shape), fl_shape_str(a, sizeof a, t->ndim, t->shape));
    if (fl_format(t->grad_dtype)->is_fp8) return fl_fp8_grad_accumulate(t, g);
    /* t->grad may be shared with Lua (t.grad handed out): accumulate in place so holders see the sum,
     * like PyTorch's .grad; the first gradient is copied so it never aliases another tensor. */
    if (!t->grad) {
        /* torch's AccumulateGrad (utils::clone_obey_contract): a dense leaf that is not contiguous (a channels_last
         * weight or image, a permutation) gets a .grad with its strides (stop 101; it was contiguous) */
        if (!fl_tensor_is_contiguous(t) && fl_tensor_is_dense(t)) {
            /* one of the engine's own with those strides (a channels-last conv's or activation's: stop 102) is
             * taken, as torch's AccumulateGrad steals a gradient that obeys the contract */
            if (dense_owned(g) && memcmp(g->stride, t->stride, sizeof t->stride[0] * (size_t)t->ndim) == 0) {
                t->grad = fl_tensor_retain((fl_tensor *)g);
                return FL_OK;
            }
            fl_tensor *r = NULL;
            FL_TRY(fl_tensor_empty_like(&r, t, FL_F32));
            fl_status st = fl_tensor_copy_(r, g);
            if (st != FL_OK) { fl_tensor_release(r); return st; }
            t->grad = r;
            return FL_OK;
        }
        if (g->refcount == 1 && exclusively_owned(g)) { t->grad = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
        return own_f32(&t->grad, g);
    }
    fl_tensor *gr = t->grad;
    /* an in-place write like any other: a graph that saved this .grad sees the change and refuses (torch's) */
    if (f32_contiguous_on(gr, gr->device) && addable_on(g, gr->device)) {
        FL_TRY(add_inplace(gr, g));
        fl_tensor_bump(gr);
        return FL_OK;
    }
    fl_tensor *sum = NULL;
    FL_TRY(fl_binary(&sum, FL_OP_ADD, gr, g));
    fl_status st = fl_tensor_copy_(gr, sum);
    fl_tensor_release(sum);
    return st;
}

fl_status fl_sum_to_shape(fl_tensor **out, const fl_tensor *g, int ndim, const int64_t *shape) {
    char a[200], b[200];
    *out = NULL;
    if (fl_shape_equal(g->ndim, g->shape, ndim, shape)) { *out = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
    if (ndim > g->ndim)
        return FL_ERR(FL_EINVAL, "sum_to_shape: cannot sum %s down to %s",
                      fl_shape_str(a, sizeof a, g->ndim, g->shape), fl_shape_str(b, sizeof b, ndim, shape));
    fl_tensor *cur = fl_tensor_retain((fl_tensor *)g);
    int lead = g->ndim - ndim;
    /* Leading dims: sum them away (one reduction each, largest index first keeps the indices valid). */
    fl_status st = FL_OK;
    for (int d = lead - 1; d >= 0 && st == FL_OK; d--) {
        fl_tensor *r = NULL;
        st = fl_reduce(&r, FL_OP_SUM, cur, d, false);
        fl_tensor_release(cur);
        cur = r;
    }
    for (int i = 0; i < ndim && st == FL_OK; i++) {
        if (shape[i] == cur->shape[i]) continue;
        if (shape[i] != 1) {
            st = FL_ERR(FL_EINVAL, "sum_to_shape: cannot sum %s down to %s",
                        fl_shape_str(a, sizeof a, g->ndim, g->shape), fl_shape_str(b, sizeof b, ndim, shape));
            break;
        }
        fl_tensor *r = NULL;
        st = fl_reduce(&r, FL_OP_SUM, cur, i, true);
        fl_tensor_release(cur);
        cur = r;
    }
    if (st != FL_OK) { fl_tensor_release(cur); return st; }
    *out = cur;
    return FL_OK;
}

/* ---- the backward walk ------------------------------------------------------------------- */

/* Open-addressing map node → index into the order array. */
typedef struct { fl_node **keys; int *vals; size_t cap; } node_map;

static size_t hash_ptr(const void *p) { uintptr_t x = (uintptr_t)p; x ^= x >> 17; x *= 0xed5ad4bbu; x ^= x >> 11; return (size_t)x; }

static fl_status map_init(node_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    m->cap = cap;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) { free(m->keys); free(m->vals); m->keys = NULL; m->vals = NULL; return FL_ERR(FL_ENOMEM, "backward: out of memory"); }
    return FL_OK;
}
static int map_get(const node_map *m, const fl_node *k) {
    for (size_t i = hash_ptr(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return -1;
        if (m->keys[i] == k) return m->vals[i];
    }
}
static fl_status map_put(node_map *m, fl_node *k, int v, size_t count) {
    if (2 * (count + 1) > m->cap) {
        node_map n;
        FL_TRY(map_init(&n, count + 1));
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t j = hash_ptr(m->keys[i]) & (n.cap - 1);
                while (n.keys[j]) j = (j + 1) & (n.cap - 1);
                n.keys[j] = m->keys[i];
                n.vals[j] = m->vals[i];
            }
        free(m->keys); free(m->vals);
        *m = n;
    }
    size_t i = hash_ptr(k) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
    m->keys[i] = k;
    m->vals[i] = v;
    return FL_OK;
}

/* ---- grad-ready hook --------------------------------------------------------------------- */

static _Thread_local fl_grad_ready_fn ready_fn;
static _Thread_local void *ready_ud;

void fl_autograd_set_grad_ready_hook(fl_grad_ready_fn fn, void *ud) { ready_fn = fn; ready_ud = ud; }

/* (leaf, k): node order[k] takes leaf as an input. The walk visits k from n-1 down to 0, so a leaf's
 * gradient is final after its smallest k. */
typedef struct { fl_tensor *leaf; size_t k; } leaf_use;

static int cmp_use_leaf(const void *a, const void *b) {
    const leaf_use *x = a, *y = b;
    if (x->leaf != y->leaf) return (uintptr_t)x->leaf < (uintptr_t)y->leaf ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}
static int cmp_use_k_desc(const void *a, const void *b) {
    const leaf_use *x = a, *y = b;
    return x->k > y->k ? -1 : x->k < y->k;
}

/* The leaves' last uses, in walk order (k descending); *count of them. */
static fl_status leaf_last_uses(fl_node **order, size_t n, leaf_use **out, size_t *count) {
    size_t m = 0, cap = 0;
    leaf_use *u = NULL;
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < order[k]->ninputs; i++) {
            fl_tensor *in = order[k]->inputs[i];
            if (!in || in->grad_fn || !fl_node_input_needs_grad(order[k], i)) continue;
            if (m == cap) {
                cap = cap ? 2 * cap : 64;
                leaf_use *p = realloc(u, cap * sizeof *u);
                if (!p) { free(u); return FL_ERR(FL_ENOMEM, "backward: out of memory"); }
                u = p;
            }
            u[m++] = (leaf_use){ in, k };
        }
    if (m) qsort(u, m, sizeof *u, cmp_use_leaf);
    size_t w = 0;
    for (size_t r = 0; r < m; r++)          /* keep the first (smallest k) of each leaf */
        if (r == 0 || u[r].leaf != u[r - 1].leaf) u[w++] = u[r];
    if (w) qsort(u, w, sizeof *u, cmp_use_k_desc);
    *out = u;
    *count = w;
    return FL_OK;
}

static const char *SECOND_TIME = "backward: trying to backward through the graph a second time (use retain_graph=true)";

/* Post-order DFS (iterative: graphs can be thousands of nodes deep). order[] ends up with every node
 * after all nodes that consume its output... reversed: we emit a node after its inputs' nodes, so
 * walking order[] from the end visits consumers before producers. */
static fl_status topo_order(fl_node *const *roots, int nroots, fl_node ***order_out, size_t *n_out, node_map *map) {
    size_t cap = 64, n = 0, sp = 0, scap = 64;
    fl_node **order = malloc(cap * sizeof *order);
    struct frame { fl_node *node; int next; } *stack = malloc(scap * sizeof *stack);
    fl_status st = FL_OK;
    if (!order || !stack) { st = FL_ERR(FL_ENOMEM, "backward: out of memory"); goto done; }
    if ((st = map_init(map, 64)) != FL_OK) goto done;
    size_t count = 0;
    /* Several roots: one walk after another, each skipping what an earlier one placed. A node a later root reaches
     * first can only be consumed by nodes placed after it, so order[] stays topological. */
    for (int r = 0; r < nroots; r++) {
    fl_node *root = roots[r];
    if (map_get(map, root) != -1) continue;
    /* map value -2 marks "on the stack / being visited"; >= 0 is the index in order. */
    stack[sp++] = (struct frame){ root, 0 };
    if ((st = map_put(map, root, -2, count++)) != FL_OK) goto done;
    while (sp > 0) {
        struct frame *f = &stack[sp - 1];
        fl_node *nd = f->node;
        if (!nd->backward) { st = FL_ERR(FL_EINVAL, "%s", SECOND_TIME); goto done; }
        if (f->next < nd->ninputs) {
            fl_tensor *in = nd->inputs[f->next++];
            fl_node *c = in ? in->grad_fn : NULL;
            if (!c || map_get(map, c) != -1) continue;
            if (sp == scap) {
                void *p = realloc(stack, 2 * scap * sizeof *stack);
                if (!p) { st = FL_ERR(FL_ENOMEM, "backward: out of memory"); goto done; }
                stack = p; scap *= 2;
            }
            if ((st = map_put(map, c, -2, count++)) != FL_OK) goto done;
            stack[sp++] = (struct frame){ c, 0 };
            continue;
        }
        if (n == cap) {
            void *p = realloc(order, 2 * cap * sizeof *order);
            if (!p) { st = FL_ERR(FL_ENOMEM, "backward: out of memory"); goto done; }
            order = p; cap *= 2;
        }
        if ((st = map_put(map, nd, (int)n, count)) != FL_OK) goto done;
        order[n++] = nd;
        sp--;
    }
    }
done:
    free(stack);
    if (st != FL_OK) { free(order); free(map->keys); free(map->vals); map->keys = NULL; map->vals = NULL; return st; }
    *order_out = order;
    *n_out = n;
    return FL_OK;
}

/* false from a walk's start until it first can change something (a node's backward, a hook, a .grad): the failed
 * walk's answer to fl_autograd_walk_untouched. Set again once the loop is over, after any nested walk a hook ran. */
static _Thread_local bool walk_touched;
/* The backward in progress on this thread (fl_autograd_sole_consumer): its node map and, per node in its
 * order, how many node inputs take that node's output. */
static _Thread_local const node_map *bw_map;
static _Thread_local const int *bw_uses;
static _Thread_local uint64_t bw_id, bw_count;   /* the backward in progress; how many have started */
/* fl_autograd_grad_sum's view of that backward: its running sums (NULL in fl_autograd_grad's capturing walk) and
 * the node whose backward runs now */
static _Thread_local fl_tensor **bw_grads;
static _Thread_local const fl_node *bw_node;

uint64_t fl_autograd_backward_id(void) { return bw_map ? bw_id : 0; }

uint64_t fl_autograd_backwards_started(void) { return bw_count; }

bool fl_autograd_sole_consumer(const fl_node *n, int i) {
    if (!bw_map || !n || i < 0 || i >= n->ninputs || !n->inputs[i] || !n->inputs[i]->grad_fn) return false;
    int k = map_get(bw_map, n->inputs[i]->grad_fn);
    return k >= 0 && bw_uses[k] == 1;
}

fl_tensor *fl_autograd_grad_sum(const fl_node *n, int i) {
    if (!bw_map || !bw_grads || !n || n != bw_node || i < 0 || i >= n->ninputs || !n->inputs[i] ||
        !n->inputs[i]->grad_fn || !fl_node_input_needs_grad(n, i))
        return NULL;
    const fl_tensor *in = n->inputs[i];
    const int k = map_get(bw_map, in->grad_fn);
    fl_tensor *s = k >= 0 ? bw_grads[k] : NULL;
    /* what accumulate adds into in place (exclusively_owned, f32_contiguous_on), of the input's shape */
    if (!s || !exclusively_owned(s) || s->device != in->device || !fl_shape_equal(s->ndim, s->shape, in->ndim, in->shape))
        return NULL;
    return s;
}

/* t.grad += go for a tensor that retains its gradient (t:retain_grad()): an FP8 gradient one backward handed the
 * next (fl_autograd_sole_consumer) is dequantized, what that backward reads; the first is a copy, so t.grad never
 * aliases the gradient the graph goes on to use */
static fl_status retain_into(fl_tensor *t, const fl_tensor *go) {
    if (!fl_format(go->dtype)->is_fp8) return fl_accumulate_grad(t, go);
    fl_tensor *g = NULL;
    FL_TRY(fl_tensor_to(&g, go, FL_F32));
    fl_status st = fl_accumulate_grad(t, g);
    fl_tensor_release(g);
    return st;
}

/* The gradient go of node nd's output, for the tensor that asked for it (nd->owner): its hooks (an FP8 gradient a
 * consumer handed over is shown to them dequantized, and goes on as it is unless one replaces it), then
 * retain_grad's copy of what goes on (retain: a plain backward's; fl_autograd_grad fills no .grad). The owner is
 * held while Lua runs (a collection may drop its last box). */
/* *go through a list of gradient hooks (an FP8 gradient shown to them dequantized, going on as it is unless one
 * replaces it) */
static fl_status hooked_grad(fl_grad_hooks *list, fl_tensor *t, fl_tensor **go) {
    fl_tensor *g = NULL;
    bool fp8 = fl_format((*go)->dtype)->is_fp8, replaced = false;
    fl_status st = FL_OK;
    if (fp8) st = fl_tensor_to(&g, *go, FL_F32);
    else g = fl_tensor_retain(*go);
    if (st == FL_OK) st = run_hook_list(list, t, &g, &replaced);
    if (st == FL_OK && (replaced || !fp8)) { fl_tensor_release(*go); *go = g; g = NULL; }
    fl_tensor_release(g);
    return st;
}
static fl_status owner_grad(fl_node *nd, fl_tensor **go, bool retain) {
    fl_tensor *own = fl_tensor_retain(nd->owner);
    fl_status st = FL_OK;
    if (own->hooks) st = hooked_grad(own->hooks, own, go);
    if (st == FL_OK && retain && own->retains_grad) st = retain_into(own, *go);
    fl_tensor_release(own);
    return st;
}

/* The tensors a walk is restricted to (NULL: a plain backward, every leaf's .grad): fl_autograd_grad's inputs and
 * their gradients (out), or (out NULL) fl_backward_many's inputs, whose .grad the walk fills as a backward would. */
typedef struct { fl_tensor *const *in; int n; fl_tensor **out; } capture_set;

/* Which input of the capture set t is (the first, where one is listed twice), or -1. */
static int capture_index(const capture_set *cap, const fl_tensor *t) {
    for (int i = 0; cap && i < cap->n; i++) if (cap->in[i] == t) return i;
    return -1;
}

/* A leaf's last use in this backward is done: its hooked gradient goes into .grad, then the grad-ready hook (or,
 * captured, into its slot of the capture set). */
static fl_status leaf_final(leaf_pending *p, size_t n, fl_tensor *leaf, fl_grad_ready_fn hook, void *ud,
                            const capture_set *cap) {
    if (cap && cap->out) {
        int j = capture_index(cap, leaf);
        return j >= 0 ? pending_flush(p, n, leaf, &cap->out[j]) : FL_OK;
    }
    if (cap && capture_index(cap, leaf) < 0) return FL_OK;
    fl_status st = pending_flush(p, n, leaf, NULL);
    if (st == FL_OK && hook) st = hook(leaf, ud);
    return st;
}

/* The gradient seed of root: grad (root's shape, not FP8) as fp32, or ones for a one-element root. */
static fl_status seed_of(fl_tensor **g0, const fl_tensor *root, const fl_tensor *grad, const char *fname) {
    char a[200], b[200];
    *g0 = NULL;
    if (!root->requires_grad)
        return FL_ERR(FL_EINVAL, "%s: tensor does not require grad and has no grad_fn "
                      "(call :requires_grad(true) on the leaves, and compute outside no_grad)", fname);
    if (grad) {
        if (!fl_shape_equal(grad->ndim, grad->shape, root->ndim, root->shape))
            return FL_ERR(FL_EINVAL, "%s: grad has shape %s but the tensor has shape %s", fname,
                          fl_shape_str(a, sizeof a, grad->ndim, grad->shape), fl_shape_str(b, sizeof b, root->ndim, root->shape));
        if (fl_format(grad->dtype)->is_fp8)
            return FL_ERR(FL_EINVAL, "%s: grad is %s; dequantize it first", fname, fl_format(grad->dtype)->name);
        /* a dense one (channels_last) keeps its strides (the root's node may read it so: node_takes_dense) */
        if (!fl_tensor_is_contiguous(grad) && fl_tensor_is_dense(grad)) return fl_tensor_copy_like(g0, grad, FL_F32);
        return fl_tensor_to(g0, grad, FL_F32);
    }
    if (fl_tensor_numel(root) != 1)
        return FL_ERR(FL_EINVAL, "%s: grad can be implicitly created only for scalar outputs; got shape %s", fname,
                      fl_shape_str(a, sizeof a, root->ndim, root->shape));
    return fl_tensor_full(g0, FL_F32, root->ndim, root->shape, 1.0, root->device);
}

/* A leaf that is a root and on no node's path: its gradient is its seed (*g, ours): hooks, .grad, post-accumulate
 * hooks, the grad-ready hook. */
static fl_status leaf_root(fl_tensor *leaf, fl_tensor **g) {
    fl_status st = run_grad_hooks(leaf, g, NULL);
    if (st == FL_OK) st = fl_accumulate_grad(leaf, *g);
    if (st == FL_OK) st = run_grad_hooks(leaf, NULL, NULL);
    if (st == FL_OK && ready_fn) st = ready_fn(leaf, ready_ud);
    return st;
}

/* The walk from the roots' nodes (nroots of them, each seeded: seeds[r] is taken; leaf roots[0..nleaf) with theirs:
 * one some node takes is summed with what reaches it there, one no node takes is done after the walk), for
 * fl_backward (cap NULL: leaves' .grad, hooks, the grad-ready hook), fl_autograd_grad (cap: only the nodes on a path
 * to an input run, the inputs' gradients go to cap->out, no .grad, post-accumulate, retain_grad or grad-ready hook)
 * and fl_backward_many with inputs (cap->out NULL: the same walk, the inputs' .grad filled, a leaf's with its
 * post-accumulate and grad-ready hooks). */
static fl_status run_graph(fl_node *const *roots, fl_tensor **seeds, int nroots, bool retain_graph,
                           const capture_set *cap, fl_tensor *const *leaf_roots, fl_tensor **leaf_seeds, int nleaf) {
    char a[200], b[200];
    fl_node **order = NULL;
    size_t n = 0;
    node_map map = { 0 };
    fl_status st = topo_order(roots, nroots, &order, &n, &map);
    if (st != FL_OK) return st;
    /* A gradient hook (Lua code) may start a backward of its own: one through nodes an unfinished backward on this
     * thread is running would run (and free) them under it */
    for (size_t k = 0; k < n && st == FL_OK; k++)
        if (order[k]->busy)
            st = FL_ERR(FL_EINVAL, "backward: the graph through %s is being run by an unfinished backward (a hook "
                        "called backward through it); call it after that backward returns", order[k]->name);
    if (st != FL_OK) {
        free(order); free(map.keys); free(map.vals);
        return st;
    }
    /* Hold every node while we work: clearing one node's inputs may drop the last other reference
     * to a node later in the order. */
    for (size_t k = 0; k < n; k++) { node_retain(order[k]); order[k]->busy++; }
    fl_tensor **grads = calloc(n, sizeof *grads);   /* gradient of each node's output */
    int *uses = calloc(n, sizeof *uses);
    /* captured: per node, the input whose gradient it makes (-1: none), whether it runs (a path to an input), and
     * whether it ran */
    int *capnode = cap ? malloc((n ? n : 1) * sizeof *capnode) : NULL;   /* (n ≥ 1: a root has a node) */
    bool *runs = cap ? calloc(n, sizeof *runs) : NULL, *ran_k = cap ? calloc(n, sizeof *ran_k) : NULL;
    bool *alone = nleaf ? calloc((size_t)nleaf, sizeof *alone) : NULL;
    leaf_use *luses = NULL;
    size_t nuses = 0, next_use = 0;
    leaf_pending *pend = NULL;
    size_t npend = 0;
    if (!grads || !uses || (cap && (!capnode || !runs || !ran_k)) || (nleaf && !alone)) {
        st = FL_ERR(FL_ENOMEM, "backward: out of memory");
        goto done;
    }
    bool hooked_leaf = false;   /* a leaf with (post-accumulate-)grad hooks: its last use */
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < order[k]->ninputs; i++) {
            const fl_tensor *in = order[k]->inputs[i];
            int c = in && in->grad_fn && fl_node_input_needs_grad(order[k], i) ? map_get(&map, in->grad_fn) : -1;
            if (c >= 0) uses[c]++;
            if (in && !in->grad_fn && leaf_hooked(in) && fl_node_input_needs_grad(order[k], i)) hooked_leaf = true;
        }
    for (int i = 0; i < nleaf && st == FL_OK; i++) {   /* leaf roots: pending where a node takes them too */
        bool used = false;
        for (size_t k = 0; k < n && !used; k++)
            for (int j = 0; j < order[k]->ninputs && !used; j++)
                used = order[k]->inputs[j] == leaf_roots[i] && fl_node_input_needs_grad(order[k], j);
        if (used) { st = pending_add(&pend, &npend, leaf_roots[i], leaf_seeds[i]); hooked_leaf = true; }
        else alone[i] = true;
    }
    if (st != FL_OK) goto done;
    if (cap) {
        for (size_t k = 0; k < n; k++) capnode[k] = -1;
        for (int j = cap->n - 1; j >= 0; j--) {   /* the first of an input listed twice wins */
            const fl_tensor *in = cap->in[j];
            int c = in->grad_fn ? map_get(&map, in->grad_fn) : -1;
            if (c >= 0) capnode[c] = j;
        }
        /* producers come first in order: a node runs when an input it passes a gradient to is captured, or is
         * made by a node that runs or is captured */
        for (size_t k = 0; k < n; k++)
            for (int i = 0; i < order[k]->ninputs && !runs[k]; i++) {
                const fl_tensor *in = order[k]->inputs[i];
                if (!in || !fl_node_input_needs_grad(order[k], i)) continue;
                int c = in->grad_fn ? map_get(&map, in->grad_fn) : -1;
                runs[k] = in->grad_fn ? c >= 0 && (runs[c] || capnode[c] >= 0) : capture_index(cap, in) >= 0;
            }
    }
    for (int r = 0; r < nroots; r++) {   /* the roots' seeds (one node may be several roots') */
        int k = map_get(&map, roots[r]);
        if ((st = accumulate_as(&grads[k], seeds[r], node_takes_dense(order[k]))) != FL_OK) goto done;
    }
    fl_grad_ready_fn hook = cap && cap->out ? NULL : ready_fn;
    void *hook_ud = ready_ud;
    if ((hook || hooked_leaf || cap) && (st = leaf_last_uses(order, n, &luses, &nuses)) != FL_OK) goto done;
    walk_touched = true;
    bool prev_mode = fl_set_grad_enabled(false);   /* backward builds no graph of its own */
    const node_map *prev_map = bw_map;
    const int *prev_uses = bw_uses;
    bw_map = &map;
    bw_uses = uses;
    const uint64_t prev_id = bw_id;
    bw_id = ++bw_count;
    fl_tensor **const prev_grads = bw_grads;
    const fl_node *const prev_node = bw_node;
    bw_grads = cap ? NULL : grads;   /* a capturing walk hands each gradient on as it is: no sums to add into */
    size_t ran = n;   /* order[ran..n-1] have run their backward (and passed their gradients on) */
    for (size_t k = n; k-- > 0 && st == FL_OK;) {
        fl_node *nd = order[k];
        fl_tensor *go = grads[k];
        grads[k] = NULL;
        while (st == FL_OK && next_use < nuses && luses[next_use].k > k)
            st = leaf_final(pend, npend, luses[next_use++].leaf, hook, hook_ud, cap);
        if (st != FL_OK) { fl_tensor_release(go); break; }
        if (!go) { ran = k; continue; }           /* no gradient flowed here (e.g. unused output) */
        fl_tensor *gin[FL_NODE_MAX_INPUTS] = { NULL };
        st = fl_check_interrupt();
        if (st == FL_OK && !fl_tensor_is_contiguous(go) && !fl_tensor_is_dense(go) &&
            (nd->orphan_hooks || nd->owner || (cap && capnode[k] >= 0))) {
            /* an expanded gradient kept for the node (accumulate_node): hooks, retain_grad and a captured input see
             * a real tensor of their own, as before; a dense one (node_takes_dense) is one, as torch's hooks see it */
            fl_tensor *c = NULL;
            st = fl_tensor_to(&c, go, FL_F32);
            fl_tensor_release(go);
            go = c;
        }
        if (st == FL_OK && nd->orphan_hooks) st = hooked_grad(nd->orphan_hooks, NULL, &go);   /* first: older */
        /* retain_grad fills .grad in every walk, fl_autograd_grad's and an inputs= backward's too (torch 2.15's) */
        if (st == FL_OK && nd->owner) st = owner_grad(nd, &go, true);
        if (st == FL_OK && cap && capnode[k] >= 0) {   /* an input's gradient: an fp32 copy of what goes on */
            fl_tensor *c = NULL;
            st = fl_tensor_to(&c, go, FL_F32);   /* a copy (dequantized where a consumer handed over FP8) */
            if (st == FL_OK)
                st = cap->out ? accumulate(&cap->out[capnode[k]], c) : fl_accumulate_grad(cap->in[capnode[k]], c);
            fl_tensor_release(c);
        }
        if (st == FL_OK && cap && !runs[k]) { fl_tensor_release(go); ran = k; continue; }
        uint64_t prof = FL_PROF_BEGIN(nd->name);   /* e.g. "LinearBackward", nested under "backward" */
        if (prof) fl_prof_mark_node(prof, node_counts_flops(nd));
        if (st == FL_OK) st = check_versions(nd);
        if (st == FL_OK && !nd->backward) st = FL_ERR(FL_EINVAL, "%s", SECOND_TIME);   /* (never: busy nodes stay) */
        bw_node = nd;
        if (st == FL_OK) st = nd->backward(nd, go, gin);
        bw_node = NULL;
        if (st == FL_OK && cap) ran_k[k] = true;
        FL_PROF_END(prof);
        fl_tensor_release(go);
        for (int i = 0; i < nd->ninputs; i++) {
            fl_tensor *in = nd->inputs[i], *gi = gin[i];
            if (!gi) continue;
            if (st == FL_OK && fl_node_input_needs_grad(nd, i)) {
                int c = in->grad_fn ? map_get(&map, in->grad_fn) : -1;
                if (!fl_shape_equal(gi->ndim, gi->shape, in->ndim, in->shape))
                    st = FL_ERR(FL_EINVAL, "backward: %s produced a gradient of shape %s for input %d of shape %s",
                                nd->name, fl_shape_str(a, sizeof a, gi->ndim, gi->shape), i,
                                fl_shape_str(b, sizeof b, in->ndim, in->shape));
                else if (cap && (in->grad_fn ? !(runs[c] || capnode[c] >= 0) : capture_index(cap, in) < 0))
                    ;   /* on no path to an input: dropped */
                else if (in->grad_fn) st = accumulate_node(&grads[c], gi, order[c]);
                else if (cap || leaf_hooked(in)) st = pending_add(&pend, &npend, in, gi);
                else st = fl_accumulate_grad(in, gi);
            }
            fl_tensor_release(gi);
        }
        if (st == FL_OK) ran = k;
        while (st == FL_OK && next_use < nuses && luses[next_use].k >= k)
            st = leaf_final(pend, npend, luses[next_use++].leaf, hook, hook_ud, cap);
    }
    /* nodes that received no gradient (`continue` above) still end their leaves' uses */
    while (st == FL_OK && next_use < nuses) st = leaf_final(pend, npend, luses[next_use++].leaf, hook, hook_ud, cap);
    /* a leaf whose first hook came during this backward (from another hook) had no last use listed */
    for (size_t i = 0; st == FL_OK && i < npend; i++)
        st = cap ? leaf_final(pend, npend, pend[i].leaf, NULL, NULL, cap)
                 : pending_flush(pend, npend, pend[i].leaf, NULL);
    for (int i = 0; st == FL_OK && i < nleaf; i++)
        if (alone[i]) st = leaf_root(leaf_roots[i], &leaf_seeds[i]);
    walk_touched = true;
    bw_map = prev_map;
    bw_uses = prev_uses;
    bw_id = prev_id;
    bw_grads = prev_grads;
    bw_node = prev_node;
    fl_set_grad_enabled(prev_mode);
    /* torch frees each node as it runs: after an error the nodes that ran are freed too, so running the backward
     * again is refused instead of adding their gradients into the leaves a second time. Captured (fl_autograd_grad):
     * only the nodes that ran, as torch's, so a later backward can still take the rest. */
    if (!retain_graph)
        for (size_t k = st == FL_OK ? 0 : ran; k < n; k++)
            if (!cap || ran_k[k]) node_clear(order[k]);
done:
    free(luses);
    for (size_t i = 0; i < npend; i++) fl_tensor_release(pend[i].sum);
    free(pend);
    if (grads) for (size_t k = 0; k < n; k++) fl_tensor_release(grads[k]);
    free(grads);
    free(uses);
    free(capnode);
    free(runs);
    free(ran_k);
    free(alone);
    for (size_t k = 0; k < n; k++) { order[k]->busy--; fl_node_release(order[k]); }
    free(order);
    free(map.keys);
    free(map.vals);
    return st;
}

/* fl_backward_many's work, restricted to cap's tensors where cap is not NULL */
static fl_status backward_many(fl_tensor *const *roots, const fl_tensor *const *grads, int nroots, bool retain_graph,
                               const capture_set *cap) {
    FL_PROF_SCOPE("backward");
    walk_touched = false;
    if (nroots < 1) return FL_ERR(FL_EINVAL, "backward: no tensor to start from");
    fl_tensor **seeds = calloc((size_t)nroots, sizeof *seeds), **lseeds = calloc((size_t)nroots, sizeof *lseeds);
    fl_tensor **leaves = calloc((size_t)nroots, sizeof *leaves);
    fl_node **nodes = calloc((size_t)nroots, sizeof *nodes);
    fl_status st = seeds && lseeds && leaves && nodes ? FL_OK : FL_ERR(FL_ENOMEM, "backward: out of memory");
    int nn = 0, nl = 0;
    for (int r = 0; st == FL_OK && r < nroots; r++) {
        fl_tensor *g = NULL;
        if ((st = seed_of(&g, roots[r], grads ? grads[r] : NULL, "backward")) != FL_OK) break;
        if (roots[r]->grad_fn) { nodes[nn] = roots[r]->grad_fn; seeds[nn++] = g; continue; }
        /* a leaf: its gradient is the seed (one listed twice: the sum); left out of inputs=: nothing */
        int i = 0;
        while (i < nl && leaves[i] != roots[r]) i++;
        if (cap && capture_index(cap, roots[r]) < 0) ;
        else if (i < nl) st = accumulate(&lseeds[i], g);
        else { leaves[nl] = roots[r]; lseeds[nl++] = g; g = NULL; }
        fl_tensor_release(g);
    }
    if (st == FL_OK && nn > 0) st = run_graph(nodes, seeds, nn, retain_graph, cap, leaves, lseeds, nl);
    else
        for (int i = 0; st == FL_OK && i < nl; i++) {
            walk_touched = true;
            st = leaf_root(leaves[i], &lseeds[i]);
        }
    for (int r = 0; r < nroots; r++) {
        if (seeds) fl_tensor_release(seeds[r]);
        if (lseeds) fl_tensor_release(lseeds[r]);
    }
    free(seeds); free(lseeds); free(leaves); free(nodes);
    return st;
}

bool fl_autograd_walk_untouched(void) { return !walk_touched; }

fl_status fl_backward(fl_tensor *root, const fl_tensor *grad, bool retain_graph) {
    return backward_many(&root, &grad, 1, retain_graph, NULL);
}

fl_status fl_backward_many(fl_tensor *const *roots, const fl_tensor *const *grads, int nroots, bool retain_graph,
                           fl_tensor *const *inputs, int ninputs) {
    if (!inputs) return backward_many(roots, grads, nroots, retain_graph, NULL);
    if (ninputs < 1) return FL_ERR(FL_EINVAL, "backward: inputs is empty; give the tensors to fill the .grad of");
    for (int j = 0; j < ninputs; j++)
        if (!inputs[j]->requires_grad)
            return FL_ERR(FL_EINVAL, "backward: inputs[%d] does not require grad, so it has no gradient (a leaf: call "
                          ":requires_grad(true) before computing the loss)", j + 1);
    const capture_set cap = { inputs, ninputs, NULL };
    return backward_many(roots, grads, nroots, retain_graph, &cap);
}

fl_status fl_autograd_grad(fl_tensor *const *roots, const fl_tensor *const *grads, int nroots,
                           fl_tensor *const *inputs, int ninputs, bool retain_graph, fl_tensor **out) {
    FL_PROF_SCOPE("autograd_grad");
    walk_touched = false;
    for (int j = 0; j < ninputs; j++) out[j] = NULL;
    if (nroots < 1 || ninputs < 1)
        return FL_ERR(FL_EINVAL, "grad: expected at least one output and one input, got %d and %d", nroots, ninputs);
    for (int j = 0; j < ninputs; j++)
        if (!inputs[j]->requires_grad)
            return FL_ERR(FL_EINVAL, "grad: input %d does not require grad, so it has no gradient (a leaf: call "
                          ":requires_grad(true) before computing the outputs)", j + 1);
    fl_tensor **seeds = calloc((size_t)nroots, sizeof *seeds);
    fl_node **nodes = calloc((size_t)nroots, sizeof *nodes);
    const capture_set cap = { inputs, ninputs, out };
    fl_status st = seeds && nodes ? FL_OK : FL_ERR(FL_ENOMEM, "grad: out of memory");
    int nn = 0;
    for (int r = 0; st == FL_OK && r < nroots; r++) {
        st = seed_of(&seeds[nn], roots[r], grads ? grads[r] : NULL, "grad");
        if (st != FL_OK) break;
        if (roots[r]->grad_fn) { nodes[nn++] = roots[r]->grad_fn; continue; }
        /* a leaf output: its own gradient is its seed, where it is an input too (its hooks are the graph's) */
        int j = capture_index(&cap, roots[r]);
        if (j >= 0) st = accumulate(&out[j], seeds[nn]);
        fl_tensor_release(seeds[nn]);
        seeds[nn] = NULL;
    }
    if (st == FL_OK && nn > 0) st = run_graph(nodes, seeds, nn, retain_graph, &cap, NULL, NULL, 0);
    for (int r = 0; seeds && r < nroots; r++) fl_tensor_release(seeds[r]);
    free(seeds);
    free(nodes);
    /* an FP8 gradient (an MS-AMP weight's) as fp32, what .grad would dequantize to; an input listed twice: the
     * gradient the first got */
    for (int j = 0; st == FL_OK && j < ninputs; j++) {
        if (out[j] && fl_format(out[j]->dtype)->is_fp8) {
            fl_tensor *f = NULL;
            st = fl_tensor_to(&f, out[j], FL_F32);
            fl_tensor_release(out[j]);
            out[j] = f;
        }
        int i = capture_index(&cap, inputs[j]);
        if (i != j) out[j] = fl_tensor_retain(out[i]);
    }
    if (st != FL_OK)
        for (int j = 0; j < ninputs; j++) { fl_tensor_release(out[j]); out[j] = NULL; }
    return st;
}
