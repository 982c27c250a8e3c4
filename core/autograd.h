/* autograd.h — reverse-mode autodiff in the core. Ops record a node on their output when grad mode
 * is on and an input requires grad; fl_backward() orders the graph reachable from the root
 * (topologically) and runs each node's backward once, accumulating into leaf tensors' `grad`.
 * A node keeps what its backward needs (`saved`) — for an FP8 linear that is the FP8 input and
 * weight, which is where FP8 saves activation memory (docs/fp8-spec.md §2).
 * Ownership: an output tensor owns one reference to its grad_fn node; a node owns one reference
 * to each input and saved tensor. Inputs never point at outputs, so there are no cycles. */
#ifndef FL_AUTOGRAD_H
#define FL_AUTOGRAD_H

#include "tensor.h"

#define FL_NODE_MAX_INPUTS 4
#define FL_NODE_MAX_SAVED 10

typedef struct fl_node fl_node;
/* grad_out has the output's shape (fp32, contiguous; for the activations' nodes autograd.c's node_takes_broadcast
 * names, a whole sum's or mean's gradient may come as one element expanded, strides 0; for the nodes its
 * node_takes_dense names, a dense one that is not contiguous, e.g. channels_last, as it came). Write one new tensor
 * (refcount 1) per input into grad_in[i] with that input's shape, or leave NULL when inputs[i] needs no gradient
 * (check fl_node_input_needs_grad). The engine releases them after accumulation. */
typedef fl_status (*fl_backward_fn)(fl_node *node, const fl_tensor *grad_out, fl_tensor **grad_in);

struct fl_node {
    int refcount;
    const char *name;                         /* "MatmulBackward", shown by grad_fn printing */
    fl_backward_fn backward;
    int ninputs;
    fl_tensor *inputs[FL_NODE_MAX_INPUTS];    /* retained */
    fl_tensor *saved[FL_NODE_MAX_SAVED];      /* retained; NULL when unused */
    /* storage versions of inputs and saved tensors when the node took them: an in-place write between the
     * forward and the backward (x[i] = v, copy_, an optimizer step) is refused, as torch's version counter */
    uint64_t input_version[FL_NODE_MAX_INPUTS], saved_version[FL_NODE_MAX_SAVED];
    /* bit i: the backward reads inputs[i]'s data (not only its shape), so a write to it is refused; the saved
     * tensors are always checked. Most backwards read what they saved: torch refuses only what is read. */
    unsigned inputs_read;
    /* bit i: inputs[i] required grad when the node was made. Only those take a gradient, as torch's graph records
     * them (a leaf given requires_grad after the forward gets none; the forward saved nothing for it) */
    unsigned inputs_grad;
    /* bit i of saved_for[j]: the backward reads saved[j]'s values only for input i's gradient, so a write to it is
     * refused only when such an input takes one (a*b keeps a for b's gradient); 0: always read */
    unsigned char saved_for[FL_NODE_MAX_SAVED];
    double dargs[8];                          /* op parameters (eps, p, scale, ...) */
    int64_t iargs[8];                         /* op parameters (dims, flags, ...) */
    void *ctx;                                /* op-specific extra state, freed by ctx_free */
    void (*ctx_free)(void *ctx);
    /* not owned: the tensor this node made that asked for its gradient (t:retain_grad(), gradient hooks); the
     * tensor holds the node and clears this when it is freed (fl_tensor_release), so it never dangles. NULL: none */
    struct fl_tensor *owner;
    /* the gradient hooks of an owner that was freed before the backward (a Lua box collected): they stay with the
     * node and still run, as torch's hooks live on the grad_fn; owned (released with the node's inputs) */
    struct fl_grad_hooks *orphan_hooks;
    int busy;                                 /* backwards running through this node now (fl_backward) */
};

/* Grad mode (thread-local; on by default). */
bool fl_grad_enabled(void);
bool fl_set_grad_enabled(bool on);            /* returns the previous mode */
/* True when grad mode is on and any of the n tensors (NULL entries ignored) requires grad. */
bool fl_any_requires_grad(int n, const fl_tensor *const *ts);

/* A node with refcount 1 whose inputs are retained. */
fl_status fl_node_new(fl_node **out, const char *name, fl_backward_fn fn, int ninputs, const fl_tensor *const *inputs);
void fl_node_save(fl_node *n, int slot, const fl_tensor *t);   /* retains t (NULL clears) */
/* inputs[i] required grad when n was made and still does (a leaf's flag turned off since: no gradient, as torch) */
bool fl_node_input_needs_grad(const fl_node *n, int i);
/* Replace input i, when it is a non-leaf or a tensor that takes no gradient here, by a header without
 * storage that keeps only what the engine reads (shape, requires_grad, grad_fn): the node then no
 * longer holds the input's data alive. For ops whose backward reads none of that input's values (the
 * FP8 linear keeps its own FP8 copy). No-op for a leaf that takes a gradient. */
fl_status fl_node_input_stub(fl_node *n, int i);
/* After the saves: drop saved[j] when every input its saved_for names takes no gradient here (inputs_grad clear: it
 * never will, as torch's graph), and stub input i (-1: none) whose values the backward reads only through saved[j]
 * (h * c with c constant keeps c alone). The backward then reads input i's shape, never saved[j]. */
fl_status fl_node_drop_unread(fl_node *n, int j, int i);
void fl_node_release(fl_node *n);
/* out->grad_fn = node (takes over the caller's reference), out->requires_grad = true. */
void fl_autograd_attach(fl_tensor *out, fl_node *node);
/* Record an op: a new node over the n inputs, attached to *out; *np (if np) = the node, for the
 * caller to save what backward needs. On failure *out is released and set to NULL. */
fl_status fl_autograd_record(fl_tensor **out, fl_node **np, const char *name, fl_backward_fn fn, int n,
                             const fl_tensor *const *ins);
/* fl_autograd_record for an op of one input x whose backward reads x's shape alone (x stubbed) and its own ctx,
 * which the node then owns (ctx_free(ctx) when it goes, and at once when recording fails; *out released then). */
fl_status fl_autograd_record_ctx(fl_tensor **out, const char *name, fl_backward_fn fn, const fl_tensor *x, void *ctx,
                                 void (*ctx_free)(void *));
/* t's data under a new header (no copy) whose history leads to s alone, whose gradient from it is zeros of s's shape:
 * a tensor that stands for t in the graph and makes the backward reach s after it (fp8.autograd.Function's results,
 * which must come back with the forward's bits, and the scalar that ties its arguments: lua/fp8/autograd_function.lua).
 * The link keeps s's shape, not its data (unless s is a leaf). Without grad mode, or where s does not require grad,
 * t detached. */
fl_status fl_autograd_link(fl_tensor **out, const fl_tensor *t, const fl_tensor *s);
/* Save t in slot through a history-free header (fl_tensor_detach): for an op's own output, which
 * owns the node, so saving the output itself would make a reference cycle. */
fl_status fl_node_save_detached(fl_node *n, int slot, const fl_tensor *t);

/* During fl_backward, inside a node's backward: whether node n is, in this backward, the only consumer of the
 * output that its input i came from (that output's gradient is then n's contribution alone). False for a leaf,
 * an input without history, or outside a backward. Where it is true, a backward may hand that input an FP8
 * gradient (a per-tensor E4M3/E5M2 tensor with its scale) instead of an fp32 one: the engine passes it to the
 * producer as it is, whose backward must take it (fl_fp8_linear's does: core/fp8_linear.c). */
bool fl_autograd_sole_consumer(const fl_node *n, int i);

/* During fl_backward, inside node n's backward: the engine's running sum of the gradient of n's input i, where n's
 * backward may add its own contribution into it in place rather than hand a new tensor over (sparing the engine's
 * add a pass over both): an fp32 contiguous tensor of the input's shape and device that only the engine holds,
 * made by the input's other consumers that ran before n. A backward that adds into it leaves grad_in[i] NULL; the
 * sum is then exactly what the engine's add (sum + grad_in[i], one fp32 add an element) would have made. NULL
 * where there is no such sum: a leaf, no consumer ran yet, the sum shared or of another dtype, fl_autograd_grad's
 * walk (it captures gradients), or outside a backward. */
fl_tensor *fl_autograd_grad_sum(const fl_node *n, int i);
/* During fl_backward: a number no other backward on this thread has had (nested ones included), so a backward can
 * tell state it left in a node for a later one from state an earlier, unfinished backward left there. 0 outside. */
uint64_t fl_autograd_backward_id(void);
/* How many backwards have started on this thread (nested ones included): a step can tell whether a backward ran
 * since an earlier one (the Accelerator counts one training step for the optimizers stepped after one backward). */
uint64_t fl_autograd_backwards_started(void);
/* Backward from root. grad NULL means ones (root must have one element; error otherwise). Frees the
 * graph's saved tensors afterwards unless retain_graph (a second backward then errors clearly); on an error,
 * those of the nodes that ran. */
fl_status fl_backward(fl_tensor *root, const fl_tensor *grad, bool retain_graph);
/* torch.autograd.backward: one backward from several roots (grads[r] seeds roots[r], or ones for a one-element root
 * where grads or grads[r] is NULL), each node run once with the sum of what reaches it, each leaf's hooks once with
 * its whole gradient. inputs NULL: every leaf's .grad, as fl_backward. Else backward's inputs= (torch's): only the
 * nodes on a path from a root to inputs[0..ninputs) run (each must require grad; ninputs ≥ 1), and only their .grad is
 * filled: a leaf's with its hooks, post-accumulate-grad hooks and the grad-ready hook, a result's (a tensor an op
 * made) as retain_grad would; no other tensor's .grad, retain_grad or hooks off that path. The nodes that ran are
 * freed (unless retain_graph). */
fl_status fl_backward_many(fl_tensor *const *roots, const fl_tensor *const *grads, int nroots, bool retain_graph,
                           fl_tensor *const *inputs, int ninputs);
/* torch.autograd.grad: the gradients of roots[0..nroots) (each seeded with grads[r], or ones for a one-element root
 * where grads or grads[r] is NULL) with respect to inputs[0..ninputs) (each must require grad), into out[j] (new
 * references, fp32; NULL where no gradient reaches inputs[j]). No tensor's .grad changes and only the nodes on a
 * path from a root to an input run; the hooks of the tensors on it run (an input leaf's with its summed gradient);
 * no post-accumulate-grad, retain_grad or grad-ready hook. The graph is freed as fl_backward frees it, but only the
 * nodes that ran. On an error every out[j] is NULL. */
fl_status fl_autograd_grad(fl_tensor *const *roots, const fl_tensor *const *grads, int nroots,
                           fl_tensor *const *inputs, int ninputs, bool retain_graph, fl_tensor **out);
/* After fl_backward, fl_backward_many or fl_autograd_grad failed on this thread: true where the walk failed before it
 * changed anything (no node's backward, hook or .grad reached; the graph as it was), so the same call can be made
 * again (the binding's retry after a collection, FL_LCALL's rule); false once a node ran: its gradients reached the
 * leaves and the nodes that ran were freed, and a second walk would add them twice or find the graph freed. */
bool fl_autograd_walk_untouched(void);
/* Grad-ready hook (data-parallel reducers, core/ddp.h): during fl_backward, fn(leaf, ud) is called once
 * per leaf that requires grad, as soon as no node left in this backward can add to its gradient
 * (leaf->grad is then final for this backward; it may be NULL when no gradient flowed). Thread-local;
 * fn NULL clears it. A non-OK status from fn stops the backward with that status. */
typedef fl_status (*fl_grad_ready_fn)(fl_tensor *leaf, void *ud);
void fl_autograd_set_grad_ready_hook(fl_grad_ready_fn fn, void *ud);
/* Leaves only: error on a non-leaf ("only leaf tensors ..."), and on non-float dtypes. */
fl_status fl_tensor_set_requires_grad(fl_tensor *t, bool on);
/* torch's retain_grad: a backward also fills t.grad where an op made t (it accumulates, as a leaf's). A no-op on a
 * leaf (it has one anyway); refused on a tensor that does not require grad. */
fl_status fl_tensor_retain_grad(fl_tensor *t);
/* Gradient hooks (torch's Tensor.register_hook): fn(ud, grad, &out) runs when a backward has t's gradient, before
 * it goes on (a leaf: summed over all its uses in this backward, before it is added into .grad; a tensor an op made:
 * before that op's backward reads it, and before retain_grad keeps it). *out: a replacement (a new reference, fp32,
 * the gradient's shape and device) or NULL to keep it; a non-OK status stops the backward. Hooks run in the order
 * added; one removed while a backward runs is not called after. The list is shared by the tensor and whoever added
 * to it (a handle: fl_grad_hooks_retain), so a hook can be removed after the tensor is gone. ud_free(ud) runs when
 * a hook is removed or its list freed. */
typedef fl_status (*fl_grad_hook_fn)(void *ud, const fl_tensor *grad, fl_tensor **out);
/* Post-accumulate-grad hooks (torch's Tensor.register_post_accumulate_grad_hook): fn(ud, t) runs once per backward
 * that added a gradient into leaf t's .grad, after the last addition (and after t's gradient hooks), before the
 * grad-ready hook: under data parallelism it sees this process's gradient, before the all-reduce, as torch's under
 * DDP. A non-OK status stops the backward. */
typedef fl_status (*fl_post_grad_hook_fn)(void *ud, fl_tensor *t);
/* One hook: fn (a gradient hook) or post (a post-accumulate-grad hook), as the list it is in holds. removed: taken
 * out while its list's hooks were being called (running > 0): it stays, held, until that call ends (torch calls
 * the hooks of a snapshot of the list, so one removed by an earlier hook still runs in that call). */
typedef struct fl_grad_hook {
    fl_grad_hook_fn fn; fl_post_grad_hook_fn post; void *ud; void (*ud_free)(void *ud); uint64_t id; bool removed;
} fl_grad_hook;
typedef struct fl_grad_hooks { int refcount, running; size_t n, cap; fl_grad_hook *v; } fl_grad_hooks;
/* Adds a hook to t (which must require grad: refused otherwise, as torch's); *id identifies it for removal, *list
 * (a new reference, when list is not NULL) is t's hook list. On failure ud_free(ud) has run. */
fl_status fl_tensor_add_grad_hook(fl_tensor *t, fl_grad_hook_fn fn, void *ud, void (*ud_free)(void *), uint64_t *id,
                                  fl_grad_hooks **list);
/* Adds a post-accumulate-grad hook to leaf t (refused on a tensor an op made, and on one that does not require
 * grad, as torch's); *id and *list as fl_tensor_add_grad_hook's (*list is t's post-accumulate-grad list). */
fl_status fl_tensor_add_post_accumulate_grad_hook(fl_tensor *t, fl_post_grad_hook_fn fn, void *ud,
                                                  void (*ud_free)(void *), uint64_t *id, fl_grad_hooks **list);
/* A host language whose collector cannot see the core's references (Lua) may hold a hook's function only through
 * the tensor's handle while nothing else holds the tensor, so that a function that refers to its own tensor is
 * collected with it (torch's tp_traverse visits a tensor's hooks only while Python owns it alone). shared(t, true)
 * runs, on the thread that registered it, when a tensor with hooks (or the grad_fn its hooks run at) gains a second
 * reference: the host must hold the functions strongly before it returns (it may not allocate or raise).
 * shared(t, false) runs when it is back to one: the host may check later whether they can be weak again. */
typedef void (*fl_hooks_shared_fn)(fl_tensor *t, bool shared);
void fl_set_hooks_shared(fl_hooks_shared_fn fn);
void fl_hooks_shared_note(fl_tensor *t, bool shared);   /* tensor.c and the node code call it */
/* Removes hook id from the list (false: it is not there, already removed). While the list's hooks are being called
 * the hook is marked removed and let go (ud_free) when that call ends: it still runs in it, as torch's. */
bool fl_grad_hooks_remove(fl_grad_hooks *h, uint64_t id);
fl_grad_hooks *fl_grad_hooks_retain(fl_grad_hooks *h);
void fl_grad_hooks_release(fl_grad_hooks *h);
/* Same data, no history. */
fl_status fl_tensor_detach(fl_tensor **out, const fl_tensor *t);
/* Drops t->grad (set to NULL) — the PyTorch set_to_none=True behaviour. */
void fl_tensor_zero_grad(fl_tensor *t);
/* t->grad += g (allocated on first use, fp32, t's shape; g is summed over broadcast dims by the caller). */
fl_status fl_accumulate_grad(fl_tensor *t, const fl_tensor *g);
/* Sum g down to `shape` (undo broadcasting): used by binary-op backwards. */
fl_status fl_sum_to_shape(fl_tensor **out, const fl_tensor *g, int ndim, const int64_t *shape);

/* Autocast (mixed precision for GEMMs): FL_F32 = off, FL_BF16 or FL_F16 = GEMM inputs rounded to that
 * dtype, fp32 accumulation and fp32 outputs; master weights stay fp32. Thread-local. */
fl_dtype fl_autocast_dtype(void);
fl_dtype fl_set_autocast_dtype(fl_dtype dt);  /* returns the previous one; error-free, validates in the binding */
/* A GEMM's (linear, matmul) dtypes under autocast, for operands of dtypes a and b: true, with *cdt the autocast
 * dtype every floating operand is rounded to (fp32, bf16 or fp16 alike, as torch's autocast casts them all), and
 * *odt fp32 — or the autocast dtype when both operands already are it; false when autocast is off or an operand
 * is not one of those three (FP8: its own path). */
bool fl_autocast_gemm(fl_dtype a, fl_dtype b, fl_dtype *cdt, fl_dtype *odt);

#endif
