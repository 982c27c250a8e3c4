-- help.lua — help() for the REPL and scripts: an overview of the fp8 API and one entry per
-- function, kept as data ({name, sig, doc, section}) so other modules can add their own.
local M = {}

M.entries = {}   -- in insertion order
local by_name = {}

-- add{name=, sig=, doc=, section=}; a later entry with the same name replaces the earlier one.
function M.add(e)
  assert(type(e) == "table" and type(e.name) == "string",
         "help.add expects a table {name=..., sig=..., doc=...}, got " .. type(e))
  e.section = e.section or "Other"
  if by_name[e.name] then
    for i, old in ipairs(M.entries) do if old.name == e.name then M.entries[i] = e end end
  else
    M.entries[#M.entries + 1] = e
  end
  by_name[e.name] = e
  return e
end

-- adder(section) -> add(name, sig, doc): adds entries to one section (what a module registers its API with).
function M.adder(section)
  return function(name, sig, doc) return M.add { section = section, name = name, sig = sig, doc = doc } end
end

local sections = { "Formats", "Tensors", "Quantization", "Training", "Accelerator & recipes", "Checkpoints", "REPL", "Other" }
M.sections = sections

-- Modules that load on first use add their entries then; help() loads them first so that the
-- overview and lookups see everything.
local LAZY = { "fp8.nn", "fp8.optim", "fp8.recipes", "fp8.accelerator", "fp8.plot", "fp8.hist",
  "fp8.executable_batch_size" }
local function load_lazy()
  for _, m in ipairs(LAZY) do pcall(require, m) end
end

local function add_all(list) for _, e in ipairs(list) do M.add(e) end end

add_all {
  { section = "Formats", name = "formats", sig = "fp8.formats()",
    doc = "fp8.formats(true) returns the traits instead of printing them.\n"
       .. "Prints the FP8 formats side by side: E4M3 (OCP E4M3FN, max 448, no inf) and E5M2\n"
       .. "(IEEE-like, max 57344, ±inf), with bias, smallest normal and subnormal." },
  { section = "Formats", name = "encode", sig = "fp8.encode(x, fmt [, {saturate=true}]) -> byte",
    doc = "Rounds the number x to the nearest FP8 value (ties to even) and returns its byte.\n"
       .. "fmt is \"e4m3\" or \"e5m2\". saturate=true (default) clamps overflow to ±max as training\n"
       .. "casts do; saturate=false follows IEEE/ml_dtypes (E5M2 → inf, E4M3 → NaN 0x7F)." },
  { section = "Formats", name = "decode", sig = "fp8.decode(byte, fmt) -> number",
    doc = "The exact value of an FP8 byte (0..255) in format fmt." },
  { section = "Formats", name = "explain", sig = "fp8.explain(x, fmt [, {saturate=true, quiet=false}])",
    doc = "Shows how x is stored: sign, exponent and mantissa bits, the value it rounds to and\n"
       .. "the rounding error; tells when x overflows or underflows. {quiet=true} returns the facts without printing;\n"
       .. "{saturate=false} explains the IEEE overflow policy." },
  { section = "Tensors", name = "tensor",
    sig = "fp8.tensor(table | {{...}, ...} [, dtype | {dtype=}]) -> Tensor (on the CPU: :to(\"cuda\") moves it)",
    doc = "A tensor (fp32 unless given) from a (nested) Lua table of numbers." },
  { section = "Tensors", name = "zeros", sig = "fp8.zeros{d1, d2, ...} [, dtype | {dtype=, device=}] -> Tensor",
    doc = "A tensor of zeros of the given shape (a table, or arguments: fp8.zeros(2, 3)); fp32 unless given." },
  { section = "Tensors", name = "randn", sig = "fp8.randn{d1, d2, ...} [, dtype | {dtype=, device=}] -> Tensor",
    doc = "Normal(0, 1) samples; reproducible after fp8.manual_seed(n)." },
  { section = "Tensors", name = "randint",
    sig = "fp8.randint([low=0,] high, {d1, d2, ...} [, dtype | {dtype=, device=}]) -> Tensor",
    doc = "Integers uniform in [low, high) (torch's randint; fp32 values unless given, each exact in the dtype);\n"
       .. "reproducible after fp8.manual_seed(n). The shape is a table: the numbers before it are the bounds.\n"
       .. "fp8.randint(V, {B, T}) draws token ids; fp8.randperm(n) is 0 .. n-1 in a random order." },
  { section = "Tensors", name = "manual_seed", sig = "fp8.manual_seed(n)",
    doc = "Seeds the random generator: same seed, same script, same numbers." },
  { section = "Tensors", name = "get_rng_state", sig = "fp8.get_rng_state() -> string / fp8.set_rng_state(s) / fp8.initial_seed()",
    doc = "torch's: the generator's state (32 hex digits: seed, counter; torch's is a ByteTensor), which set_rng_state\n"
       .. "puts back exactly (what acc:save_state keeps in random_states_<rank>.json); initial_seed() is the seed\n"
       .. "manual_seed or set_seed last set." },
  { section = "Tensors", name = "get_math_random_state",
    sig = "fp8.get_math_random_state() -> string / fp8.set_math_random_state(s)",
    doc = "Lua's own math.random state (Python's random.getstate/setstate): xoshiro256**'s four words as 64 hex\n"
       .. "digits, put back exactly by set_math_random_state; acc:save_state keeps it per process beside fp8's\n"
       .. "generator. fp8.set_seed seeds math.random too; fp8.manual_seed does not (torch's)." },
  { section = "Tensors", name = "Tensor:matmul", sig = "x:matmul(w) -> Tensor",
    doc = "Matrix product with fp32 accumulation. Arithmetic works with + - * / ^ and :abs(),\n"
       .. ":neg(), :exp(), :log(), :sqrt(), :sign(), :tanh(), :sigmoid(), :max(), :item(), :numel(), :shape();\n"
       .. "the operators as methods: :add(y), :sub(y), :mul(y), :div(y), :pow(y), and fp8.pow(a, b) (a number for a or b)." },
  { section = "Tensors", name = "Tensor:atan2", sig = "y:atan2(x) / a:fmod(b) / a:remainder(b) / a % b",
    doc = "torch's: the angle of (x, y) in (-pi, pi] (in double, rounded once); C's fmod, exact, with the dividend's\n"
       .. "sign; remainder (and Lua's %, as Python's and torch's %) with the divisor's sign. Broadcast, a number\n"
       .. "for either operand; differentiable (atan2: x/(x²+y²) and -y/(x²+y²); fmod and remainder: 1 for the\n"
       .. "dividend, -trunc(a/b) and -floor(a/b) for the divisor). Function forms fp8.atan2, fp8.fmod,\n"
       .. "fp8.remainder." },
  { section = "Tensors", name = "Tensor:hypot",
    sig = "x:hypot(y) / :logaddexp2(y) / :floor_divide(y) / :true_divide(y) / :copysign(y) / :float_power(e) / "
       .. ":heaviside(values) / :frac() / :sinc() / :signbit() / :sgn() / :rad2deg() / :deg2rad()",
    doc = "torch's, with its values at the edges: hypot without overflow in the squares, correctly rounded on fp32\n"
       .. "(its gradient x/h right for every finite pair, subnormal and huge ones too, where torch's is off; 0 at\n"
       .. "(0, 0)); log2(2^x + 2^y);\n"
       .. "floor_divide from fmod (torch's rounding; x/0 where y is 0); copysign by the sign bit (-0 counts);\n"
       .. "float_power in double, rounded to fp32; heaviside 0/values/1; frac x - trunc(x); sinc sin(pi x)/(pi x)\n"
       .. "(its Taylor polynomial near 0, exact gradients there). Differentiable where torch's are; heaviside,\n"
       .. "floor_divide and signbit are not (torch's neither). Function forms fp8.hypot(x, y), ..." },
  { section = "Tensors", name = "Tensor:nansum",
    sig = "x:nansum([dim [, keepdim]]) / :nanmean(...) / :std_mean([dim] [, {correction=, keepdim=}]) / "
       .. ":var_mean(...) / :dist(y [, p=2]) / :renorm(p, dim, maxnorm)",
    doc = "torch's: sums and means of the elements that are not NaN; the std (var) and the mean as two results;\n"
       .. "the p-norm of x - y (any p but NaN, as x:norm's); each slice along dim with a p-norm over maxnorm\n"
       .. "scaled to it (maxnorm / (norm + 1e-7), differentiable through the norm as torch's; x of 2 or more\n"
       .. "dims, as torch's). Function forms fp8.nansum, ..." },
  { section = "Tensors", name = "Tensor:rot90",
    sig = "x:rot90([k=1 [, dims={1, 2}]]) / :fliplr() / :flipud() / :atleast_1d() / :atleast_2d() / :atleast_3d() / "
       .. ":broadcast_to(shape) / :diff([n [, dim [, {prepend=, append=}]]]) / :take(index) / "
       .. ":take_along_dim(indices [, dim]) / :kron(y) / :inner(y) / :cross(y [, dim])",
    doc = "torch's arrangements and products, differentiable: quarter turns; flips; at least n dims; a broadcast\n"
       .. "view; the n-th forward difference; elements at flat positions (negative from the end); gather with\n"
       .. "broadcasting; the Kronecker product; sums over the last dims; the 3-vector cross product (by default\n"
       .. "along the first dim of size 3). Function forms fp8.rot90(x, ...), ..." },
  { section = "Tensors", name = "hstack",
    sig = "fp8.hstack(tensors) / vstack / dstack / column_stack / broadcast_tensors(...) / meshgrid(... [, "
       .. "{indexing=\"ij\"}]) / cartesian_prod(...) / block_diag(...) / triu_indices(row, col [, offset]) / "
       .. "tril_indices(...)",
    doc = "torch's: join along the 2nd (1st for 1-d), 1st or 3rd dim after atleast_1d/2d/3d, or as columns;\n"
       .. "expand to one shape; coordinate grids (\"xy\": numpy's order); every combination as rows; the block\n"
       .. "diagonal matrix; the [2, n] 0-based positions of a triangle (fp32; torch's are int64)." },
  { section = "Tensors", name = "Tensor:median",
    sig = "x:median([dim [, keepdim]]) / :kthvalue(k [, dim [, keepdim]]) / :quantile(q [, dim [, {keepdim=, "
       .. "interpolation=}]]) / :msort() / :logcumsumexp(dim) / :cummax(dim) / :cummin(dim) / :cov([{correction=}]) / "
       .. ":corrcoef() / :tensordot(y [, dims]) / :bernoulli()",
    doc = "torch's: the lower median (NaN where a NaN is) and its index; the k-th smallest; quantiles with\n"
       .. "torch's five interpolations; a sort along dim 1; log of running sums of exp (a scan of logaddexp:\n"
       .. "stable); running max/min with their indices (the latest of equals); covariance and correlation of the\n"
       .. "rows; contraction over dims; 0/1 draws with x's probabilities. Indices are 0-based fp32; values that\n"
       .. "select an element pass their gradient to it. Function forms fp8.median(x, ...), ..." },
  { section = "Tensors", name = "cdist",
    sig = "fp8.cdist(x1, x2 [, p=2]) / searchsorted(sorted, values [, {right=, side=}]) / bucketize(input, "
       .. "boundaries [, {right=}]) / bincount(input [, {weights=, minlength=}]) / isin(elements, test [, "
       .. "{invert=}]) / unique(input [, {sorted=, return_inverse=, return_counts=}]) / logspace(start, end, steps "
       .. "[, {base=10, dtype=, device=}])",
    doc = "torch's: pairwise p-norm distances (computed directly; a zero distance's gradient 0; p = 0 counts the\n"
       .. "nonzero coordinates (NaN where one is NaN), its gradient zeros; no coordinates: 0; p = math.huge gives g·sign(d) to each tied largest |d|, as\n"
       .. "torch's cdist, where x:norm(math.huge) splits g among the ties); insertion\n"
       .. "positions by binary search; counts of whole numbers; membership; the distinct values ascending (with the\n"
       .. "inverse and counts as asked; sorted=false keeps the order of first appearance; dim is refused);\n"
       .. "base^linspace. The searches and counts carry no gradient." },
  { section = "Tensors", name = "set_printoptions", sig = "fp8.set_printoptions{precision=, threshold=, edgeitems=, linewidth=}",
    doc = "How tensors print (torch's names): decimals, the element count past which a print is summarised,\n"
       .. "the elements kept at each end, the columns a row wraps at. Returns the previous options." },
  { section = "Tensors", name = "Tensor:eq", sig = "x:eq(y) / :ne / :lt / :le / :gt / :ge -> Tensor",
    doc = "Elementwise comparison with a tensor (broadcast) or a number: 1 where true, 0 where false, in\n"
       .. "the operands' dtype; no gradient. x:argmax(2):eq(labels):sum():item() counts correct predictions." },
  { section = "Tensors", name = "where", sig = "fp8.where(cond, a, b) -> Tensor;  x:masked_fill(mask, value)",
    doc = "a where cond is nonzero, b elsewhere (tensors or numbers, broadcast): a selection, so an inf or NaN\n"
       .. "in the branch not taken stays out. masked_fill puts value where mask is nonzero (attention masks)." },
  { section = "Tensors", name = "einsum",
    sig = "fp8.einsum(equation, a, b, ...) / fp8.einsum(equation, {a, b, ...}) -> Tensor",
    doc = "torch.einsum: \"ij,jk->ik\" (a matmul), \"bhqd,bhkd->bhqk\" (attention scores), \"ii\" (the trace),\n"
       .. "\"...ij,...jk\" (\"...\" broadcast from the right). Subscripts a-z and A-Z, spaces ignored; without \"->\"\n"
       .. "the output is \"...\" and the subscripts seen once, A-Z before a-z; a \"...\" left out of an explicit\n"
       .. "output is summed. Differentiable: views, sums and bmm, operands contracted left to right." },
  { section = "Tensors", name = "Tensor:clamp", sig = "x:clamp(min, max) / :clamp_min(min) / :clamp_max(max) / x:maximum(y) / x:minimum(y) -> Tensor",
    doc = "Bounds by numbers or tensors; NaN stays NaN. The gradient passes where x is within the bounds\n"
       .. "(clamp) or goes to the larger / smaller operand (half each on a tie)." },
  { section = "Quantization", name = "Tensor:quantize",
    sig = "x:quantize(fmt [, {scale=s | amax=a, margin=m, axis=d, saturate=true}]) -> Tensor",
    doc = "Casts to FP8 with a scale: given, or fp8_max / amax / 2^margin from the given or the\n"
       .. "tensor's own amax; axis=d keeps one scale per index of dim d (axis=1 on a matrix: per row).\n"
       .. "The result carries scale_inv: value = decode(byte) * scale_inv." },
  { section = "Quantization", name = "Tensor:dequantize", sig = "q:dequantize() -> Tensor",
    doc = "Back to fp32: decode(byte) * scale_inv." },
  { section = "Quantization", name = "Tensor:to", sig = "x:to(dtype | device) -> Tensor",
    doc = "Converts between \"fp32\", \"bf16\" and \"fp16\" (round to nearest even). FP8 needs a\n"
       .. "scale: use x:quantize(\"e4m3\"); an FP8 tensor's :to(\"fp32\") dequantizes. x:to(\"cuda\") /\n"
       .. "x:to(\"cpu\") copy to a device (see Tensor:cuda). A dense permuted tensor (channels_last, a\n"
       .. "permute) keeps its strides, as torch's preserve_format (so do clone and the elementwise ops)." },
  { section = "Tensors", name = "cuda", sig = "fp8.cuda.is_available() / device_count() / synchronize() / memory_allocated()",
    doc = "The GPU: is_built(), is_available(), device_count(), unavailable_reason(), synchronize() (wait for\n"
       .. "queued work, e.g. before reading a clock), memory_allocated(), max_memory_allocated(),\n"
       .. "reset_peak_memory_stats(), memory_reserved(), max_memory_reserved(), empty_cache() (without a\n"
       .. "GPU, as torch's: the counters read 0, empty_cache does nothing, synchronize raises why).\n"
       .. "fp8.Accelerator uses the GPU when is_available() (cpu=true keeps the CPU). docs/cuda.md tells\n"
       .. "what runs there and how it is tested." },
  { section = "Tensors", name = "Tensor:cuda", sig = "x:cuda() / x:cpu() / x:move_(device) -> Tensor",
    doc = "A copy on the GPU / on the CPU (x itself when already there; FP8 keeps bytes and scales;\n"
       .. "gradients flow back). x:move_(\"cuda\") moves x's own data (and .grad) in place, as\n"
       .. "Module:to does. Factories take {dtype=, device=}: fp8.zeros({2, 3}, {device=\"cuda\"})." },
  { section = "Formats", name = "format", sig = "fp8.format(name) -> table / fp8.dtype_names() / fp8.is_nan_code(byte, fmt)",
    doc = "Traits of one dtype: name, bits, exp_bits, mantissa_bits, bias, max, min_normal,\n"
       .. "min_subnormal, has_inf, nan_codes. Names: fp32, bf16, fp16, e4m3, e5m2 (and aliases).\n"
       .. "dtype_names() lists those five names (fp8.dtype_choices: the same as one string); is_nan_code(byte, fmt)\n"
       .. "tells whether a byte is one of the FP8 format's NaN codes." },
  { section = "Tensors", name = "ones", sig = "fp8.ones{d1, ...} / fp8.full(shape, v) / fp8.empty(shape)",
    doc = "Tensors filled with 1, with v, or uninitialised. A trailing dtype (\"bf16\") picks the dtype." },
  { section = "Tensors", name = "arange", sig = "fp8.arange(n) | fp8.arange(a, b [, step])",
    doc = "Evenly spaced values in [a, b) (or [0, n))." },
  { section = "Tensors", name = "rand", sig = "fp8.rand{d1, ...} [, dtype | {dtype=, device=}] -> Tensor",
    doc = "Uniform [0, 1) samples from the seeded Philox generator." },
  { section = "Tensors", name = "Tensor:shape", sig = "x:shape() / x:size(d) / x:dim() / x:numel() / x:dtype()",
    doc = "Shape as a list, one size (1-based d), number of dims, element count, dtype name." },
  { section = "Tensors", name = "Tensor:view", sig = "x:view(d1, ...) / x:reshape(...) / x:transpose(a, b) / x:t()",
    doc = "Views share storage (-1 infers a size; view needs a compatible layout, reshape copies when\n"
       .. "it must). Dims are 1-based; negative dims count from the end. x:contiguous() packs a view." },
  { section = "Tensors", name = "Tensor:get", sig = "x[i] / x:get{i, j} / x:set({i, j}, v) / x:item() / x:totable() / x:tolist()",
    doc = "1-based indexing (negative from the end): x[i] is a row view (or a number for 1-D).\n"
       .. "item() reads a one-element tensor; totable() (alias tolist()) gives nested Lua tables." },
  { section = "Tensors", name = "Tensor:sum", sig = "x:sum([dim [, keepdim]]) / :mean / :max / :min / :amax / :abs()",
    doc = "Reductions over everything or one dim (sum and mean: or a list of dims, {1, 3}; sums accumulate in\n"
       .. "double). amax = max |x|, the FP8 sense (torch's amax is max x)." },
  { section = "Tensors", name = "cat", sig = "fp8.cat({a, b, ...} [, dim=1])",
    doc = "cat joins tensors along dim (the other dims equal; mixed dtypes give fp32; a 1-d empty tensor beside\n"
       .. "others is left out, as torch's); stack puts tensors of one shape along a new dim. Differentiable; FP8\n"
       .. "tensors must be dequantized first." },
  { section = "Tensors", name = "stack", sig = "fp8.stack({a, b, ...} [, dim=1])",
    doc = "Tensors of one shape along a new dim (torch.stack); see help(\"cat\")." },
  { section = "Tensors", name = "Tensor:sort",
    sig = "local v, i = x:sort([dim=-1 [, descending=false [, stable=false]]]) / x:argsort(...) / "
       .. "x:topk(k [, dim=-1 [, largest=true [, sorted=true]]])",
    doc = "torch's ordering along dim: the values (x's dtype, gradients flow back to their positions) and their\n"
       .. "0-based indices (fp32); NaN counts as the largest, equal values keep their order (stable=true changes\n"
       .. "nothing). argsort gives the indices alone, topk the k largest (or smallest) in order (sorted=false allows\n"
       .. "any order).\n"
       .. "x:multinomial(n [, replacement=false]) (or fp8.multinomial(p, n, ...)) draws n category indices from each\n"
       .. "row's weights, reproducibly after fp8.manual_seed.\n"
       .. "x:tril([diagonal=0]) / x:triu([diagonal=0]): the lower / upper triangle of the last two dims (torch's\n"
       .. "causal mask: fp8.ones{T, T}:tril()); x:cumsum(dim): running sums (in double, rounded once), gradients\n"
       .. "flow. "
       .. "x:gather(dim, index) (fp8.gather(x, dim, index)): x's values along dim at the index's 0-based\n"
       .. "positions, the index no larger than x but along dim (a 0-d x or index counts as 1-d, an empty index\n"
       .. "gives an empty result of its shape, as torch's); x:index_select(dim, index) takes a 1-d index's positions of dim, in order (a 0-d index:\n"
       .. "one position, dim kept; a 0-d x: dim 1 or -1, one index 0, a 0-d result, as torch's)." },
  { section = "Tensors", name = "Tensor:scatter",
    sig = "x:scatter(dim, index, src | value) / :scatter_add(dim, index, src) / :index_add(dim, index, source [, "
       .. "{alpha=1}]) / :index_copy(dim, index, source) / :index_fill(dim, index, value) -> Tensor",
    doc = "torch's, gather's inverse: x with src's values written (scatter: the last of repeated positions stays)\n"
       .. "or added (scatter_add) along dim at the index's 0-based positions; the index no larger than src, nor\n"
       .. "than x but along dim (only its extent is written, as torch's). index_add/index_copy/index_fill take\n"
       .. "a 1-d index of positions of dim and whole slices (source: x's shape with dim the index's length; a 0-d\n"
       .. "index is one position). A 0-d x, index or src counts as 1-d of size 1, as torch's. Gradients reach x\n"
       .. "and src as torch's. In place under fp8.no_grad: scatter_, scatter_add_, index_add_, index_copy_,\n"
       .. "index_fill_; function forms\n"
       .. "fp8.scatter(x, ...), fp8.index_add(x, ...)." },
  { section = "Tensors", name = "Tensor:sin",
    sig = "x:sin() / :cos() / :tan() / :asin() / :acos() / :atan() / :sinh() / :cosh() / :erf() / :log1p() / "
       .. ":expm1() / :log2() / :log10() / :exp2() / :floor() / :ceil() / :round() / :trunc() -> Tensor",
    doc = "torch's elementwise functions, computed in double and rounded once (floor, ceil, round and trunc are\n"
       .. "exact; round takes halves to even, as torch's). Differentiable, with torch's gradients (asin's and acos's\n"
       .. "1/√(1 - x²) inf at ±1); the rounding ones pass a zero gradient. Also fp8.sin(x), fp8.tan(x), ..." },
  { section = "Tensors", name = "Tensor:isnan",
    sig = "x:isnan() / :isinf() / :isfinite() / :logical_not() / :logical_and(y) / :logical_or(y) / "
       .. ":logical_xor(y) / :all([dim [, keepdim]]) / :any(...)",
    doc = "torch's predicates: 1 where true, 0 where false, in x's dtype (there is no bool dtype); a value is true\n"
       .. "where nonzero, NaN included; no gradient. all/any over nothing are 1/0. loss:isnan():any():item() == 1\n"
       .. "spots a NaN loss. x:masked_select(mask) is torch's x[mask] (1-d, differentiable); x:nonzero() (argwhere)\n"
       .. "the 0-based indices of the nonzero elements, [n, dim]." },
  { section = "Tensors", name = "Tensor:logsumexp",
    sig = "x:logsumexp(dim [, keepdim]) / x:norm([p=2 [, dim [, keepdim]]])",
    doc = "log Σ exp(x) along dim, shifted by the largest value (torch's); torch's vector norm for any p but NaN:\n"
       .. "2 (\"fro\"), 1, math.huge (max |x|), -math.huge (min |x|), 0 (the count of nonzeros, gradient zeros),\n"
       .. "p < 0 (0 where an element is 0), any other p; the gradient 0 where the norm is 0; for p > 0 finite where\n"
       .. "the true norm is, when Σ|x|^p over- or underflows ({1e20, 1e20}: 1.414e20; x scaled by a power of two).\n"
       .. "Both differentiable; bf16/fp16 in fp32, rounded once. dim may be a list of dims ({1, 3}), as torch's tuple." },
  { section = "Tensors", name = "Tensor:prod",
    sig = "x:prod([dim [, keepdim]]) / x:cumprod(dim)",
    doc = "torch's product of all elements (0-d) or along one dim, and its running products along dim. Built of\n"
       .. "multiplications of halves (a tree; a scan), so both are differentiable and exact in their gradients where\n"
       .. "elements are 0; the rounding order differs from torch's running product by a few ulps. The product of\n"
       .. "nothing is 1. bf16/fp16 in fp32, rounded once. Function forms fp8.prod(x, ...), fp8.cumprod(x, dim)." },
  { section = "Tensors", name = "Tensor:mm",
    sig = "x:mm(y) (2-d) / x:bmm(y) (3-d) / x:outer(y) (1-d) / x:lerp(end, weight)",
    doc = "matmul with torch's shape checks; the outer product x_i·y_j; x + weight·(end - x) (weight a number or a\n"
       .. "tensor; torch's formula for |weight| ≥ 0.5, with two roundings where torch fuses one). Differentiable." },
  { section = "Tensors", name = "Tensor:dot",
    sig = "x:dot(y) / x:addmm(m1, m2 [, {beta=, alpha=}]) / x:baddbmm(b1, b2 [, ...]) / x:diagonal([offset, d1, d2])"
       .. " /\nx:diag([k]) / x:trace()",
    doc = "torch's: the 1-d inner product; beta·x + alpha·(m1 @ m2) (beta 0 leaves x out); the same per batch; a\n"
       .. "diagonal of dims d1, d2 as the last dim (a copy); a 1-d tensor on a diagonal of a square matrix, or a\n"
       .. "matrix's diagonal; the main diagonal's sum. Differentiable." },
  { section = "Tensors", name = "Tensor:addcmul",
    sig = "x:addcmul(t1, t2 [, value]) / x:addcdiv(t1, t2 [, value]) / x:nan_to_num([nan, posinf, neginf]) /\n"
       .. "x:logaddexp(y) / x:xlogy(y) / x:logit([eps]) / x:isclose(y [, {rtol=, atol=, equal_nan=}]) /\n"
       .. "x:allclose(y [, ...]) / x:count_nonzero([dim]) / x:clip(min, max) / x:relu()",
    doc = "torch's: x + value·t1·t2 (·t1/t2); NaN and ±inf replaced (the dtype's extremes by default); log(e^x + e^y)\n"
       .. "without overflow; x·log y (0 where x is 0); log(x/(1-x)) (x clamped to [eps, 1-eps] first); 1/0 where\n"
       .. "close, or one boolean; nonzero elements counted; clamp and F.relu as methods. Differentiable where torch's\n"
       .. "are, with its gradients at 0, the infinities and ties." },
  { section = "Tensors", name = "Tensor:unbind",
    sig = "x:unbind([dim=1]) / x:flip(dims) / x:roll(shifts [, dims]) / x:tile(reps...) / "
       .. "x:repeat_interleave(r [, dim]) /\nx:movedim(src, dst) / x:swapaxes(a, b) / x:unflatten(dim, sizes)",
    doc = "torch's rearrangements: the slices along dim as several values (local q, k, v = qkv:unbind(3)); dims\n"
       .. "reversed; elements shifted round; the tensor repeated (torch's x.repeat: repeat is a Lua keyword); each\n"
       .. "element repeated r times in place (grouped-query attention's k:repeat_interleave(n, 2)); dims moved (alias\n"
       .. "moveaxis); transpose's aliases (swapdims); one dim split into sizes (one -1 inferred). Differentiable." },
  { section = "Tensors", name = "Tensor:softmax", sig = "x:softmax(dim) / x:log_softmax(dim)",
    doc = "fp8.nn.functional.softmax / log_softmax as methods (torch's x.softmax(dim))." },
  { section = "Tensors", name = "Tensor:add_",
    sig = "x:add_(y [, alpha]) / :sub_ / :mul_(y) / :div_(y) / :clamp_(min, max) / :copy_(src) / :fill_(v) / "
       .. ":zero_() / :masked_fill_(mask, v) / :lerp_(end, w) / :uniform_(a, b) / :normal_(m, s) / :bernoulli_(p) / "
       .. ":exp_() / :log_() / :sqrt_() / :pow_(e) / :eq_(y) / ... (the in-place form of torch's out-of-place methods)",
    doc = "torch's in-place writes: x's own values replaced (y and src broadcast to x's shape), x returned.\n"
       .. "x:exp_(), x:clamp_min_(0), x:cumsum_(1), ...: the out-of-place method's values written into x (its\n"
       .. "arguments and refusals). float_power_ is refused (torch's result is fp64); squeeze_, t_, transpose_,\n"
       .. "detach_ and the other shape or history changes are left out (docs/lua-api.md lists them).\n"
       .. "A tensor that requires grad or is part of a graph is written only under fp8.no_grad (an optimizer's or\n"
       .. "an EMA's update), and a backward that saved x before the write refuses to run. FP8 tensors and\n"
       .. "expanded views are refused; a number past the dtype's range (fill_(1e9) in fp16) too.\n"
       .. "x.data is x:detach() (torch's field): p.data:add_(...) writes through it under grad mode too." },
  { section = "Tensors", name = "Tensor:new_zeros",
    sig = "x:new_zeros(shape [, dtype | {dtype=, device=}]) / new_ones / new_empty / new_full(shape, v) / "
       .. "new_tensor(data)",
    doc = "A new tensor with x's dtype and device unless given (nothing else of x); shape a list {2, 3} or sizes.\n"
       .. "x:expand_as(y) / view_as(y) / reshape_as(y) take y's shape; x:type_as(y) y's dtype and device." },
  { section = "Tensors", name = "exp",
    sig = "fp8.exp(x) / fp8.sum(x, dim) / fp8.max(a, b) / ... -> torch's function forms",
    doc = "fp8.<op>(x, ...) is x:<op>(...) for the tensor methods torch also spells as functions (abs ... trunc,\n"
       .. "sum, mean, std, var, argmax, logsumexp, norm, cumsum, tril, chunk, split, clamp, topk, sort, add ... ge,\n"
       .. "mm, bmm, outer, softmax, ...: require(\"fp8.torch_forms\").FORMS lists them). fp8.max(a, b) and\n"
       .. "fp8.min(a, b) of two tensors are fp8.maximum / fp8.minimum; with one, x:max(...) / x:min(...)." },
  { section = "Tensors", name = "Tensor:argmax", sig = "x:argmax([dim [, keepdim]]) / :argmin;  local v, i = x:max(dim)",
    doc = "0-based indices (fp32, like class labels) of the largest / smallest element along dim (first of a tie,\n"
       .. "NaN wins), or the flat index without dim. max(dim) / min(dim) return the values and these indices\n"
       .. "(their gradient goes to the index, as torch's; max() without dim splits it among a tie)." },
  { section = "Quantization", name = "Tensor:scale", sig = "q:scale() / q:scale_inv() / q:amax() / q:bytes()",
    doc = "The FP8 tensor's scale (a number, or a tensor for per-row scaling), its inverse, the amax\n"
       .. "of the source it was made from, and its raw bytes as integers." },
  { section = "Quantization", name = "Tensor:underflow", sig = "q:underflow() / q:saturated() / q:qstats()",
    doc = "How many nonzero values became zero, and how many exceeded the format's max\n"
       .. "(clamped, or inf/NaN with saturate=false), in the cast that made q. A select or narrow view of\n"
       .. "part of q keeps the whole cast's counters: its qstats() then has part=true. An FP8 tensor read from a\n"
       .. "file has no cast's counters: qstats().unknown is true, and these (and q:amax()) raise." },
  { section = "REPL", name = "help", sig = "help([fn | \"name\"])",
    doc = "help() lists the sections; help(\"tensors\") one section; help(fp8.encode) or help(\"encode\") one entry;\n"
       .. "help(fp8.optim) or help(\"optim\") a module's entries, each with the names of the module it covers; an\n"
       .. "unknown name suggests the nearest ones. help(nil), which a misspelt or undefined name gives\n"
       .. "(help(fp8.hsit)), says so rather than listing the sections.\n"
       .. "Modules add entries with require(\"fp8.help\").add{name=, sig=, doc=}." },
  { section = "REPL", name = "keys", sig = "REPL keys",
    doc = "Tab completes globals, fields after '.' and methods after ':'. Up/Down walk the history\n"
       .. "(~/.fp8lab_history or $FP8LAB_HISTORY, its last $FP8LAB_HISTSIZE entries, default 1000).\n"
       .. "Ctrl-C clears the line, or interrupts a running computation. Ctrl-D (or os.exit()) exits.\n"
       .. "Expressions print their value; an unfinished statement continues on '>>' (Ctrl-C or Ctrl-D drops it)." },
}

add_all {
  { section = "Tensors", name = "Tensor:backward",
    sig = "loss:backward([grad] [, {retain_graph=, inputs=}]) / x.grad / x:requires_grad([bool]) / x:detach() / "
       .. "x:zero_grad()",
    doc = "Autograd: backward() from a one-element tensor (or with grad of the same shape) fills .grad of the\n"
       .. "leaves that require it (gradients add up until zero_grad() drops them). requires_grad(true) marks a\n"
       .. "leaf and returns it (torch's requires_grad_([bool]) too); detach() is a view without history;\n"
       .. "x:is_leaf(), x:grad_fn() (the node's name, nil for a leaf) tell where x came from. h:retain_grad() on\n"
       .. "a result (an activation) makes backward fill h.grad too (h:retains_grad() says so):\n"
       .. "fp8.hist(h.grad, \"e5m2\") then shows how that gradient sits on the FP8 grid.\n"
       .. "t:register_hook(fn) -> handle: fn(grad) runs when backward has t's gradient (a leaf's summed over its\n"
       .. "uses, before .grad) and returns nothing or the gradient to use instead; handle:remove() takes it out\n"
       .. "(a hook that refers to its own tensor is collected with it, as torch's; before stop 96 it kept both).\n"
       .. "p:register_post_accumulate_grad_hook(fn) -> handle: fn(p) runs after backward has added a leaf's\n"
       .. "gradient into p.grad (an optimizer per parameter can step there: optimizer-in-backward).\n"
       .. "loss:backward{inputs = {w, h}} fills only their .grad (torch's inputs=); {retain_graph=true} keeps\n"
       .. "the graph." },
  { section = "Tensors", name = "autograd.grad", sig = "fp8.autograd.grad(outputs, inputs [, grad_outputs] [, {retain_graph=false, allow_unused=false, materialize_grads=false}]) -> one gradient per input",
    doc = "torch.autograd.grad: the gradients of outputs (a tensor or a list; grad_outputs seeds them, ones for a\n"
       .. "one-element output) with respect to inputs (leaves or results), as several values\n"
       .. "(local gx, gw = fp8.autograd.grad(loss, {x, w})). No .grad changes; only the graph between them runs.\n"
       .. "allow_unused: nil for an input no gradient reaches (else an error); materialize_grads: zeros.\n"
       .. "create_graph (second derivatives) is not supported. fp8.autograd.backward(tensors [, grad_tensors]\n"
       .. "[, {retain_graph=, inputs=}]): one backward from several tensors (torch.autograd.backward)." },
  { section = "Tensors", name = "autograd.Function", sig = "fp8.autograd.Function{forward=function(ctx, ...), backward=function(ctx, ...) [, setup_context=] [, name=]} -> F; F.apply(...) or F(...)",
    doc = "torch.autograd.Function: an op whose backward you write. forward(ctx, ...) runs without gradients and\n"
       .. "returns tensors (and other values); backward(ctx, ...) gets one gradient per result (its dtype; zeros\n"
       .. "where none came) and returns one per forward argument (nil, or a tensor of its shape or one broadcast\n"
       .. "to it). ctx:save_for_backward(...) / ctx.saved_tensors (refused if written in place since: t._version),\n"
       .. "ctx.needs_input_grad, ctx:mark_non_differentiable(...), ctx:set_materialize_grads(false) (nil in place\n"
       .. "of zeros); other values as ctx fields. setup_context(ctx, inputs, output) with forward(...) is torch 2's\n"
       .. "form. Results keep the forward's bits and print their grad_fn as <name>Backward. An argument backward\n"
       .. "gives nil gets zeros (torch: none). e.g. the gradient cast to E5M2 without a scale:\n"
       .. "  G = fp8.autograd.Function{forward = function(ctx, x) return x:clone() end, backward =\n"
       .. "        function(ctx, g) return g:quantize('e5m2', {scale = 1}):dequantize() end}\n"
       .. "Refused by name: ctx:mark_dirty (in-place), jvp, vmap." },
  { section = "Tensors", name = "no_grad", sig = "fp8.no_grad(fn, ...) / fp8.enable_grad(fn, ...) / fp8.set_grad_enabled(b) / fp8.is_grad_enabled()",
    doc = "Run fn(...) without recording history (evaluation) or with it (inside a no_grad), returning fn's results\n"
       .. "(a coroutine may not yield inside fn: the mode is process-wide);\n"
       .. "set_grad_enabled switches the mode for what follows and returns the previous one." },
  { section = "Tensors", name = "autocast_dtype", sig = "fp8.autocast_dtype() / fp8.set_autocast_dtype(\"fp32\"|\"bf16\"|\"fp16\")",
    doc = "The dtype matmuls and linears compute in (the low-level switch amp.autocast sets and restores);\n"
       .. "set_autocast_dtype returns the previous name." },
  { section = "Tensors", name = "is_tensor", sig = "fp8.is_tensor(x) -> boolean",
    doc = "Whether x is an fp8 tensor (of any dtype or device)." },
  { section = "Tensors", name = "Tensor:unsqueeze", sig = "x:unsqueeze(d) / :squeeze([d]) / :flatten() / :permute(d1, ...) / :narrow(d, start, len) / :select(d, i) / :expand(shape) / :clone()",
    doc = "Shape views (1-based dims, negative from the end): add or drop a size-1 dim, flatten, reorder dims,\n"
       .. "a slice of len along d from start, the position i of d with d dropped (x[i] is x:select(1, i); torch's\n"
       .. "x[:, -1] is x:select(2, -1)), broadcast size-1 dims; clone() copies (and keeps the history)." },
  { section = "Tensors", name = "Tensor:chunk", sig = "x:chunk(n [, d=1]) / x:split(size | {sizes} [, d=1])",
    doc = "Narrow views along d, returned as several values (local q, k, v = x:chunk(3, -1)): chunk in pieces of\n"
       .. "ceil(len / n) (fewer than n when they run out), split in pieces of size (the last shorter) or of the\n"
       .. "sizes listed, which must add up to the length. As torch's." },
  { section = "Tensors", name = "Tensor:var", sig = "x:var([d] [, {correction=1, keepdim=false}]) / x:std(...)",
    doc = "Variance and standard deviation over everything, dim d or a list of dims ({1, 3}), with Bessel's\n"
       .. "correction unless correction=0 (torch's). Differentiable. Also x:square(), x:rsqrt(), x:reciprocal()." },
  { section = "Tensors", name = "linspace", sig = "fp8.linspace(start, end, steps [, dtype | {dtype=, device=}])",
    doc = "steps values from start to end, both included (torch.linspace), rounded once to the dtype:\n"
       .. "fp8.linspace(0, 448, 9):quantize(\"e4m3\") shows where the E4M3 grid puts them. fp8.eye(n [, m]) is\n"
       .. "the identity." },
  { section = "Tensors", name = "zeros_like",
    sig = "fp8.zeros_like(x [, dtype | {dtype=, device=}]) / ones_like / full_like(x, v) / ...",
    doc = "A new tensor of x's shape, dtype and device (unless given): zeros_like, ones_like, empty_like,\n"
       .. "rand_like, randn_like, full_like(x, v). An FP8 x needs a dtype (quantize the result)." },
  { section = "Tensors", name = "Tensor:float", sig = "x:float() / x:bfloat16() / x:half()",
    doc = "The tensor in fp32 / bf16 / fp16 (x itself when already so; round to nearest even; differentiable)." },
  { section = "Tensors", name = "Tensor:stride", sig = "x:stride() / :is_contiguous() / :shape_str() / :device() / :is_fp8() / :scale_axis()",
    doc = "Layout: strides in elements, whether the elements are packed row-major, the shape as text, \"cpu\" or\n"
       .. "\"cuda\", whether the dtype is e4m3/e5m2, and an FP8 tensor's per-index scale dim (nil: one scale)." },
  { section = "Tensors", name = "Tensor:free", sig = "x:free() / x:is_released()",
    doc = "Lets go of the tensor's memory now instead of at the next collection; using x afterwards is an error.\n"
      .. "Called from code an fp8 function runs while it uses x (a metamethod of its options, a __gc finalizer), the\n"
      .. "memory goes at the next free() outside such code." },
  { section = "Tensors", name = "Tensor:print", sig = "x:print() -> x",
    doc = "Prints the tensor and returns it (handy at the end of a chain)." },
  { section = "Accelerator & recipes", name = "acc:is_main_process",
    sig = "acc:is_main_process() / acc:is_local_main_process() / acc:is_last_process()",
    doc = "Whether this process is rank 0, rank 0 of its machine, or the last rank (for work done once)." },
  { section = "Accelerator & recipes", name = "acc:unscale_gradients", sig = "acc:unscale_gradients([optimizer or list])",
    doc = "fp16: divides the gradients by the GradScaler's scale now (before inspecting or clipping them); once a\n"
       .. "step, a second call leaves them as they are; clip_grad_norm_/clip_grad_value_ call it. No-op otherwise." },
  { section = "Other", name = "profiler.record_function", sig = "fp8.profiler.record_function(name, fn, ...) / push(name) -> token / pop(token)",
    doc = "A named range in the profiler's trace around fn(...) (returning its results), or opened by push and\n"
       .. "closed by pop: torch.profiler.record_function." },
  { section = "Other", name = "config",
    sig = "fp8.config.load(path) / load_default() / write(path, t) / check(key, text [, origin]) / parse(text [, name])",
    doc = "config.yaml from Lua (docs/config.md, \"From Lua\"): load and check a file as fp8lab launch does, write one\n"
       .. "atomically; keys() lists the keys, suggest(word, list) / distance(a, b) the nearest name, default_path()\n"
       .. "where `fp8lab config` writes, libyaml_version()." },
  { section = "Other", name = "config.sys",
    sig = "require(\"fp8.config\").sys.setenv / exec / executable / realpath / ...",
    doc = "The process helpers fp8lab launch and fp8lab env use (docs/config.md): setenv(name, value|nil),\n"
       .. "exec{prog, args...}, executable(), realpath(p), isatty(fd), geteuid(), omp_max_threads(), build(),\n"
       .. "cpu_fp8_gemm() (the CPU FP8 GEMM's kernel family), cpu_isa() (FP8LAB_CPU_ISA's cap), env_names(prefix)." },
  { section = "Training", name = "amp.set_mixed_precision", sig = "fp8.amp.set_mixed_precision(mode) / fp8.amp.dtype_for(mode)",
    doc = "Switch autocast for the rest of the program to a mixed-precision mode (no, fp16, bf16; fp8's non-FP8 ops use\n"
       .. "bf16, which is what the Accelerator asks for under mixed_precision=\"fp8\"), returning the\n"
       .. "previous dtype; dtype_for(mode) is the autocast dtype a mode computes in." },
  { section = "Training", name = "data.clock", sig = "fp8.data.clock() / fp8.data.isatty(fd) / fp8.data.is_loader(v)",
    doc = "Monotonic wall seconds (time a run with it), whether a descriptor is a terminal, and whether v is a\n"
       .. "DataLoader or a prepared loader shard." },
  { section = "Accelerator & recipes", name = "kwargs.describe",
    sig = "fp8.kwargs.describe(settings [, extra]) / repr(v) / nearest(key, names) / is_handler(v)",
    doc = "The resolved settings as the Accelerator prints them (extra: rows {name, text} shown after them), a value\n"
       .. "as Lua source, the nearest of a set of names (for messages), and whether v is a kwargs handler." },
}

-- Classes whose objects help() answers for (objects made by a function, whose class no module publishes: a
-- profiler, a SummaryWriter, a safe_open handle, a progress bar). M.class{class = tbl | registry = "fp8.SafeOpen",
-- prefix = "SafeOpen", entry = "safe_open", names = {"progress.Bar"}}: each method of the class (or of its __index
-- table) is named prefix:method, and is found in the entry of that name, or else in `entry` where that names it;
-- help(obj) shows `entry`; the names (its public spellings) lead to prefix's names too.
M.CLASSES = {}
local class_by_prefix, class_by_name = {}, {}
function M.class(c)
  assert(type(c) == "table" and type(c.prefix) == "string" and type(c.entry) == "string"
         and (type(c.class) == "table" or type(c.registry) == "string"),
         "help.class expects {class= | registry=, prefix=, entry= [, names=]}")
  for i, old in ipairs(M.CLASSES) do
    if old.prefix == c.prefix then table.remove(M.CLASSES, i); break end
  end
  M.CLASSES[#M.CLASSES + 1] = c
  class_by_prefix[c.prefix] = c
  for _, n in ipairs(c.names or {}) do class_by_name[n] = c end
  return c
end
-- The tables a registered class's methods are in: the class and its __index table.
local function class_tables(c)
  local t = c.class or debug.getregistry()[c.registry]
  if type(t) ~= "table" then return {} end
  local idx = rawget(t, "__index")
  if type(idx) == "table" and not rawequal(idx, t) then return { t, idx } end
  return { t }
end
-- The registered class of an object's metatable (the class table itself, or a C class by its registry name).
local function class_of_mt(mt)
  for _, c in ipairs(M.CLASSES) do
    if rawequal(c.class, mt) or (c.registry and rawequal(debug.getregistry()[c.registry], mt)) then return c end
  end
end

-- The Accelerator's prepare family and its fields (lua/fp8/accelerator.lua's own entry names neither by name).
add_all {
  { section = "Accelerator & recipes", name = "acc:prepare",
    sig = "acc:prepare(...) -> its arguments, prepared / acc:prepare_model(m) / prepare_optimizer(opt) / "
       .. "prepare_scheduler(s) / prepare_data_loader(loader)",
    doc = "prepare(...) takes models, optimizers, schedulers and data loaders in any order and returns them in that\n"
       .. "order: models moved to the accelerator's device and converted for the FP8 recipe, optimizers wrapped\n"
       .. "(stepping only when acc.sync_gradients, fp16 through the GradScaler), schedulers stepped with them, loaders\n"
       .. "handing out batches on the device (sharded across processes). An object already prepared comes back as\n"
       .. "it is. prepare_model, prepare_optimizer, prepare_scheduler and prepare_data_loader prepare one object of\n"
       .. "that kind (another kind is refused); Accelerate's device_placement=, evaluation_mode= and\n"
       .. "slice_fn_for_dispatch= arguments are refused (the accelerator's device_placement decides)." },
  { section = "Accelerator & recipes", name = "acc.fields",
    sig = "acc.step / acc.gradient_state / acc.even_batches / acc.process_group / ... (an Accelerator's fields)",
    doc = "Read them; prepare, accumulate and save_state keep them. mixed_precision; fp8_backend (te|ao|msamp|nil);\n"
       .. "fp8_recipe (every effective field); settings (kwargs.resolve's result: every value and its source);\n"
       .. "step (optimizer steps taken: training steps); gradient_state {step (accumulate calls since a prepared\n"
       .. "loader last ended, Accelerate's step), sync_gradients, num_steps, end_of_dataloader, sync_with_dataloader,\n"
       .. "sync_each_batch}; gradient_accumulation_steps; gradient_accumulation_plugin; optimizer_step_was_skipped\n"
       .. "(fp16: the GradScaler skipped the last step); scaler (fp16's fp8.amp.GradScaler);\n"
       .. "dataloader_config and its even_batches, split_batches, dispatch_batches, use_seedable_sampler,\n"
       .. "non_blocking, use_stateful_dataloader; device_placement; step_scheduler_with_optimizer; process_group\n"
       .. "{backend=\"mpi\"|\"nccl\", timeout=seconds} (the group in use: InitProcessGroupKwargs' or the default,\n"
       .. "1800 s for mpi); distributed_type; use_distributed, multi_device, should_save_model; is_fsdp2 and\n"
       .. "is_composable_parallelism_enabled (false); project_configuration, project_dir, save_iteration,\n"
       .. "logging_dir; log_with, trackers. num_processes, process_index, local_process_index: help(\"acc.num_processes\")." },
  -- the methods every kwargs handler has (lua/fp8/kwargs.lua registers them as the class KwargsHandler)
  { section = "Accelerator & recipes", name = "KwargsHandler:to_kwargs",
    sig = "h:to_kwargs() / h:to_table() / h:is_set(name) / h.handler_type / h.<field>",
    doc = "The methods of every kwargs handler (fp8.TERecipeKwargs{...}, fp8.ProfileKwargs{...}, ...): to_kwargs() the\n"
       .. "fields whose value differs from the default, as a fresh table (Accelerate's to_kwargs); to_table() every\n"
       .. "field with its value, defaults included; is_set(name) whether the constructor was given that key (or its\n"
       .. "alias); handler_type the class name; h.field reads one value (a copy). Handlers are read-only." },
}
local ACC_FIELDS = { "mixed_precision", "fp8_backend", "fp8_recipe", "settings", "step", "gradient_state",
  "gradient_accumulation_steps", "gradient_accumulation_plugin", "optimizer_step_was_skipped", "scaler",
  "dataloader_config", "even_batches", "split_batches", "dispatch_batches", "use_seedable_sampler", "non_blocking",
  "use_stateful_dataloader", "device_placement", "step_scheduler_with_optimizer", "process_group", "distributed_type",
  "use_distributed", "multi_device", "should_save_model", "is_fsdp2", "is_composable_parallelism_enabled",
  "project_configuration", "project_dir", "save_iteration", "logging_dir", "log_with", "trackers" }
M.ACC_FIELDS = ACC_FIELDS

-- Finds the name under which a function is published in fp8 (or as a Tensor method).
-- names_of(fn) -> every name fn has under fp8, in this order: fp8's own field, a Tensor method, a field of a module,
-- a method of a class one level further down, then two (optim.lr_scheduler.LRScheduler:step), then the entry a C
-- object's metatable names for its methods (__help). A function shared by
-- several classes (Optimizer.step, copied into SGD and AdamW) has one name per class, and the lookup takes the first
-- whose entry names it.
-- The second result gives each name's tier (1, 2, ...): names of one tier are equally likely to be the one the user
-- wrote (fp8.config.keys and fp8.settings.list, one function), so M.text shows every entry they reach.
local function names_of(fn)
  local out, tier, tiers, ntier = {}, 0, {}, 0
  local function close_tier()   -- pairs' order varies from run to run: sorted within a tier, the entry found does not
    local part = {}
    for i = tier + 1, #out do part[#part + 1] = out[i] end
    table.sort(part)
    ntier = ntier + 1
    for i, n in ipairs(part) do out[tier + i] = n; tiers[tier + i] = ntier end
    tier = #out
  end
  local fp8 = rawget(_G, "fp8")
  if type(fp8) ~= "table" then return out, tiers end
  for k, v in pairs(fp8) do if rawequal(v, fn) then out[#out + 1] = k end end
  close_tier()
  -- tensor methods live in the __index of the named metatable "fp8.Tensor" (docs/architecture.md, "Conventions")
  local mt = debug.getregistry()["fp8.Tensor"]
  for _, idx in ipairs(require("fp8.repl").metatable_index_tables(mt)) do
    for k, v in pairs(idx) do if rawequal(v, fn) then out[#out + 1] = "Tensor:" .. k end end
  end
  close_tier()
  for k, v in pairs(fp8) do
    if type(v) == "table" then
      for k2, v2 in pairs(v) do if rawequal(v2, fn) then out[#out + 1] = k .. "." .. k2 end end
    end
  end
  close_tier()
  -- a method of a class that registered its help (M.class: the profiler's prof:start, a safe_open handle's
  -- SafeOpen:keys), found before the module walk's spelling of the same method (profiler.Profiler:start)
  for _, c in ipairs(M.CLASSES) do
    for _, t in ipairs(class_tables(c)) do
      for k, v in next, t do
        if type(k) == "string" and k:sub(1, 2) ~= "__" and rawequal(v, fn) then out[#out + 1] = c.prefix .. ":" .. k end
      end
    end
  end
  close_tier()
  -- a method of a class one level further down (fp8.amp.GradScaler.step: "amp.GradScaler:step"), then of one two
  -- modules down (fp8.optim.lr_scheduler.LRScheduler.step: "optim.lr_scheduler.LRScheduler:step"), found in its
  -- class's entry where that entry names it (find); raw reads, so no class's __index or __pairs runs
  local function methods_at(t, prefix, depth)
    for k, v in next, t do
      if type(k) == "string" then
        if depth == 0 then
          if rawequal(v, fn) then out[#out + 1] = prefix .. ":" .. k end
        elseif type(v) == "table" then
          methods_at(v, prefix and prefix .. "." .. k or k, depth - 1)
        end
      end
    end
  end
  methods_at(fp8, nil, 2)
  close_tier()
  methods_at(fp8, nil, 3)
  close_tier()
  -- a method of a C object's metatable that names its entry (__help: a tensor hook's handle, "Tensor:backward")
  for _, mt in next, debug.getregistry() do
    local entry = type(mt) == "table" and rawget(mt, "__help")
    if type(entry) == "string" then
      for k, v in next, mt do
        if type(k) == "string" and k:sub(1, 2) ~= "__" and rawequal(v, fn) then out[#out + 1] = entry end
      end
    end
  end
  close_tier()
  return out, tiers
end

-- A name documented inside another entry (its sig lists it): help("size") shows Tensor:shape's entry.
M.ALIASES = {}
local function also(target, names) for _, n in ipairs(names) do M.ALIASES[n] = target end end
also("Tensor:shape", { "Tensor:size", "Tensor:dim", "Tensor:numel", "Tensor:dtype" })
also("Tensor:view", { "Tensor:reshape", "Tensor:transpose", "Tensor:t", "Tensor:contiguous" })
also("Tensor:get", { "Tensor:set", "Tensor:item", "Tensor:totable", "Tensor:tolist" })
also("Tensor:sum", { "Tensor:mean", "Tensor:max", "Tensor:min", "Tensor:amax", "Tensor:abs" })
also("Tensor:argmax", { "Tensor:argmin" })
also("Tensor:sin", { "Tensor:cos", "Tensor:erf", "Tensor:log1p", "Tensor:expm1", "Tensor:floor", "Tensor:ceil",
                     "Tensor:round", "Tensor:trunc", "Tensor:tan", "Tensor:asin", "Tensor:acos", "Tensor:atan",
                     "Tensor:sinh", "Tensor:cosh", "Tensor:log2", "Tensor:log10", "Tensor:exp2" })
also("Tensor:isnan", { "Tensor:isinf", "Tensor:isfinite", "Tensor:logical_not", "Tensor:logical_and",
                       "Tensor:logical_or", "Tensor:logical_xor", "Tensor:all", "Tensor:any", "Tensor:masked_select",
                       "Tensor:nonzero", "Tensor:argwhere" })
also("Tensor:logsumexp", { "Tensor:norm" })
also("get_rng_state", { "set_rng_state", "initial_seed" })
also("get_math_random_state", { "set_math_random_state" })
also("Tensor:prod", { "Tensor:cumprod", "prod", "cumprod" })
also("Tensor:mm", { "Tensor:bmm", "Tensor:outer", "Tensor:lerp" })
also("Tensor:softmax", { "Tensor:log_softmax" })
also("Tensor:unbind", { "Tensor:flip", "Tensor:roll", "Tensor:tile", "Tensor:repeat_interleave", "Tensor:movedim",
                        "Tensor:moveaxis", "Tensor:swapaxes", "Tensor:swapdims", "Tensor:unflatten" })
also("Tensor:dot", { "Tensor:addmm", "Tensor:baddbmm", "Tensor:diagonal", "Tensor:diag", "Tensor:trace" })
also("Tensor:addcmul", { "Tensor:addcdiv", "Tensor:nan_to_num", "Tensor:logaddexp", "Tensor:xlogy", "Tensor:logit",
                         "Tensor:isclose", "Tensor:allclose", "Tensor:count_nonzero", "Tensor:clip", "Tensor:relu" })
also("Tensor:add_", { "Tensor:sub_", "Tensor:mul_", "Tensor:div_", "Tensor:clamp_", "Tensor:copy_", "Tensor:fill_",
                      "Tensor:zero_", "Tensor:masked_fill_", "Tensor:lerp_", "Tensor:uniform_", "Tensor:normal_",
                      "Tensor:bernoulli_", "Tensor:float_power_" })
-- the in-place forms of the out-of-place methods (lua/fp8/tensor_inplace.lua's FORMS), since stop 95
for n in ([[abs neg sign sgn exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square reciprocal sin cos tan asin acos
  atan sinh cosh tanh sigmoid logit relu erf sinc frac floor ceil round trunc deg2rad rad2deg nan_to_num clamp_min
  clamp_max clip pow atan2 hypot copysign fmod remainder floor_divide true_divide xlogy heaviside eq ne lt le gt ge
  logical_not logical_and logical_or logical_xor addcmul addcdiv addmm baddbmm cumsum cumprod tril triu
  renorm]]):gmatch("%S+") do
  M.ALIASES["Tensor:" .. n .. "_"] = "Tensor:add_"
end
also("Tensor:new_zeros", { "Tensor:new_ones", "Tensor:new_empty", "Tensor:new_full", "Tensor:new_tensor",
                           "Tensor:expand_as", "Tensor:view_as", "Tensor:reshape_as", "Tensor:type_as" })
also("Tensor:sort", { "Tensor:argsort", "Tensor:topk", "Tensor:multinomial", "multinomial", "Tensor:tril",
                      "Tensor:triu", "Tensor:cumsum", "Tensor:gather", "gather", "Tensor:index_select",
                      "index_select" })
also("Tensor:scatter", { "Tensor:scatter_add", "Tensor:index_add", "Tensor:index_copy", "Tensor:index_fill",
                         "Tensor:scatter_", "Tensor:scatter_add_", "Tensor:index_add_", "Tensor:index_copy_",
                         "Tensor:index_fill_", "scatter", "scatter_add", "index_add", "index_copy", "index_fill" })
also("Tensor:scale", { "Tensor:scale_inv", "Tensor:bytes" })
also("Tensor:matmul", { "Tensor:add", "Tensor:sub", "Tensor:mul", "Tensor:div", "Tensor:neg", "Tensor:exp",
                        "Tensor:log", "Tensor:sqrt", "Tensor:sign", "Tensor:tanh", "Tensor:sigmoid" })
also("Tensor:eq", { "Tensor:ne", "Tensor:lt", "Tensor:le", "Tensor:gt", "Tensor:ge" })
also("Tensor:clamp", { "Tensor:clamp_min", "Tensor:clamp_max", "Tensor:maximum", "Tensor:minimum", "maximum", "minimum" })
also("where", { "Tensor:masked_fill", "masked_fill" })
also("Tensor:cuda", { "Tensor:cpu", "Tensor:move_" })
also("Tensor:underflow", { "Tensor:saturated", "Tensor:qstats" })
also("ones", { "full", "empty" })
also("Tensor:chunk", { "Tensor:split" })
also("Tensor:var", { "Tensor:std", "Tensor:square", "Tensor:rsqrt", "Tensor:reciprocal" })
also("linspace", { "eye" })
also("zeros_like", { "ones_like", "empty_like", "rand_like", "randn_like", "full_like" })
also("cuda", { "cuda.is_built", "cuda.is_available", "cuda.device_count", "cuda.unavailable_reason", "cuda.synchronize",
               "cuda.memory_allocated", "cuda.max_memory_allocated", "cuda.reset_peak_memory_stats",
               "cuda.memory_reserved", "cuda.max_memory_reserved", "cuda.empty_cache" })
also("no_grad", { "enable_grad", "set_grad_enabled", "is_grad_enabled" })
also("autograd.grad", { "autograd.backward" })
also("randint", { "randperm" })
also("autocast_dtype", { "set_autocast_dtype" })
also("format", { "dtype_names", "is_nan_code" })
also("Tensor:backward", { "Tensor:requires_grad", "Tensor:requires_grad_", "Tensor:detach", "Tensor:zero_grad",
                          "Tensor:is_leaf", "Tensor:grad_fn", "Tensor:retain_grad", "Tensor:retains_grad",
                          "Tensor:register_hook", "Tensor:register_post_accumulate_grad_hook" })
also("Tensor:unsqueeze", { "Tensor:squeeze", "Tensor:flatten", "Tensor:permute", "Tensor:narrow", "Tensor:select",
                           "Tensor:expand", "Tensor:clone" })
also("Tensor:float", { "Tensor:bfloat16", "Tensor:half" })
also("Tensor:free", { "Tensor:is_released" })
also("Tensor:stride", { "Tensor:is_contiguous", "Tensor:shape_str", "Tensor:device", "Tensor:is_fp8", "Tensor:scale_axis" })
also("config", { "config.load", "config.load_default", "config.write", "config.check", "config.parse", "config.keys",
                 "config.suggest", "config.distance", "config.default_path", "config.libyaml_version" })
also("settings", { "settings.list", "settings.check", "settings.parse", "settings.coerce", "settings.format",
                   "settings.suggest", "settings.distance" })
also("amp.set_mixed_precision", { "amp.dtype_for" })
also("data.clock", { "data.isatty", "data.is_loader" })
also("kwargs.describe", { "kwargs.repr", "kwargs.nearest", "kwargs.is_handler" })
also("progress", { "progress.new" })
also("keys", { "REPL keys" })
also("Tensor:matmul", { "pow", "Tensor:pow" })
also("Tensor:atan2", { "Tensor:fmod", "Tensor:remainder", "atan2", "fmod", "remainder" })
also("Tensor:hypot", { "Tensor:logaddexp2", "Tensor:floor_divide", "Tensor:true_divide", "Tensor:copysign",
                       "Tensor:float_power", "Tensor:heaviside", "Tensor:frac", "Tensor:sinc", "Tensor:signbit",
                       "Tensor:sgn", "Tensor:rad2deg", "Tensor:deg2rad", "hypot", "logaddexp2", "floor_divide",
                       "true_divide", "copysign", "float_power", "heaviside", "frac", "sinc", "signbit", "sgn",
                       "rad2deg", "deg2rad" })
also("Tensor:rot90", { "Tensor:fliplr", "Tensor:flipud", "Tensor:atleast_1d", "Tensor:atleast_2d", "Tensor:atleast_3d",
                       "Tensor:broadcast_to", "Tensor:diff", "Tensor:take", "Tensor:take_along_dim", "Tensor:kron",
                       "Tensor:inner", "Tensor:cross", "rot90", "fliplr", "flipud", "atleast_1d", "atleast_2d",
                       "atleast_3d", "broadcast_to", "diff", "take", "take_along_dim", "kron", "inner", "cross" })
also("Tensor:median", { "Tensor:kthvalue", "Tensor:quantile", "Tensor:msort", "Tensor:logcumsumexp", "Tensor:cummax",
                        "Tensor:cummin", "Tensor:cov", "Tensor:corrcoef", "Tensor:tensordot", "Tensor:bernoulli",
                        "median", "kthvalue", "quantile", "msort", "logcumsumexp", "cummax", "cummin", "cov",
                        "corrcoef", "tensordot", "bernoulli" })
also("cdist", { "searchsorted", "bucketize", "bincount", "isin", "unique", "logspace" })
also("hstack", { "vstack", "dstack", "column_stack", "broadcast_tensors", "meshgrid", "cartesian_prod", "block_diag",
                 "triu_indices", "tril_indices" })
also("Tensor:nansum", { "Tensor:nanmean", "Tensor:std_mean", "Tensor:var_mean", "Tensor:dist", "Tensor:renorm",
                        "nansum", "nanmean", "std_mean", "var_mean", "dist", "renorm" })

also("acc:prepare", { "acc:prepare_model", "acc:prepare_optimizer", "acc:prepare_scheduler", "acc:prepare_data_loader" })
also("Accelerator", { "acc", "acc:backward", "acc:autocast", "acc:autocast_dtype", "acc:clip_grad_norm_",
                      "acc:unwrap_model", "acc:print", "acc:device", "acc:state", "acc:log_fp8_stats",
                      "acc:skip_first_batches", "acc:get_state_dict", "acc:save" })
also("acc:free_memory", { "acc:clear" })
for _, f in ipairs(ACC_FIELDS) do M.ALIASES["acc:" .. f] = "acc.fields"; M.ALIASES["acc." .. f] = "acc.fields" end
also("acc.num_processes", { "acc:num_processes", "acc:process_index", "acc:local_process_index", "acc:sync_gradients",
                            "acc.process_index", "acc.local_process_index", "acc.sync_gradients" })
also("KwargsHandler:to_kwargs", { "to_kwargs", "to_table", "is_set", "KwargsHandler:to_table", "KwargsHandler:is_set",
                                  "KwargsHandler" })
also("acc:register_save_state_pre_hook", { "acc:register_load_state_pre_hook" })
also("acc:main_process_first", { "acc:local_main_process_first" })
also("acc:on_main_process", { "acc:on_local_main_process", "acc:on_last_process", "acc:on_process",
                               "acc:on_local_process" })
also("acc:check_trigger", { "acc:set_trigger" })
also("acc:is_main_process", { "acc:is_local_main_process", "acc:is_last_process" })
also("nn.functional", { "nn.cross_entropy", "nn.mse_loss" })
also("nn.Module", { "nn.Parameter", "nn.isinstance" })
also("nn.Module:register_forward_hook", { "nn.Module:register_forward_pre_hook", "RemovableHandle",
                                         "nn.Module.RemovableHandle",
                                         "nn.Module:register_full_backward_hook",
                                         "nn.Module:register_full_backward_pre_hook" })
also("nn.GELU", { "nn.ReLU", "nn.SiLU", "nn.Sigmoid", "nn.Tanh", "nn.Softmax", "nn.functional.silu",
                  "nn.functional.sigmoid", "nn.functional.tanh", "nn.LeakyReLU", "nn.ELU", "nn.Softplus",
                  "nn.functional.leaky_relu", "nn.functional.elu", "nn.functional.softplus", "nn.LogSoftmax",
                  "nn.Softmin", "nn.GLU", "nn.CELU", "nn.Hardtanh", "nn.ReLU6", "nn.Hardsigmoid", "nn.Hardswish",
                  "nn.Mish", "nn.SELU", "nn.LogSigmoid", "nn.functional.softmin", "nn.functional.glu",
                  "nn.functional.celu", "nn.functional.hardtanh", "nn.functional.relu6", "nn.functional.hardsigmoid",
                  "nn.functional.hardswish", "nn.functional.mish", "nn.functional.selu",
                  "nn.functional.logsigmoid" })
also("nn.RMSNorm", { "nn.functional.rms_norm" })
also("nn.Identity", { "nn.Flatten", "nn.Unflatten" })
also("nn.PReLU", { "nn.Softsign", "nn.Tanhshrink", "nn.Threshold", "nn.functional.prelu", "nn.functional.softsign",
                   "nn.functional.tanhshrink", "nn.functional.threshold", "nn.Hardshrink", "nn.Softshrink",
                   "nn.functional.hardshrink", "nn.functional.softshrink" })
also("nn.utils.get_total_norm", { "nn.utils.clip_grads_with_norm_" })
also("optim.RMSprop", { "optim.Adagrad" })
also("optim.NAdam", { "optim.RAdam", "optim.Adamax", "optim.Adadelta" })
also("nn.BatchNorm2d", { "nn.BatchNorm1d", "nn.GroupNorm", "nn.functional.batch_norm", "nn.functional.group_norm" })
also("nn.Conv2d", { "nn.MaxUnpool1d", "nn.MaxUnpool2d", "nn.functional.max_unpool1d", "nn.functional.max_unpool2d",
                    "nn.Conv1d", "nn.MaxPool2d", "nn.AvgPool2d", "nn.MaxPool1d", "nn.AvgPool1d", "nn.Unfold",
                    "nn.Fold", "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.max_pool2d",
                    "nn.functional.avg_pool2d", "nn.functional.max_pool1d", "nn.functional.avg_pool1d",
                    "nn.functional.unfold", "nn.functional.fold" })
also("nn.ConvTranspose2d", { "nn.ConvTranspose1d", "nn.functional.conv_transpose2d",
                             "nn.functional.conv_transpose1d" })
also("nn.ZeroPad2d", { "nn.ZeroPad1d", "nn.ZeroPad3d", "nn.ConstantPad1d", "nn.ConstantPad2d", "nn.ConstantPad3d",
                       "nn.ReflectionPad1d", "nn.ReflectionPad2d", "nn.ReflectionPad3d", "nn.ReplicationPad1d",
                       "nn.ReplicationPad2d", "nn.ReplicationPad3d", "nn.CircularPad1d", "nn.CircularPad2d",
                       "nn.CircularPad3d" })
also("nn.AdaptiveAvgPool2d", { "nn.AdaptiveMaxPool2d", "nn.AdaptiveAvgPool1d", "nn.AdaptiveMaxPool1d",
                               "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_max_pool2d",
                               "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_max_pool1d" })
also("nn.Upsample", { "nn.UpsamplingNearest2d", "nn.UpsamplingBilinear2d", "nn.functional.interpolate" })
also("nn.PixelShuffle", { "nn.PixelUnshuffle", "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle" })
also("nn.LSTM", { "nn.GRU", "nn.RNN", "nn.LSTMCell", "nn.GRUCell", "nn.RNNCell" })
also("nn.Bilinear", { "nn.functional.bilinear" })
also("nn.EmbeddingBag", { "nn.functional.embedding_bag" })
also("nn.LocalResponseNorm", { "nn.Softmax2d", "nn.ChannelShuffle", "nn.functional.local_response_norm",
                               "nn.functional.channel_shuffle", "nn.functional.gumbel_softmax" })
also("nn.MultiMarginLoss", { "nn.MultiLabelMarginLoss", "nn.MultiLabelSoftMarginLoss",
                             "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss",
                             "nn.functional.multilabel_soft_margin_loss" })
also("nn.Dropout2d", { "nn.Dropout1d", "nn.Dropout3d", "nn.functional.dropout1d", "nn.functional.dropout2d",
                       "nn.functional.dropout3d" })
also("nn.InstanceNorm2d", { "nn.InstanceNorm1d", "nn.InstanceNorm3d", "nn.functional.instance_norm" })
also("nn.utils.parameters_to_vector", { "nn.utils.vector_to_parameters" })
also("nn.utils.rnn.pad_sequence", { "nn.utils.rnn.unpad_sequence" })
also("nn.TripletMarginLoss", { "nn.MarginRankingLoss", "nn.CosineEmbeddingLoss", "nn.HingeEmbeddingLoss",
                               "nn.SoftMarginLoss", "nn.PairwiseDistance", "nn.functional.triplet_margin_loss",
                               "nn.functional.margin_ranking_loss", "nn.functional.cosine_embedding_loss",
                               "nn.functional.hinge_embedding_loss", "nn.functional.soft_margin_loss",
                               "nn.functional.pairwise_distance" })
also("nn.GaussianNLLLoss", { "nn.PoissonNLLLoss", "nn.functional.gaussian_nll_loss", "nn.functional.poisson_nll_loss" })
also("nn.CrossEntropyLoss", { "nn.NLLLoss", "nn.MSELoss", "nn.functional.nll_loss", "nn.functional.one_hot",
                              "nn.L1Loss", "nn.BCEWithLogitsLoss", "nn.functional.l1_loss",
                              "nn.functional.binary_cross_entropy_with_logits", "nn.functional.normalize",
                              "nn.functional.pad", "nn.SmoothL1Loss", "nn.HuberLoss", "nn.KLDivLoss",
                              "nn.functional.smooth_l1_loss", "nn.functional.huber_loss", "nn.functional.kl_div" })
also("nn.BCELoss", { "nn.functional.binary_cross_entropy" })
also("nn.CosineSimilarity", { "nn.functional.cosine_similarity" })
also("nn.FP8Linear", { "nn.FP8LayerNorm" })
also("nn.ModuleList", { "nn.ModuleDict" })
also("optim.lr_scheduler", { "optim.lr_scheduler.LRScheduler" })
also("profiler.record_function", { "profiler.push", "profiler.pop" })

-- name itself, a name documented inside another entry, a method of the Accelerator class (acc:name), or a
-- method or field that the entry of what holds it names ("amp.GradScaler:step": GradScaler's entry says step)
local function find(name)
  local e = by_name[name] or (M.ALIASES[name] and by_name[M.ALIASES[name]])
  local m = not e and name:match("^Accelerator[%.:]([%w_]+)$")
  if m then return find("acc:" .. m) end
  if not e and class_by_name[name] then e = by_name[class_by_name[name].entry] end   -- profiler.Profiler
  if not e then
    -- a registered class by one of its public names (profiler.Profiler:start, progress.Bar.update): its prefix's name
    local cname, member = name:match("^(.+)[%.:]([%a_][%w_]*)$")
    local c = cname and class_by_name[cname]
    if c then return find(c.prefix .. ":" .. member) end
  end
  if not e and name:find(":", 1, true) then
    -- a function of a module two levels down (fp8.nn.functional.conv2d, fp8.nn.utils.clip_grad_norm_), which
    -- names_of spells as a method ("nn.functional:conv2d", "nn.F:conv2d"): its entry or alias by the dotted name
    local dotted = name:gsub(":", ".", 1):gsub("^nn%.F%.", "nn.functional.")
    e = by_name[dotted] or (M.ALIASES[dotted] and by_name[M.ALIASES[dotted]])
  end
  if not e then
    local parent, member = name:match("^(.+)[%.:]([%a_][%w_]*)$")
    local pe = parent and find(parent)
    local c = parent and not pe and class_by_prefix[parent]   -- SafeOpen:keys: the entry of the class, safe_open
    if c then pe = by_name[c.entry] end
    if pe and ((pe.sig or "") .. "\n" .. (pe.doc or "")):find("%f[%w_]" .. member .. "%f[^%w_]") then e = pe end
  end
  return e
end

-- module_names(t) -> every name of a module table under fp8 (three levels deep, through plain tables), sorted:
-- {"nn.F", "nn.functional"}, {"nn.utils.rnn"}.
local function module_names(t)
  local root, out = rawget(_G, "fp8"), {}
  if type(root) ~= "table" then return out end
  local function walk(tbl, prefix, depth)
    for k, v in pairs(tbl) do
      if type(k) == "string" then
        local name = prefix and prefix .. "." .. k or k
        if rawequal(v, t) then out[#out + 1] = name end
        if depth < 3 and type(v) == "table" and getmetatable(v) == nil and not rawequal(v, root) then
          walk(v, name, depth + 1)
        end
      end
    end
  end
  walk(root, nil, 1)
  table.sort(out)
  return out
end

-- module_name(t) -> "optim", "nn.functional", ...: the name of a module table under fp8 (three levels deep), or nil;
-- of several names (fp8.nn.F is fp8.nn.functional) one that has an entry.
function M.module_name(t)
  local names = module_names(t)
  for _, n in ipairs(names) do if by_name[n] then return n end end
  return names[1]
end

-- module_by_name("nn") / ("fp8.optim") -> the module table under fp8 of that name (fp8 itself for "fp8"), or nil.
local function module_by_name(s)
  local root = rawget(_G, "fp8")
  if type(root) ~= "table" then return nil end
  if s == "fp8" then return root end
  local path = s:gsub("^fp8%.", "")
  if not (path:match("^[%a_][%w_]*$") or path:match("^[%a_][%w_]*%.[%a_][%w_]*$")
          or path:match("^[%a_][%w_]*%.[%a_][%w_]*%.[%a_][%w_]*$")) then return nil end
  local v = root
  for part in path:gmatch("[^%.]+") do   -- fp8's own __index loads a lazy module (fp8.nn); nothing else runs
    local ok, r = pcall(function() return type(v) == "table" and v[part] or nil end)
    if not ok then return nil end
    v = r
  end
  return type(v) == "table" and v or nil
end

-- lookup(x) -> the entry for x (nil: none); for a function, a second result: the other entries that name it as
-- equally likely names do ({ {name=, entry=}, ... }, the first one's included), when there are several.
function M.lookup(x)
  load_lazy()
  if type(x) == "string" then
    local name = x:gsub("^fp8%.", ""):gsub("%(%)$", "")
    return find(name) or find("Tensor:" .. name:gsub("^[%w_]+[:%.]", ""))
  end
  local names, tiers = names_of(x)
  for i, name in ipairs(names) do
    local e = find(name) or find("Tensor:" .. name)
    if e then
      -- the other names of the same tier whose own entry (not a parent's that mentions them) is another one
      local all, seen = { { name = name, entry = e } }, { [e] = true }
      for j = i + 1, #names do
        if tiers[j] ~= tiers[i] then break end
        local n = names[j]
        local ej = by_name[n] or (M.ALIASES[n] and by_name[M.ALIASES[n]])
        if ej and not seen[ej] then seen[ej] = true; all[#all + 1] = { name = n, entry = ej } end
      end
      return e, #all > 1 and all or nil
    end
  end
  if x == M.help then return by_name.help end
  -- an object (a model, an optimizer, an Accelerator, a kwargs handler, a profiler, a DataLoader): the entry of its
  -- class, the metatable or one it inherits from, or of the metatable's __name
  local mt = getmetatable(x)
  for _ = 1, 8 do
    if type(mt) ~= "table" then break end
    local e
    for _, name in ipairs(names_of(mt)) do
      e = find(name) or find("Tensor:" .. name)
      if e then break end
    end
    local hn, tn = rawget(mt, "__help"), rawget(mt, "__name")
    local c = not e and class_of_mt(mt)
    if c then e = by_name[c.entry] or find(c.entry) end
    if not e and type(hn) == "string" then e = find(hn) end
    if not e and type(tn) == "string" then e = by_name[tn] or find((tn:gsub("^fp8%.", ""))) end
    if e then return e end
    mt = getmetatable(mt)
  end
  return nil
end

local function entry_text(e)
  return e.sig .. "\n" .. (e.doc or ""):gsub("[^\n]+", "    %0")
end

-- Sections in display order: the known ones, then any another module added.
local function section_list()
  local list, seen = {}, {}
  for _, sec in ipairs(sections) do list[#list + 1] = sec; seen[sec] = true end
  for _, e in ipairs(M.entries) do
    if not seen[e.section] then list[#list + 1] = e.section; seen[e.section] = true end
  end
  return list
end

-- A section's key for help("key"): its first word, lower case ("Accelerator & recipes" -> "accelerator").
local function section_key(sec) return (sec:match("^[%w_]+") or sec):lower() end
M.section_key = section_key

local function section_entries(sec)
  local out = {}
  for _, e in ipairs(M.entries) do if e.section == sec then out[#out + 1] = e end end
  return out
end

local function section_text(sec)
  local out = { sec .. ":" }
  for _, e in ipairs(section_entries(sec)) do out[#out + 1] = ("  %s"):format(e.sig) end
  out[#out + 1] = "help(\"name\") for one entry."
  return table.concat(out, "\n")
end

-- The edit distance of fp8.config.suggest (core/config.c); names over 64 bytes are not compared.
local function distance(a, b) return require("fp8.config").distance(a, b) or math.huge end

-- suggest(word) -> up to 5 entry or section names near `word` (typos, or names that contain it).
function M.suggest(word)
  load_lazy()
  word = tostring(word):gsub("^fp8%.", "")
  local cands = {}
  for _, e in ipairs(M.entries) do cands[#cands + 1] = e.name end
  for _, sec in ipairs(section_list()) do cands[#cands + 1] = section_key(sec) end
  local aliases = {}   -- the names documented inside another entry (acc:prepare, Tensor:reshape) are answered too
  for name in pairs(M.ALIASES) do aliases[#aliases + 1] = name end
  table.sort(aliases)
  for _, name in ipairs(aliases) do cands[#cands + 1] = name end
  local scored, seen = {}, {}
  -- a suggestion keeps at least one character of the word: "" or "%" matched every two-letter name (Tensor:eq)
  local limit = math.min(math.max(2, #word // 3), #word - 1)
  -- a word longer than every name by more than the limit is near none (the distance is at least the lengths'
  -- difference) and inside none: answered at once, where a 1 MB word was lowered and measured against each of the
  -- ~2,000 names (seconds: the sweep of seed 119 found help(('A'):rep(1 << 20)) past its 5 s limit under ASan)
  local longest = 0
  for _, c in ipairs(cands) do longest = math.max(longest, #c) end
  if #word - longest > limit then return {} end
  local lword = word:lower()
  for _, c in ipairs(cands) do
    if not seen[c] then
      seen[c] = true
      local short = c:gsub("^[%w_]+[:%.]", "")
      local d = math.min(distance(word, c), distance(word, short))
      if #word >= 3 and c:lower():find(lword, 1, true) then d = math.min(d, 1) end
      if d <= limit then scored[#scored + 1] = { c, d } end
    end
  end
  table.sort(scored, function(x, y) if x[2] ~= y[2] then return x[2] < y[2] end return x[1] < y[1] end)
  local out = {}
  for i = 1, math.min(5, #scored) do out[i] = scored[i][1] end
  return out
end

-- text([x]) -> the help text help() prints: a short index of sections without x; an entry, a
-- section (help("tensors")), or suggestions for x.
function M.text(x)
  load_lazy()
  if x == nil then
    local out = { "fp8lab — FP8 mixed-precision training from Lua.",
                  "help(\"section\") lists a section; help(\"name\") or help(fp8.fn) shows one entry.", "" }
    for _, sec in ipairs(section_list()) do
      local es = section_entries(sec)
      if #es > 0 then
        -- as many names as fit an 80-column terminal with the count after them (at least one)
        local head = ("  %-14s %-22s "):format(section_key(sec), sec)
        local names, used = {}, #head
        for i, e in ipairs(es) do
          local more = i < #es and #(", ... (%d)"):format(#es) or 0
          if i > 1 and used + 2 + #e.name + more > 80 then break end
          used = used + (i > 1 and 2 or 0) + #e.name
          names[i] = e.name
        end
        out[#out + 1] = head .. table.concat(names, ", ") .. (#names < #es and (", ... (%d)"):format(#es) or "")
      end
    end
    return table.concat(out, "\n")
  end
  local e, several = M.lookup(x)
  if several then
    -- one function under names of one rank (fp8.config.keys is fp8.settings.list): each name's entry
    local names, parts = {}, {}
    for i, a in ipairs(several) do
      names[i] = a.name:find(":", 1, true) and a.name or "fp8." .. a.name   -- prof:start, Tensor:exp as they are
      parts[i] = entry_text(a.entry)
    end
    return ("%s are the same function; %s:\n\n%s"):format(table.concat(names, " and "),
      #several == 2 and "both entries" or "their entries", table.concat(parts, "\n\n"))
  end
  local sec
  if type(x) == "string" then
    for _, s in ipairs(section_list()) do
      -- a section by its key or name, or (when no entry has the name) its one thing's ("Tensor": Tensors)
      local k, xl = section_key(s), x:lower()
      if k == xl or s:lower() == xl or (not e and k:sub(-1) == "s" and k:sub(1, -2) == xl) then sec = s end
    end
  end
  if e and sec then return entry_text(e) .. "\n\n" .. section_text(sec) end
  if e then return entry_text(e) end
  if sec then return section_text(sec) end
  -- a module table (fp8.optim, fp8.profiler, fp8.nn.functional), or its name ("optim", "fp8.nn"): its entry, or the
  -- entries under its name; fp8 itself: the overview
  local modt = type(x) == "table" and x or type(x) == "string" and module_by_name(x) or nil
  if modt ~= nil and rawequal(modt, rawget(_G, "fp8")) then return M.text() end
  local mod = modt and M.module_name(modt)
  if mod and by_name[mod] then return entry_text(by_name[mod]) end
  if mod then
    -- each entry under mod's name with the names of mod it covers (optim.NAdam: RAdam, Adamax, Adadelta), wrapped
    -- at 80 columns; a name of mod whose entry lies elsewhere, with that entry
    local prefix, lines, covered, listed = mod .. ".", {}, {}, {}
    for alias, target in pairs(M.ALIASES) do
      if alias:sub(1, #prefix) == prefix then
        covered[target] = covered[target] or {}
        table.insert(covered[target], alias)
      end
    end
    for _, list in pairs(covered) do table.sort(list) end
    local function add_line(name, also)
      local line = "  " .. name
      if also then
        local words = {}
        for i, a in ipairs(also) do words[i] = a .. (i < #also and "," or ")") end
        words[1] = "(also " .. words[1]
        for _, w in ipairs(words) do
          if #line + 1 + #w > 80 then lines[#lines + 1] = line; line = "      " .. w else line = line .. " " .. w end
        end
      end
      lines[#lines + 1] = line
    end
    for _, en in ipairs(M.entries) do
      if en.name:sub(1, #prefix) == prefix then
        add_line(en.name, covered[en.name])
        listed[en.name] = true
      end
    end
    local elsewhere = {}
    for target, list in pairs(covered) do
      if not listed[target] and by_name[target] then
        for _, a in ipairs(list) do elsewhere[#elsewhere + 1] = ("%s (in %s)"):format(a, target) end
      end
    end
    table.sort(elsewhere)
    for _, l in ipairs(elsewhere) do add_line(l) end
    if #lines > 0 then
      return ("fp8.%s, a module: help(\"name\") for one of its entries:\n%s"):format(mod, table.concat(lines, "\n"))
    end
  end
  local tensor = rawget(_G, "fp8") and type(fp8.is_tensor) == "function" and fp8.is_tensor(x)
  if tensor then   -- a tensor's methods are the Tensors and Quantization sections
    return "a Tensor: its methods are listed below (help(\"quantize\") or help(x.quantize) for one)\n\n"
      .. section_text("Tensors") .. "\n\n" .. section_text("Quantization")
  end
  local what
  if type(x) == "string" then
    what = "'" .. (#x > 60 and x:sub(1, 57) .. "..." or x) .. "'"
  else   -- one short line: a table's or a tensor's own text can run to many lines, or fail
    local ok, str = pcall(tostring, x)
    what = ok and type(str) == "string" and str:match("^[^\n]*") or type(x)
    if #what > 60 then what = what:sub(1, 57) .. "..." end
  end
  local near = type(x) == "string" and M.suggest(x) or {}
  if #near > 0 then
    return ("no help for %s; did you mean: %s? (help() lists the sections)"):format(what, table.concat(near, ", "))
  end
  return ("no help for %s (help() lists the sections)"):format(what)
end

-- nil_text() -> what help(nil) prints: the value given was nil, which is what a misspelt or undefined name evaluates
-- to (help(fp8.hsit) listed the sections as help() does, without a word that fp8.hsit does not exist).
function M.nil_text()
  return "help(nil): the value given is nil, as a misspelt or undefined name is (help(fp8.hsit));\n"
    .. "help(\"hist\") looks a name up and suggests near ones; help() lists the sections."
end

function M.help(...)
  local x = ...
  require("fp8.opts").no_more("help", "([fn | \"name\"])", select(2, ...))
  if x == nil and select("#", ...) > 0 then print(M.nil_text()) return end
  print(M.text(x))
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.help", { "section_key" })
return M
