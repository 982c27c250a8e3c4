-- fp8.nn — neural-network modules (one class per file here), the functional ops (fp8.nn.F),
-- initialisers (fp8.nn.init) and utils (clip_grad_norm_). Loaded on first use of fp8.nn.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local act = require "fp8.nn.activations"
local reshape = require "fp8.nn.reshape_layers"
local losses = require "fp8.nn.losses"

local nn = {
  Module = Module,
  Linear = require "fp8.nn.linear",
  LayerNorm = require "fp8.nn.layernorm",
  Identity = reshape.Identity,
  Flatten = reshape.Flatten,
  Unflatten = reshape.Unflatten,
  RMSNorm = require "fp8.nn.rms_norm",
  Dropout = require "fp8.nn.dropout",
  Embedding = require "fp8.nn.embedding",
  Sequential = require "fp8.nn.sequential",
  ModuleList = require "fp8.nn.module_list",
  ModuleDict = require "fp8.nn.module_dict",
  ParameterList = require("fp8.nn.parameter_containers").ParameterList,
  ParameterDict = require("fp8.nn.parameter_containers").ParameterDict,
  CausalSelfAttention = require "fp8.nn.attention",
  MultiheadAttention = require "fp8.nn.multihead_attention",
  CosineSimilarity = require("fp8.nn.distance").CosineSimilarity,
  PairwiseDistance = require("fp8.nn.distance").PairwiseDistance,
  TransformerEncoderLayer = require("fp8.nn.transformer_encoder").TransformerEncoderLayer,
  TransformerEncoder = require("fp8.nn.transformer_encoder").TransformerEncoder,
  TransformerDecoderLayer = require("fp8.nn.transformer_decoder").TransformerDecoderLayer,
  TransformerDecoder = require("fp8.nn.transformer_decoder").TransformerDecoder,
  Transformer = require "fp8.nn.encoder_decoder",
  TransformerBlock = require "fp8.nn.transformer",
  GPT = require "fp8.nn.gpt",
  FP8Linear = require "fp8.nn.fp8_linear",        -- the FP8 layers (fp8.convert_model swaps them in)
  FP8LayerNorm = require "fp8.nn.fp8_layernorm",
  functional = F,
  F = F,
  init = require "fp8.nn.init_fns",
  utils = require "fp8.nn.utils",
}
for name, cls in next, act do nn[name] = cls end      -- ReLU, GELU, SiLU, ..., Softmax, GLU, Mish, ...
for name, cls in next, losses do nn[name] = cls end   -- CrossEntropyLoss, ..., KLDivLoss
-- each of these modules' classes under its own name in nn
for _, mod in ipairs{
  -- Conv1d, Conv2d, MaxPool1d/2d, AvgPool1d/2d, Unfold, Fold (and F.conv2d, F.unfold, ...: lua/fp8/nn/conv.lua)
  "fp8.nn.conv",
  -- ConvTranspose1d, ConvTranspose2d (and F.conv_transpose1d/2d: lua/fp8/nn/conv_transpose.lua)
  "fp8.nn.conv_transpose",
  -- ZeroPad, ConstantPad, ReflectionPad, ReplicationPad, CircularPad 1d/2d/3d (F.pad's modes: lua/fp8/nn/padding.lua)
  "fp8.nn.padding",
  -- AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d (and F.adaptive_*: lua/fp8/nn/adaptive_pool.lua)
  "fp8.nn.adaptive_pool",
  -- Upsample, UpsamplingNearest2d, UpsamplingBilinear2d, PixelShuffle, PixelUnshuffle (and F.interpolate,
  -- F.pixel_shuffle, F.pixel_unshuffle: lua/fp8/nn/upsample.lua)
  "fp8.nn.upsample",
  -- RNN, LSTM, GRU and RNNCell, LSTMCell, GRUCell (lua/fp8/nn/rnn.lua)
  "fp8.nn.rnn",
  -- Dropout1d, Dropout2d, Dropout3d (and F.dropout1d/2d/3d: lua/fp8/nn/channel_dropout.lua)
  "fp8.nn.channel_dropout",
  -- Bilinear (and F.bilinear: lua/fp8/nn/bilinear.lua)
  "fp8.nn.bilinear",
  -- LocalResponseNorm, Softmax2d, ChannelShuffle (and F.local_response_norm, F.channel_shuffle, F.gumbel_softmax:
  -- lua/fp8/nn/channel_ops.lua)
  "fp8.nn.channel_ops",
  -- MaxUnpool1d, MaxUnpool2d (and F.max_unpool1d/2d: lua/fp8/nn/unpool.lua)
  "fp8.nn.unpool",
  -- EmbeddingBag (and F.embedding_bag: lua/fp8/nn/embedding_bag.lua)
  "fp8.nn.embedding_bag",
  -- BatchNorm1d, BatchNorm2d, GroupNorm (and F.batch_norm, F.group_norm: lua/fp8/nn/batch_norm.lua)
  "fp8.nn.batch_norm",
} do
  for name, cls in next, (require(mod)) do nn[name] = cls end
end

-- Parameter(t [, requires_grad=true]): marks a tensor as a trainable leaf (requires_grad) and returns it; torch's
-- nn.Parameter(data, requires_grad=True), whose False makes a parameter that trains nothing (a frozen weight). The
-- flag was dropped until stop 99: Parameter(t, false) required grad.
function nn.Parameter(t, requires_grad)
  if not fp8.is_tensor(t) then error(("Parameter: expected a tensor, got %s"):format(type(t)), 2) end
  if t:is_released() then error("Parameter: the tensor has been released (freed or closed)", 2) end
  if requires_grad ~= nil and type(requires_grad) ~= "boolean" then
    error(("Parameter: requires_grad must be a boolean, got %s"):format(require("fp8.opts").got(requires_grad)), 2)
  end
  requires_grad = requires_grad ~= false
  -- torch's Parameter is always a leaf: a tensor an op made gives a new leaf sharing its data (torch's data.detach());
  -- until stop 100 it came back with its history (Parameter(x * 2) a non-leaf that a module then refused, and
  -- Parameter(x * 2, false) requires_grad's own 'only leaf tensors can change requires_grad' at this file's line)
  if not t:is_leaf() then t = t:detach() end
  if requires_grad and t:is_fp8() then   -- (requires_grad's refusal named this file's line, not Parameter)
    error(("Parameter: an %s tensor cannot require gradients (it holds quantized data): keep an fp32 master copy, "
      .. "or pass requires_grad=false"):format(t:dtype()), 2)
  end
  if t:requires_grad() ~= requires_grad then t:requires_grad(requires_grad) end
  return t
end

-- isinstance(obj, cls | {cls, ...}): Python's isinstance for modules: whether obj is a Module whose class is cls or
-- inherits from it (fp8.nn.FP8Linear from Linear); anything that is not a Module is an instance of none.
function nn.isinstance(obj, cls, ...)
  require("fp8.opts").no_more("isinstance", "(obj, class or {classes})", ...)
  local list = { cls }
  if type(cls) == "table" and not rawget(cls, "__is_module_class") and cls ~= Module then
    list = {}   -- read raw: a proxy's __len or __index cannot make it endless
    for i = 1, rawlen(cls) do list[i] = rawget(cls, i) end
  end
  if #list == 0 then error("isinstance: expected a Module class or a list of them, got an empty table", 2) end
  for _, c in ipairs(list) do
    if type(c) ~= "table" or not (rawget(c, "__is_module_class") or c == Module) then
      error(("isinstance: arg 2 must be a Module class (fp8.nn.Linear, ...) or a list of them, got %s"):format(
        require("fp8.opts").got(c)), 2)
    end
  end
  if type(obj) ~= "table" then return false end
  local mt = getmetatable(obj)
  while type(mt) == "table" and (rawget(mt, "__is_module_class") or mt == Module) do
    for _, c in ipairs(list) do if mt == c then return true end end
    if mt == Module then break end
    mt = rawget(mt, "super")
  end
  return false
end

function nn.cross_entropy(...) return F.cross_entropy(...) end
function nn.mse_loss(...) return F.mse_loss(...) end

local help = require "fp8.help"
local function add(name, sig, doc) help.add { section = "Training", name = name, sig = sig, doc = doc } end
add("nn.Module", "fp8.nn.Module.class(name [, parent])",
  "Base class of layers. m(x) runs m:forward(x). Assigning a Module or a tensor that requires grad\n"
  .. "to self.x registers it. Methods: parameters(), named_parameters() (dotted names in order),\n"
  .. "get_submodule(name) / get_parameter(name) / get_buffer(name) (by those dotted names),\n"
  .. "train()/eval(), state_dict()/load_state_dict(sd [, strict]), apply(fn), num_parameters(), zero_grad([set_to_none]),\n"
  .. "requires_grad_([flag]) (freezes with false),\n"
  .. "to(\"cuda\"|\"cpu\") / cuda() / cpu() (parameters and buffers move in place), device(); float() is m itself\n"
  .. "where everything is fp32 (half(), bfloat16(), double() and to(dtype) are refused: parameters keep their dtype);\n"
  .. "register_forward_pre_hook(hook) / register_forward_hook(hook) call hooks around forward (see their own help).\n"
  .. "fp8.nn.Parameter(t [, requires_grad=true]) marks a tensor as a trainable leaf (requires grad; false: frozen)\n"
  .. "and returns it; a tensor an op made gives a new leaf sharing its data (torch's data.detach()).\n"
  .. "fp8.nn.isinstance(m, cls | {cls, ...}): Python's isinstance for modules (subclasses count), as in\n"
  .. "model:apply(function(m) if fp8.nn.isinstance(m, fp8.nn.Linear) then\n"
  .. "  fp8.nn.init.normal_(m.weight, 0, 0.02) end end).")
add("nn.Module:register_forward_hook",
  "m:register_forward_hook(hook [, {prepend=false, always_call=false}]) / "
  .. "m:register_forward_pre_hook(hook [, {prepend=false}]) -> handle",
  "torch's module hooks. hook(m, args, ...) runs after forward with its arguments (a list, args.n of them) and its\n"
  .. "results, and returns nothing to keep them or the results to use instead; a pre-hook hook(m, args) runs before\n"
  .. "it and returns nothing, a table of new arguments, or one value as the only argument. Hooks run in the order\n"
  .. "registered (prepend=true: first); always_call=true also runs the hook when forward raises (no results).\n"
  .. "handle:remove() takes the hook out (`local h <close> = m:register_forward_hook(f)` removes it at the block's\n"
  .. "end). A hooked module is always called as a module: the fused paths (GELU or LayerNorm inside the next\n"
  .. "FP8Linear's cast) are not taken for it. To look at an activation and its gradient:\n"
  .. "  blk.ln1:register_forward_hook(function(_, _, out) act = out:retain_grad() end)  -- act.grad after backward\n"
  .. "Backward: m:register_full_backward_pre_hook(hook): hook(m, grad_output) before m's backward (returns nothing or\n"
  .. "a table like grad_output, {g}); m:register_full_backward_hook(hook): hook(m, grad_input, grad_output) once all\n"
  .. "of m's input gradients are known (returns nothing or a table like grad_input), one entry per argument and per\n"
  .. "result, as torch's.")
add("nn.Linear", "fp8.nn.Linear(in_features, out_features [, bias=true])",
  "y = x·Wᵀ + b for x [..., in_features]; W, b ~ U(-1/√in, 1/√in) as in PyTorch.")
add("nn.LayerNorm", "fp8.nn.LayerNorm(n [, {eps=1e-5, elementwise_affine=true, bias=true}])",
  "Normalises the last dimension; weight ones, bias zeros.")
add("nn.Embedding", "fp8.nn.Embedding(num_embeddings, embedding_dim [, padding_idx | {padding_idx=, max_norm=, "
  .. "norm_type=2}]) / Embedding.from_pretrained(embeddings [, {freeze=true, padding_idx=, max_norm=, norm_type=}])",
  "A lookup table, weight ~ N(0, 1) as in PyTorch: m(ids) takes 0-based token ids (a tensor) -> [..., embedding_dim].\n"
  .. "padding_idx (negative: from the end): that row starts at zeros and takes no gradient (torch's; also\n"
  .. "F.embedding(ids, weight, padding_idx | {...})). max_norm: the rows a forward looks up whose norm passes it\n"
  .. "are scaled to it in place first, as torch's. from_pretrained copies the table, frozen unless freeze=false.\n"
  .. "scale_grad_by_freq and sparse are refused.")
add("nn.EmbeddingBag", "fp8.nn.EmbeddingBag(num_embeddings, embedding_dim [, {mode=\"mean\", "
  .. "include_last_offset=false, padding_idx=, max_norm=, norm_type=2}]); m(input [, offsets [, per_sample_weights]]); "
  .. "F.embedding_bag(input, weight [, offsets] [, {...}])",
  "torch's: the sum, mean or max of each bag of embeddings: the rows of a 2-D input, or the spans of a 1-D input\n"
  .. "that offsets start (include_last_offset: the last offset ends the last bag). per_sample_weights scale the\n"
  .. "entries (mode \"sum\" only); padding_idx entries are left out (of the mean's count too); an empty bag gives\n"
  .. "zeros. Differentiable in the weight and the per-sample weights. scale_grad_by_freq and sparse are refused.")
add("nn.Dropout", "fp8.nn.Dropout([p=0.5]) | Dropout{p=}",
  "Zeroes each element with probability p in training and scales the rest by 1/(1-p); the identity in eval mode.")
add("nn.GELU", "fp8.nn.GELU([approximate=\"none\"|\"tanh\"]) | GELU{approximate=} / fp8.nn.ReLU() / SiLU() / "
  .. "Sigmoid() / Tanh() / Softmax([dim]) / LogSoftmax / Softmin / GLU([dim=-1]) / "
  .. "LeakyReLU([negative_slope=0.01]) / ELU([alpha=1]) / CELU([alpha=1]) / Softplus([beta=1 [, threshold=20]]) / "
  .. "Hardtanh([min_val=-1 [, max_val=1]]) / ReLU6() / Hardsigmoid() / Hardswish() / Mish() / SELU() / LogSigmoid()",
  "The activations as modules (F.gelu: exact erf, or the tanh approximation; F.relu, F.silu = x·sigmoid(x),\n"
  .. "F.sigmoid, F.tanh, F.softmax, F.log_softmax, F.softmin, F.glu, F.leaky_relu, F.elu, F.celu, F.softplus,\n"
  .. "F.hardtanh, F.relu6, F.hardsigmoid, F.hardswish, F.mish, F.selu, F.logsigmoid: torch's, their gradients\n"
  .. "torch's at 0 and at the kinks too). Softmax, LogSoftmax, Softmin and their F forms without dim take\n"
  .. "torch's implicit choice where it is the last dim (inputs up to 2-d) and refuse past that, where torch's\n"
  .. "deprecated rule takes dim 1 (3-d) or 2 (4-d and up).")
add("nn.RMSNorm", "fp8.nn.RMSNorm(n [, {eps, elementwise_affine=true}]) / F.rms_norm(x, n [, weight [, eps]])",
  "torch's RMSNorm over the last dimension (F.rms_norm: or the last dims normalized_shape names, {H, W}):\n"
  .. "x / sqrt(mean(x^2) + eps) * weight (ones at first); eps fp32's machine epsilon (2^-23, for\n"
  .. "bf16/fp16 inputs too: torch computes in fp32) unless given, as torch's eps=None. Not converted by the\n"
  .. "FP8 recipes.")
add("nn.Identity", "fp8.nn.Identity(...) / fp8.nn.Flatten([start_dim=2 [, end_dim=-1]]) / fp8.nn.Unflatten(dim, sizes)",
  "Identity returns its input (its constructor's arguments dropped, as torch's: a stand-in layer); Flatten merges\n"
  .. "dims start_dim..end_dim (1-based: the default keeps the batch dim, as torch's Flatten(1)); Unflatten splits dim\n"
  .. "into the sizes given (one may be -1).")
add("nn.PReLU",
  "fp8.nn.PReLU([num_parameters=1 [, init=0.25]]) / Softsign() / Tanhshrink() / Threshold(threshold, value) / "
  .. "Hardshrink([lambd=0.5]) / Softshrink([lambd=0.5])",
  "torch's: PReLU is x where x > 0, weight·x elsewhere, the weight learned (one, or one per channel: dim 2);\n"
  .. "F.prelu(x, weight), F.softsign (x / (1 + |x|)), F.tanhshrink (x - tanh x), F.threshold(x, threshold, value)\n"
  .. "(value where x <= threshold, x elsewhere: NaN stays NaN), F.hardshrink(x [, lambd]) (0 where |x| <= lambd,\n"
  .. "else x), F.softshrink(x [, lambd]) (x ∓ lambd beyond ±lambd, else 0); values and gradients checked against\n"
  .. "torch's, at NaN and the infinities too.")
add("nn.TripletMarginLoss", "fp8.nn.TripletMarginLoss([{margin=1, p=2, eps=1e-6, swap=false, reduction}]) / "
  .. "MarginRankingLoss / CosineEmbeddingLoss / HingeEmbeddingLoss / SoftMarginLoss / PairwiseDistance([p=2 [, eps [, "
  .. "keepdim]]])",
  "torch's losses over embeddings and signed targets: loss(anchor, positive, negative) (F.triplet_margin_loss(\n"
  .. "anchor, positive, negative [, opts])) is max(0, margin + d(a, p) - d(a, n)), d F.pairwise_distance (||x1 -\n"
  .. "x2 + eps||_p along the last dim); F.margin_ranking_loss(x1, x2, y), F.cosine_embedding_loss(x1, x2, y),\n"
  .. "F.hinge_embedding_loss(x, y), F.soft_margin_loss(x, y) (y of +1/-1);\n"
  .. "values and every gradient checked against torch's.")
add("nn.GaussianNLLLoss", "fp8.nn.GaussianNLLLoss([{full=false, eps=1e-6, reduction}]) / "
  .. "PoissonNLLLoss([{log_input=true, full=false, eps=1e-8, reduction}])",
  "torch's likelihood losses: loss(input, target, var) (F.gaussian_nll_loss(input, target, var [, opts])) is\n"
  .. "0.5·(log v + (input - target)^2 / v), v = var clamped at eps (its gradient kept), var of input's shape, one dim\n"
  .. "fewer, one dim of 1, or a number; F.poisson_nll_loss(input, target [, opts]) is exp(input) - target·input (or\n"
  .. "input - target·log(input + eps)), full adding Stirling's term.")
add("nn.CrossEntropyLoss", "fp8.nn.CrossEntropyLoss([{weight, label_smoothing, ignore_index, reduction}]) / "
  .. "NLLLoss([{weight, ignore_index, reduction}]) / "
  .. "MSELoss([{reduction}]) / L1Loss([{reduction}]) / BCEWithLogitsLoss([{reduction, pos_weight}]) / "
  .. "SmoothL1Loss([{reduction, beta}]) / HuberLoss([{reduction, delta}]) / KLDivLoss([{reduction, log_target}])",
  "torch's loss modules: loss(input, target) is F.cross_entropy / F.nll_loss / F.mse_loss / F.smooth_l1_loss /\n"
  .. "F.huber_loss / F.kl_div (input log-probabilities; reduction \"batchmean\" is the KL divergence) with the\n"
  .. "options given when it was made (checked then). F.nll_loss(log_probs[N,C], targets[N] [, {ignore_index=-100, reduction}]):\n"
  .. "-log_probs[i, t_i], the mean over the rows not ignored. F.one_hot(ids [, num_classes=-1]) -> [ids..., C] of\n"
  .. "1 and 0 (fp32; C the largest id + 1 with -1). F.l1_loss(input, target [, {reduction}]) and\n"
  .. "F.binary_cross_entropy_with_logits(input, target [, {reduction, pos_weight}]) as torch's (the log sigmoids\n"
  .. "are logsigmoid's: no overflow far out, torch's gradient at 0 and at infinite logits). F.normalize(x [, {p=2,\n"
  .. "dim=2, eps=1e-12}]) = x / max(|x|_p, eps) (any p but NaN, torch's); F.pad(x, {left, right, ...} [,\n"
  .. "{mode=\"constant\", value=0}]) pads (or, negative, crops) the last dims; mode \"reflect\" (mirror about the\n"
  .. "edge), \"replicate\" (repeat the edge) or \"circular\" (wrap around) pad the last 1-3 dims of an unbatched or\n"
  .. "batched input, as torch's.")
add("nn.CausalSelfAttention", "fp8.nn.CausalSelfAttention{n_embd, n_head, dropout=0, bias=true}",
  "nanoGPT's attention: one qkv projection Linear(d, 3d), causal attention over n_head heads (F.qkv_attention),\n"
  .. "an output projection and dropout on its output; [B, T, n_embd] in and out.")
add("nn.ParameterList", "fp8.nn.ParameterList([{t1, t2, ...}]) / fp8.nn.ParameterDict([{name = t, ...}])",
  "torch's parameter containers: each tensor registered as a parameter (a leaf, set to require grad), keys \"0\",\n"
  .. "\"1\", ... or the names. List: l[i] (1-based, negative from the end), l[i] = t, #l, ipairs(l), append(t),\n"
  .. "extend(list). Dict: d.name / d[\"name\"], keys(), values(), items(), update(t), pop(name), clear(), #d.")
help.ALIASES["nn.ParameterDict"] = "nn.ParameterList"
add("nn.CosineSimilarity",
  "fp8.nn.CosineSimilarity([dim=2 [, eps=1e-8]]) / F.cosine_similarity(x1, x2 [, dim [, eps]])",
  "torch's: the cosine of x1 and x2 (broadcast) along dim, each norm clamped at eps where it divides (a zero\n"
  .. "vector's gradient stays finite). dim counts from 1: the default 2 is torch's dim=1.")
add("nn.BCELoss",
  "fp8.nn.BCELoss([{weight=, reduction=}]) / F.binary_cross_entropy(input, target [, {weight=, reduction=}])",
  "torch's binary cross-entropy of probabilities in [0, 1] (others refused): each log clamped at -100, so 0 and 1\n"
  .. "give 100, not inf; the gradients are torch's formulas. For logits, BCEWithLogitsLoss.")
add("nn.MultiheadAttention", "fp8.nn.MultiheadAttention(embed_dim, num_heads [, {dropout=0, bias=true,\n"
  .. "  add_bias_kv=false, add_zero_attn=false, kdim=, vdim=, batch_first=false}])",
  "torch.nn.MultiheadAttention, its parameters under torch's names (in_proj_weight, in_proj_bias, out_proj).\n"
  .. "local out, w = mha(q, k, v [, {key_padding_mask=, need_weights=true, attn_mask=, average_attn_weights=true,\n"
  .. "is_causal=false}]): q [L, N, E] ([N, L, E] with batch_first), k and v [S, N, kdim/vdim]; w [N, L, S] averaged\n"
  .. "over the heads (nil with need_weights=false). Masks are added to the scores (-math.huge where attention may\n"
  .. "not go; one of only 0s and 1s is refused: there is no bool dtype). out_proj runs as FP8 once converted.\n"
  .. "add_bias_kv: learned bias_k/bias_v appended to the keys and values; add_zero_attn: a zero key and value.")
add("nn.TransformerEncoderLayer", "fp8.nn.TransformerEncoderLayer(d_model, nhead [, {dim_feedforward=2048,\n"
  .. "  dropout=0.1, activation=\"relu\", layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true}])",
  "torch's encoder layer: self_attn (a MultiheadAttention), linear1 -> activation -> dropout -> linear2, dropout1/2,\n"
  .. "norm1/2 after each residual sum (or before each block with norm_first); torch's submodule names.\n"
  .. "layer(src [, {src_mask=, src_key_padding_mask=, is_causal=}]). Also fp8.nn.TransformerEncoder(layer, num_layers\n"
  .. "[, {norm=}]): num_layers copies of layer (each from its weights, as torch's deep copy), then norm;\n"
  .. "encoder(src [, {mask=, src_key_padding_mask=, is_causal=}]).")
help.ALIASES["nn.TransformerEncoder"] = "nn.TransformerEncoderLayer"
add("nn.TransformerDecoderLayer", "fp8.nn.TransformerDecoderLayer(d_model, nhead [, {the encoder layer's options}])",
  "torch's decoder layer: self_attn over the target, multihead_attn from it to the memory (the encoder's output),\n"
  .. "linear1 -> activation -> dropout -> linear2; dropout1/2/3, norm1/2/3 after each residual sum (or before each\n"
  .. "block with norm_first); torch's submodule names. layer(tgt, memory [, {tgt_mask=, memory_mask=,\n"
  .. "tgt_key_padding_mask=, memory_key_padding_mask=, tgt_is_causal=, memory_is_causal=}]). Also\n"
  .. "fp8.nn.TransformerDecoder(layer, num_layers [, {norm=}]): num_layers copies of layer, then norm; decoder(tgt,\n"
  .. "memory [, {the same options}]).")
help.ALIASES["nn.TransformerDecoder"] = "nn.TransformerDecoderLayer"
add("nn.Transformer", "fp8.nn.Transformer([d_model=512, nhead=8 [, {num_encoder_layers=6, num_decoder_layers=6,\n"
  .. "  dim_feedforward=2048, dropout=0.1, activation=\"relu\", custom_encoder=, custom_decoder=,\n"
  .. "  layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true}]]) or one table of them",
  "torch.nn.Transformer: encoder (TransformerEncoder + LayerNorm) and decoder (TransformerDecoder + LayerNorm), every\n"
  .. "parameter of more than one dim then Xavier-uniform (torch's _reset_parameters). model(src, tgt [, {src_mask=,\n"
  .. "tgt_mask=, memory_mask=, src_key_padding_mask=, tgt_key_padding_mask=, memory_key_padding_mask=,\n"
  .. "src_is_causal=, tgt_is_causal=, memory_is_causal=}]) -> [T, N, E].\n"
  .. "fp8.nn.Transformer.generate_square_subsequent_mask(sz): [sz, sz] of 0 on and below the diagonal, -inf\n"
  .. "above it. No nested-tensor inference path (torch's returns 0 at padded positions there).")
help.ALIASES["nn.Transformer.generate_square_subsequent_mask"] = "nn.Transformer"
add("nn.TransformerBlock", "fp8.nn.TransformerBlock{n_embd, n_head, dropout=0, bias=true}",
  "A pre-LayerNorm block: x + attn(ln1(x)), then x + mlp(ln2(x)), mlp = Linear(d, 4d) -> GELU(tanh) -> Linear(4d, d)\n"
  .. "-> Dropout (the GPT's blocks).")
add("nn.FP8Linear", "fp8.nn.FP8Linear(in_features, out_features [, bias=true], recipe) / "
  .. "fp8.nn.FP8LayerNorm(n [, {...}])",
  "The FP8 layers fp8.convert_model and acc:prepare swap in: FP8Linear runs its three GEMMs (fprop, dgrad, wgrad)\n"
  .. "in FP8 under FP8 autocast with the recipe's per-role scaling (its state: m.fp8_meta:state(), the buffer\n"
  .. "fp8_state); FP8LayerNorm is LayerNorm's class for TransformerEngine's, the same normalisation in high precision.")
add("nn.FP8Linear:forward_gelu", "layer:forward_gelu(x [, residual]) / layer:forward_residual(x, residual) / "
  .. "layer:forward_layernorm(x, ln)",
  "The fused forms Sequential and TransformerBlock call: layer(GELU(x)) with GELU's tanh form (+ residual if given);\n"
  .. "residual + layer(x); layer(ln(x)) for the LayerNorm module ln. The same results, gradients and recipe state as\n"
  .. "the two ops in turn, with the input's FP8 cast made in GELU's or LayerNorm's pass (or the residual added as the\n"
  .. "GEMM stores its result) where the core can. Each returns nil when the layer would not run in FP8 now (outside\n"
  .. "FP8 autocast; forward_layernorm also when x, ln and the layer do not fit together): the caller runs the two.")
add("nn.FP8Linear:fp8_update", "layer:fp8_update() / fp8.nn.FP8Linear.as_recipe(r [, level]) -> recipe table",
  "fp8_update(): the delayed-scaling update of the layer's three roles after an optimizer step (layer.fp8_meta:update();\n"
  .. "a no-op for current scaling; a prepared optimizer does it, and without one the next training forward that finds\n"
  .. "the weight written since the last makes it first, once per step). as_recipe(r [, level]): the recipe table a\n"
  .. "layer is built from, for a recipe kwargs handler (TERecipeKwargs{...}, AORecipeKwargs, MSAMPRecipeKwargs,\n"
  .. "FP8RecipeKwargs, resolved as the Accelerator resolves it) or a recipe table\n"
  .. "{backend=\"te\"|\"ao\"|\"msamp\", ...} (checked: a field its backend lacks is refused); anything else raises,\n"
  .. "blaming the caller `level` up (error()'s level, an integer >= 1; 1 by default).")
help.ALIASES["nn.FP8Linear:forward_residual"] = "nn.FP8Linear:forward_gelu"
help.ALIASES["nn.FP8Linear:forward_layernorm"] = "nn.FP8Linear:forward_gelu"
help.ALIASES["nn.FP8Linear.as_recipe"] = "nn.FP8Linear:fp8_update"
add("FP8Meta", "layer.fp8_meta:state() -> t / :load_state(t) / :update() / :drop_cache()",
  "An FP8Linear's recipe state (the C object fp8.FP8Meta). state(): per role (input, weight, grad) {format, rule,\n"
  .. "pow2, margin, algo, interval, scale, scale_inv, amax (the last cast's), amax_history_value,\n"
  .. "amax_history_max, numel, underflow, saturated, nan, updates, warmup, warm, in_time, history}, and hp,\n"
  .. "granularity, fast_accum and the counters forwards, backwards, weight_casts, cache_hits, fused_input_casts,\n"
  .. "dy_handovers, residual_adds. load_state(t): scales, histories and update counts from such a table (the\n"
  .. "history lengths must match: checkpoints use it). update(): the delayed-scaling update (layer:fp8_update()).\n"
  .. "drop_cache(): forgets the cached FP8 cast of the weight, so the next forward casts it afresh.")
help.ALIASES["nn.FP8Linear.fp8_meta"] = "FP8Meta"
if help.class then help.class { registry = "fp8.FP8Meta", prefix = "FP8Meta", entry = "FP8Meta" } end
add("nn.GPT:gradient_checkpointing_enable", "gpt:gradient_checkpointing_enable() / gpt:gradient_checkpointing_disable()",
  "transformers' names: in training each block then runs through fp8.utils.checkpoint (its activations are not\n"
  .. "kept; it runs again in the backward): the same losses and gradients for a second forward of each block.\n"
  .. "gpt.is_gradient_checkpointing says which; nn.GPT{..., gradient_checkpointing=true} starts enabled. No arguments\n"
  .. "(transformers' gradient_checkpointing_kwargs are refused).")
help.ALIASES["nn.GPT:gradient_checkpointing_disable"] = "nn.GPT:gradient_checkpointing_enable"
help.ALIASES["nn.GPT:is_gradient_checkpointing"] = "nn.GPT:gradient_checkpointing_enable"
add("nn.Sequential", "fp8.nn.Sequential(m1, m2, ...) | Sequential{m1, m2, ...}",
  "Runs layers in order; they are named \"0\", \"1\", ...; errors say which layer failed. #s counts them, s[i] is\n"
  .. "the i-th (1-based, negative from the end). s:append(m) (add), s:extend(list or Sequential),\n"
  .. "s:insert(i, m) (m becomes s[i]; #s + 1 appends) and s:pop(i) -> the layer, as torch's insert(i - 1, m) and\n"
  .. "pop(i - 1); after insert and pop the layers are renamed \"0\"..\"n-1\" in order, as torch's. A GELU(\"tanh\")\n"
  .. "followed by an FP8Linear runs inside that layer (FP8Linear:forward_gelu: under per-tensor scaling, on the CPU,\n"
  .. "its input cast in GELU's pass, and GELU's backward casts dY for an FP8Linear before it; under ao rowwise,\n"
  .. "GELU made once for its per-row and per-column casts), and so does a\n"
  .. "LayerNorm followed by an FP8Linear (FP8Linear:forward_layernorm: LayerNorm's output cast in its pass);\n"
  .. "the same bits either way. A TransformerBlock's residual adds run in its last FP8Linears' GEMMs\n"
  .. "(FP8Linear:forward_residual(x, residual) = residual + layer(x); fp8_meta:state().residual_adds).")
add("nn.ModuleList", "fp8.nn.ModuleList{m1, m2, ...} / fp8.nn.ModuleDict{name = m, ...}",
  "torch's containers: layers registered as submodules (their parameters, state_dict keys \"0.weight\" or\n"
  .. "\"name.weight\", :to() and the FP8 conversion reach them) that the model's own forward runs; calling one is\n"
  .. "refused (no forward). A ModuleList is indexed and changed as a Sequential (l[i], #l, ipairs(l), append, extend,\n"
  .. "insert, pop); a ModuleDict by name (d.name, d[\"name\"]; keys(), values(), items(), update(t), pop(name),\n"
  .. "clear(), #d; a table's names are taken sorted, a list of {name, m} pairs keeps its order). A plain Lua table\n"
  .. "of layers in a module's field registers nothing, as a Python list in torch: a notice names it.")
add("nn.GPT", "fp8.nn.GPT{vocab_size, block_size, n_layer, n_head, n_embd, dropout=0, bias=true,\n"
  .. "  gradient_checkpointing=false}",
  "A small GPT-2 (bias=false: no biases in its Linears and LayerNorms, as nanoGPT's option; gradient_checkpointing:\n"
  .. "help(\"nn.GPT:gradient_checkpointing_enable\")):\n"
  .. "model(idx[B,T] [, targets]) → logits[B,T,V] (, loss);\n"
  .. "model:generate(idx, n, {temperature=1, top_k, seed}) samples n more tokens (ids are 0-based; seed, an\n"
  .. "integer: a generator of its own, reproducible, leaving fp8's untouched; without it fp8's generator draws,\n"
  .. "which fp8.manual_seed / fp8.set_seed seed);\n"
  .. "model:evaluate(loader) → mean loss over the loader's (x, y) batches, in eval mode, without a graph.")
add("nn.utils.clip_grad_norm_",
  "fp8.nn.utils.clip_grad_norm_(params, max_norm [, norm_type=2 (p > 0, or math.huge)\n"
  .. "  [, error_if_nonfinite=false]]) -> norm",
  "Scales all gradients by min(1, max_norm / (norm + 1e-6)), as torch's (a NaN norm makes them NaN; with\n"
  .. "error_if_nonfinite a NaN or inf norm raises instead); returns the norm before clipping.")
add("nn.Conv2d", "fp8.nn.Conv2d(in_channels, out_channels, kernel_size [, {stride=1, padding=0, dilation=1, "
  .. "groups=1, bias=true, padding_mode=\"zeros\"}]) / Conv1d(...) / MaxPool2d(kernel_size [, {stride, padding, "
  .. "dilation, ceil_mode}]) / AvgPool2d(kernel_size [, {stride, padding, ceil_mode, count_include_pad, "
  .. "divisor_override}]) / MaxPool1d / AvgPool1d / "
  .. "Unfold(kernel_size [, {...}]) / Fold(output_size, kernel_size [, {...}])",
  "torch's convolutions and pooling, built of differentiable ops: F.unfold (the core's im2col, no index tensor)\n"
  .. "then one batched GEMM per group (bf16 under autocast, as torch's); a depthwise conv (groups = in_channels)\n"
  .. "and the max pools' maxima computed directly over the planes; F.conv2d(x, w [, b] [, opts]), F.conv1d,\n"
  .. "F.max_pool2d, F.avg_pool2d, F.max_pool1d, F.avg_pool1d, F.unfold, F.fold. padding: an integer, a pair,\n"
  .. "\"valid\" or \"same\"; weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch's default. FP8 recipes convert\n"
  .. "Linear layers "
  .. "only (as TransformerEngine and torchao): convolutions stay in high precision. padding_mode \"reflect\",\n"
  .. "\"replicate\" or \"circular\" pads the input by F.pad in that mode first, as torch's. ceil_mode=true rounds\n"
  .. "a pooling's output size up, as torch's (what its last windows reach past the padding counts for nothing).\n"
  .. "MaxPool's return_indices=true also returns each maximum's flat input position (fp32; torch's int64), which\n"
  .. "MaxUnpool1d/2d(kernel_size [, {stride, padding}]) and F.max_unpool1d / F.max_unpool2d(x, indices, kernel_size\n"
  .. "[, {stride, padding, output_size}]) take back. A channels-last input or weight (NHWC memory seen as\n"
  .. "[N, C, H, W], torch's channels_last) gives a channels-last conv2d result, as torch's, read and written\n"
  .. "in place by oneDNN on the CPU. Transposed convolutions: help(\"nn.ConvTranspose2d\").")
add("nn.ConvTranspose2d", "fp8.nn.ConvTranspose2d(in_channels, out_channels, kernel_size [, {stride=1, padding=0, "
  .. "output_padding=0, groups=1, bias=true, dilation=1}]) / ConvTranspose1d(...); m(x [, output_size])",
  "torch's transposed convolutions, the adjoint of Conv2d/Conv1d in its input (upsampling): one batched GEMM per\n"
  .. "group spreads each input position over a kernel of output positions, F.fold's col2im adds them up, then\n"
  .. "padding is cropped and output_padding added on the bottom and right: an output of (H-1)*stride -\n"
  .. "2*padding + dilation*(k-1) + output_padding + 1. weight [in_channels, out_channels / groups, kh, kw],\n"
  .. "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with torch's fan_in of it (out_channels / groups * kh * kw). output_size\n"
  .. "(the spatial sizes or the whole shape) picks the output_padding that gives it, as torch's. Functions:\n"
  .. "F.conv_transpose2d(x, w [, b] [, opts]), F.conv_transpose1d. padding_mode other than \"zeros\" is refused,\n"
  .. "as torch's. High precision under every FP8 recipe (recipes convert Linear layers only).")
add("nn.ZeroPad2d", "fp8.nn.ZeroPad2d(padding) / ConstantPad2d(padding, value) / ReflectionPad2d(padding) / "
  .. "ReplicationPad2d(padding) / CircularPad2d(padding), and their 1d and 3d forms",
  "torch's padding layers: F.pad in the mode each names over the last 1, 2 or 3 dims. padding an integer (every\n"
  .. "side) or a list {left, right [, top, bottom [, front, back]]}; negative amounts crop. Reflection, replication\n"
  .. "and circular padding take torch's limits (see F.pad: help(\"nn.functional\")).")
add("nn.AdaptiveAvgPool2d", "fp8.nn.AdaptiveAvgPool2d(output_size) / AdaptiveMaxPool2d(output_size) / "
  .. "AdaptiveAvgPool1d / AdaptiveMaxPool1d; F.adaptive_avg_pool2d(x, output_size), F.adaptive_max_pool2d, "
  .. "F.adaptive_avg_pool1d, F.adaptive_max_pool1d",
  "torch's adaptive pooling: output position i of a dim of n pooled to m is the mean (max) of input positions\n"
  .. "floor(i*n/m) .. ceil((i+1)*n/m) - 1, torch's overlapping windows. output_size an integer or a list, nil\n"
  .. "keeping the input's size ({nil, 5}); AdaptiveAvgPool2d(1) is a global average pool. Differentiable\n"
  .. "(gathers and reductions); bf16/fp16 pooled in fp32, rounded once. return_indices is refused.")
add("nn.Upsample", "fp8.nn.Upsample{size= | scale_factor=, mode=\"nearest\", align_corners=, "
  .. "recompute_scale_factor=} / UpsamplingNearest2d{...} / UpsamplingBilinear2d{...}; F.interpolate(x, {...}) or "
  .. "F.interpolate(x, size [, {mode=, align_corners=}])",
  "torch's resampling of the last 1-3 dims of [N, C, ...]: mode \"nearest\", \"nearest-exact\", \"linear\" (3-D),\n"
  .. "\"bilinear\" or \"bicubic\" (4-D), \"trilinear\" (5-D) or \"area\" (adaptive average pooling). Source\n"
  .. "positions follow torch's kernels in fp32: scale = 1/scale_factor when given (unless\n"
  .. "recompute_scale_factor=true), else in/out; linear: (dst + 0.5)*scale - 0.5, or dst*(in-1)/(out-1) with\n"
  .. "align_corners=true (UpsamplingBilinear2d's); bicubic: torch's cubic convolution (A = -0.75) over four\n"
  .. "neighbours, edges clamped. Separable gathers and weighted sums, so differentiable; bf16/fp16 in fp32,\n"
  .. "rounded once. antialias is refused.")
add("nn.PixelShuffle", "fp8.nn.PixelShuffle(upscale_factor) / PixelUnshuffle(downscale_factor); "
  .. "F.pixel_shuffle(x, r), F.pixel_unshuffle(x, r)",
  "torch's sub-pixel reshapes: [..., C*r^2, H, W] <-> [..., C, H*r, W*r] (a reshape and a permute; the\n"
  .. "upsampling of ESPCN and of many decoders).")
add("nn.LSTM", "fp8.nn.LSTM(input_size, hidden_size [, {num_layers=1, bias=true, batch_first=false, dropout=0, "
  .. "bidirectional=false, proj_size=0}]) / GRU(...) / RNN(... nonlinearity=\"tanh\"); out, state = m(x [, state])",
  "torch's recurrent layers: input [T, N, input_size] ([N, T, ...] with batch_first) or unbatched [T, input_size];\n"
  .. "output [T, N, directions*H_out], state [num_layers*directions, N, H_out] (zeros when not given). LSTM's state\n"
  .. "is the list {h, c}, torch's tuple, so out, state = lstm(x, state) carries it on. Gates as torch's CPU cells\n"
  .. "(LSTM i, f, g, o; GRU r, z, n with h' = (h - n)*z + n); parameters weight_ih_l0, weight_hh_l0, bias_ih_l0,\n"
  .. "bias_hh_l0 (weight_hr_l0 with proj_size, _reverse for the backward direction), U(-1/sqrt(H), 1/sqrt(H)), so\n"
  .. "state dicts load both ways. dropout between layers in training only. flatten_parameters() is a no-op.\n"
  .. "Cells: RNNCell(input_size, hidden_size [, bias [, nonlinearity]]), GRUCell, LSTMCell; cell(x [, h]) -> h'\n"
  .. "(LSTMCell: cell(x [, {h, c}]) -> h', c'). High precision under every FP8 recipe.")
add("nn.LocalResponseNorm", "fp8.nn.LocalResponseNorm(size [, {alpha=1e-4, beta=0.75, k=1}]) / Softmax2d() / "
  .. "ChannelShuffle(groups); F.local_response_norm(x, size [, {...}]), F.channel_shuffle(x, groups), "
  .. "F.gumbel_softmax(logits [, {tau=1, hard=false, dim=-1}])",
  "torch's: local response normalization across the channels of [N, C, ...] (x / (k + alpha*mean of the squares\n"
  .. "over size channels)^beta, zero-padded); a softmax over the channels at each position; ShuffleNet's channel\n"
  .. "shuffle; Gumbel-softmax samples (fp8's generator), with hard=true one-hots whose gradient is the soft\n"
  .. "sample's (straight-through). Differentiable.")
add("nn.Bilinear", "fp8.nn.Bilinear(in1_features, in2_features, out_features [, {bias=true}]); "
  .. "F.bilinear(x1, x2, weight [, bias])",
  "torch's bilinear layer: y_o = x1^T W_o x2 + b_o over the last dims ([..., in1] and [..., in2] -> [..., out]);\n"
  .. "weight [out, in1, in2] and bias U(-1/sqrt(in1), 1/sqrt(in1)), torch's init. Differentiable in all four.")
add("nn.MultiMarginLoss", "fp8.nn.MultiMarginLoss([{p=1, margin=1, weight=, reduction=}]) / "
  .. "MultiLabelMarginLoss([{reduction=}]) / MultiLabelSoftMarginLoss([{weight=, reduction=}])",
  "torch's multi-class losses, inputs [N, C] or [C]: multi_margin_loss(x, y) = sum over i != y of\n"
  .. "w[y]*max(0, margin - x[y] + x[i])^p / C (y the 0-based class); multilabel_margin_loss(x, y) the hinge\n"
  .. "max(0, 1 - (x[j] - x[i])) of each target class j (y lists them, ended by -1) against each other class, / C;\n"
  .. "multilabel_soft_margin_loss(x, y) the logistic loss of each class (y of 0/1), weighted, averaged over C.\n"
  .. "Functions F.multi_margin_loss, F.multilabel_margin_loss, F.multilabel_soft_margin_loss. Differentiable.")
add("nn.Dropout2d", "fp8.nn.Dropout2d([p=0.5]) / Dropout1d / Dropout3d; F.dropout2d(x [, p [, training]]), "
  .. "F.dropout1d, F.dropout3d",
  "torch's channel-wise dropout: in training each sample's channel is zeroed whole with probability p and the rest\n"
  .. "scaled by 1/(1-p); the identity in eval. 1d: [N, C, L] or [C, L]; 2d: [N, C, H, W] (a 3-D input is taken\n"
  .. "as [N, C, L], torch 2.x's reading); 3d: [N, C, D, H, W] or [C, D, H, W]. Drawn from fp8.manual_seed's generator.")
add("nn.InstanceNorm2d", "fp8.nn.InstanceNorm2d(num_features [, {eps=1e-5, momentum=0.1, affine=false, "
  .. "track_running_stats=false}]) / InstanceNorm1d / InstanceNorm3d; F.instance_norm(x [, running_mean, running_var, "
  .. "weight, bias, use_input_stats=true, momentum, eps])",
  "torch's instance normalization: each sample's channel normalized over its positions (style transfer, GANs).\n"
  .. "With track_running_stats the batch's average statistics update running_mean/var in training and normalize in\n"
  .. "eval; momentum=false is torch's None (no update). Unbatched inputs [C, ...] too. Differentiable.")
add("nn.BatchNorm2d", "fp8.nn.BatchNorm2d(num_features [, {eps=1e-5, momentum=0.1, affine=true, "
  .. "track_running_stats=true}]) / BatchNorm1d(...) / GroupNorm(num_groups, num_channels [, {eps=1e-5, affine=true}])",
  "torch's: BatchNorm normalizes each channel over the batch (and the positions) by the batch's statistics in\n"
  .. "training, updating running_mean / running_var (momentum=false: torch's None, a cumulative average), and by the\n"
  .. "running ones in eval; GroupNorm over each sample's channel groups. F.batch_norm(x, running_mean, running_var\n"
  .. "[, weight [, bias [, training [, momentum [, eps]]]]]) and F.group_norm(x, num_groups [, weight [, bias\n"
  .. "[, eps]]]) too. num_batches_tracked is a 0-d fp32 buffer (torch's is int64).")
add("nn.utils.get_total_norm", "fp8.nn.utils.get_total_norm(tensors [, norm_type=2 [, error_if_nonfinite=false]]) -> "
  .. "norm / clip_grads_with_norm_(params, max_norm, total_norm)",
  "torch 2.6's two halves of clip_grad_norm_: the norm of the tensors (the gradients) taken together, as a number\n"
  .. "(torch's norm of the per-tensor norms, through the core's rescue; fp32's p = 2 in double);\n"
  .. "then every gradient of params scaled by min(1, max_norm / (total_norm + 1e-6)) in place.")
add("nn.utils.parameters_to_vector", "fp8.nn.utils.parameters_to_vector(params) -> vec / "
  .. "vector_to_parameters(vec, params)",
  "torch's: every parameter flattened into one 1-D tensor, in order (differentiable); and back: vec's slices\n"
  .. "copied into the parameters in place (no gradient recorded).")
add("nn.utils.rnn.pad_sequence", "fp8.nn.utils.rnn.pad_sequence(sequences [, {batch_first=false, padding_value=0, "
  .. "padding_side=\"right\"}]) / unpad_sequence(padded, lengths [, {batch_first=false}])",
  "torch's: sequences [L_i, ...] of one dtype and trailing shape stacked into [max L, B, ...] ([B, max L, ...]\n"
  .. "with batch_first), padded with padding_value on the right (or the left); unpad_sequence gives the list back\n"
  .. "from the lengths. Differentiable. Packed sequences are not offered: the recurrent layers run on padded batches.")
add("nn.utils.clip_grad_value_", "fp8.nn.utils.clip_grad_value_(params, clip_value)",
  "Clamps every gradient element to [-clip_value, clip_value] in place, as torch's (MS-AMP's FP8 gradients are\n"
  .. "refused before any is touched: clip_grad_norm_ scales them).")
add("nn.init", "fp8.nn.init.normal(shape [, mean=0, std=1]) / uniform(shape [, a=0, b=1]) / zeros(shape) / "
  .. "ones(shape)",
  "New fp32 tensors, the random ones drawn from the seeded generator (fp8.manual_seed). The in-place forms\n"
  .. "normal_(t [, mean, std]), uniform_(t [, a, b]), zeros_(t), ones_(t) and copy_(t, src) write into an\n"
  .. "existing tensor (a parameter), keeping its identity, and return it. Also torch's constant_(t, val),\n"
  .. "eye_(t), xavier_uniform_(t [, gain]), xavier_normal_(t [, gain]), kaiming_uniform_(t [, a, mode, nonlinearity])\n"
  .. "and kaiming_normal_ (mode \"fan_in\"|\"fan_out\"), trunc_normal_(t [, mean=0, std=1, a=-2, b=2]),\n"
  .. "orthogonal_(t [, gain=1]), dirac_(t [, groups=1]), sparse_(t, sparsity [, std=0.01]) and\n"
  .. "calculate_gain(nonlinearity [, param]).")
add("nn.functional", "fp8.nn.F.linear / relu / gelu / silu / sigmoid / tanh / leaky_relu / elu / softplus / "
  .. "softmax / log_softmax /\ncross_entropy / nll_loss / mse_loss / l1_loss / binary_cross_entropy_with_logits / "
  .. "normalize / pad /\n"
  .. "layer_norm / rms_norm / one_hot / embedding / dropout / scaled_dot_product_attention(q, k, v [, {is_causal=, "
  .. "scale=,\nattn_mask=, dropout_p=, enable_gqa=}]) / qkv_attention",
  "Differentiable ops; cross_entropy(logits[N,C], targets[N] (0-based ids) or [N,C] (class probabilities)\n"
  .. "[, {weight (C class weights), label_smoothing, ignore_index (ids only), reduction=\"mean\"|\"sum\"|\"none\"}])\n"
  .. "(with weight, the mean of ids divides by the kept rows' weights, as torch's); nll_loss takes weight too.\n"
  .. "Both take torch's other shapes: logits [N,C,d1,...] with targets [N,d1,...], and one sample [C] with a 0-d id.\n"
  .. "scaled_dot_product_attention takes q, k, v [B, H, T, D], or as torch's [B, T, D] (one head) and [..., H, T, D];\n"
  .. "its attn_mask is added to the scores (0 where attention may go, -math.huge where\n"
  .. "not: there is no bool dtype, so a mask of 0s and 1s is refused); with a mask, dropout_p > 0, k/v of another\n"
  .. "length or fewer k/v heads (enable_gqa) the attention is written out (its probabilities materialised).\n"
  .. "qkv_attention(qkv[B,T,3C], n_head [, {is_causal=, scale=}]) -> [B,T,C]: attention on a packed q|k|v projection,\n"
  .. "heads split and merged inside the op (what CausalSelfAttention uses).")

-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(nn, "nn")
return nn
