-- transformer_encoder.lua — torch's fp8.nn.TransformerEncoderLayer(d_model, nhead [, {dim_feedforward=2048,
-- dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true}]) and
-- fp8.nn.TransformerEncoder(encoder_layer, num_layers [, {norm=, enable_nested_tensor=false}]).
-- The layer is torch's: self-attention (a MultiheadAttention, self_attn) and a feed-forward block (linear1 →
-- activation → dropout → linear2), each followed by its dropout (dropout1, dropout2) and added to its input, with
-- LayerNorms norm1 and norm2 after each sum (post-norm, torch's default) or before each block (norm_first). Its
-- submodules carry torch's names, so a state_dict moves between the two. The encoder stacks num_layers copies of the
-- layer it is given, each starting from that layer's weights (torch deep-copies it), then the optional norm.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local Linear = require "fp8.nn.linear"
local LayerNorm = require "fp8.nn.layernorm"
local Dropout = require "fp8.nn.dropout"
local F = require "fp8.nn.functional"
local MHA = require "fp8.nn.multihead_attention"
local ModuleList = require "fp8.nn.module_list"
local core = require "fp8.core"

local M = {}

local Layer = Module.class("TransformerEncoderLayer")
M.TransformerEncoderLayer = Layer

local LN = "TransformerEncoderLayer"
local LAYER_OPTS = { "d_model", "nhead", "dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first",
                     "norm_first", "bias" }
local ACTIVATIONS = { relu = F.relu, gelu = F.gelu }

-- _layer_config(name, d_model, nhead, opts, level) -> the checked configuration of an encoder or decoder layer (they
-- take the same options): {d_model=, nhead=, dim_feedforward=, dropout=, activation=, layer_norm_eps=, batch_first=,
-- norm_first=, bias=}, torch's defaults filled in; level: the caller's caller, where the errors point
function M._layer_config(LN, d_model, nhead, opts, level)
  if type(d_model) == "table" then
    if nhead ~= nil or opts ~= nil then
      error(("%s: give (d_model, nhead [, {options}]) or one table {d_model=, nhead=, ...}"):format(LN), level)
    end
    opts = O.check(LN, d_model, LAYER_OPTS, level)
    d_model, nhead = opts.d_model, opts.nhead
  elseif opts ~= nil then
    if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(LN, O.got(opts)), level) end
    O.check(LN, opts, { table.unpack(LAYER_OPTS, 3) }, level)
  end
  opts = opts or {}
  if math.type(d_model) ~= "integer" or d_model <= 0 then
    error(("%s: d_model must be a positive integer, got %s"):format(LN, O.got(d_model)), level)
  end
  if math.type(nhead) ~= "integer" or nhead <= 0 or d_model % nhead ~= 0 then
    error(("%s: nhead must be a positive integer dividing d_model=%d, got %s"):format(LN, d_model, O.got(nhead)), level)
  end
  local ff = opts.dim_feedforward or 2048
  if math.type(ff) ~= "integer" or ff <= 0 then
    error(("%s: dim_feedforward must be a positive integer, got %s"):format(LN, O.got(ff)), level)
  end
  local p = opts.dropout
  if p == nil then p = 0.1 end
  Dropout._check_p(LN, "dropout", p, level + 1)
  for _, k in ipairs { "batch_first", "norm_first", "bias" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s: %s must be a boolean, got %s"):format(LN, k, O.got(opts[k])), level)
    end
  end
  local act = opts.activation or "relu"
  if type(act) == "string" then
    if not ACTIVATIONS[act] then
      error(("%s: activation must be \"relu\", \"gelu\" or a function, got %s"):format(LN, O.got(act)), level)
    end
  elseif type(act) ~= "function" and not Module.is_module(act) then
    error(("%s: activation must be \"relu\", \"gelu\" or a function, got %s"):format(LN, O.got(act)), level)
  end
  local eps = opts.layer_norm_eps or 1e-5
  if type(eps) ~= "number" or not (eps >= 0 and eps < math.huge) then
    error(("%s: layer_norm_eps must be a finite number >= 0, got %s"):format(LN, O.got(eps)), level)
  end
  Module._check_size(LN, level, "dim_feedforward * d_model", ff, d_model)
  return { d_model = d_model, nhead = nhead, dim_feedforward = ff, dropout = p, activation = act,
           layer_norm_eps = eps, batch_first = opts.batch_first or false, norm_first = opts.norm_first or false,
           bias = opts.bias ~= false }
end

function Layer:__init(d_model, nhead, opts)
  local c = M._layer_config(LN, d_model, nhead, opts, 4)
  self._cfg = c
  local d_model, nhead, ff, p, bias, eps = c.d_model, c.nhead, c.dim_feedforward, c.dropout, c.bias, c.layer_norm_eps
  self.self_attn = MHA(d_model, nhead, { dropout = p, bias = bias, batch_first = c.batch_first })
  self.linear1 = Linear(d_model, ff, bias)
  self.dropout = Dropout(p)
  self.linear2 = Linear(ff, d_model, bias)
  self.norm_first = c.norm_first
  self.norm1 = LayerNorm(d_model, { eps = eps, bias = bias })
  self.norm2 = LayerNorm(d_model, { eps = eps, bias = bias })
  self.dropout1 = Dropout(p)
  self.dropout2 = Dropout(p)
  self.activation = c.activation
end

local FORWARD_OPTS = { "src_mask", "src_key_padding_mask", "is_causal" }

-- _forward_opts(opts, names) -> a forward's options checked: a table (nil: none) of the given names, each
-- *is_causal a boolean, in the order given
function M._forward_opts(opts, names)
  if type(names) ~= "table" or getmetatable(names) ~= nil then
    error(("_forward_opts: names must be a plain list of option names, got %s"):format(O.got(names)), 2)
  end
  names = table.move(names, 1, rawlen(names), 1, {})   -- (read raw: a proxy's __len or __index cannot make it endless)
  if opts ~= nil and (type(opts) ~= "table" or require("fp8.core").is_tensor(opts)) then
    error(("options must be a table {%s=}, got %s"):format(table.concat(names, "=, "), O.got(opts)), 0)
  end
  opts = opts or {}
  local proxy = O.proxy_text(opts)   -- (stop 102) a proxy's keys are not read
  if proxy then error(proxy, 0) end
  local valid = {}
  for _, k in ipairs(names) do valid[k] = true end
  for k in next, opts do
    if not valid[k] then error(O.unknown_text(k, names), 0) end
  end
  for _, k in ipairs(names) do
    if k:find("is_causal$") and opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s must be a boolean, got %s"):format(k, O.got(opts[k])), 0)
    end
  end
  return opts
end
local forward_opts = M._forward_opts

-- the layer's activation applied (a name, a function or a module); the decoder layer's too
function M._act(self, x)
  local a = self.activation
  if type(a) == "string" then return ACTIVATIONS[a](x) end
  return a(x)
end
Layer._act = M._act

-- The feed-forward block's first half, dropout(relu(linear1(x))), as linear2 takes it under a bf16 autocast where
-- nothing records a gradient: rounded once to bf16 in one op (F._linear_relu_bf16, the same bits as linear2's own
-- rounding of the fp32 result; docs/performance.md, "TransformerEncoderLayer under bf16 autocast"). nil where that
-- does not hold, or a hook, the profiler's module ranges or a replaced linear1, dropout or linear2 must see each call
-- (linear2 takes a bf16 tensor where it would have taken fp32: a plain Linear of fp32 weights rounds it so itself; a
-- hook on it or another module there saw the bf16 input, a stop 93 review).
local function ff_relu_bf16(self, x)
  local l1, l2 = self.linear1, self.linear2
  if self.activation ~= "relu" or Module._call_hook ~= nil or core.autocast_dtype() ~= "bf16"
     or not Module.runs_forward_of(l1, "Linear") or not Dropout.is_identity(self.dropout)
     or not Module.runs_forward_of(l2, "Linear") or l2.weight:dtype() ~= "fp32"
     or x:dim() < 1 or x:size(-1) ~= l1.in_features then
    return nil
  end
  local w, b = l1.weight, l1.bias
  if core.is_grad_enabled() and (x:requires_grad() or w:requires_grad() or (b ~= nil and b:requires_grad())) then
    return nil
  end
  return F._linear_relu_bf16(x, w, b)
end

-- norm(x + r) for a LayerNorm `norm`: one op (F._add_layer_norm, the sum never in memory; the same bits) where nothing
-- records a gradient, x and r are fp32 of one shape and norm runs LayerNorm's forward unobserved; else the two
local function add_norm(norm, x, r)
  if Module._call_hook == nil and Module.runs_forward_of(norm, "LayerNorm") and x:dtype() == "fp32"
     and r:dtype() == "fp32" and x:dim() >= 1 and x:size(-1) == norm.normalized_shape and x:shape_str() == r:shape_str() then
    local w, b = norm.weight, norm.bias
    if not core.is_grad_enabled() or not (x:requires_grad() or r:requires_grad() or (w ~= nil and w:requires_grad())
                                          or (b ~= nil and b:requires_grad())) then
      return F._add_layer_norm(x, r, w, b, norm.eps)
    end
  end
  return norm(x + r)
end

-- layer(src [, {src_mask=, src_key_padding_mask=, is_causal=false}]): src [S, N, E] ([N, S, E] with batch_first,
-- [S, E] unbatched); the masks are MultiheadAttention's attn_mask and key_padding_mask (added to the scores)
function Layer:forward(src, opts, ...)
  if select("#", ...) > 0 then error("takes (src [, {src_mask=, src_key_padding_mask=, is_causal=}])", 0) end
  if not require("fp8.core").is_tensor(src) then error(("expected a tensor src, got %s"):format(O.got(src)), 0) end
  opts = forward_opts(opts, FORWARD_OPTS)
  local attn_opts = { attn_mask = opts.src_mask, key_padding_mask = opts.src_key_padding_mask, need_weights = false,
                      is_causal = opts.is_causal }
  local function sa(x) return self.dropout1((self.self_attn(x, x, x, attn_opts))) end
  local function ff(x)
    local h = ff_relu_bf16(self, x)
    if h == nil then h = self.dropout(self:_act(self.linear1(x))) end
    return self.dropout2(self.linear2(h))
  end
  local x = src
  if self.norm_first then
    x = x + sa(self.norm1(x))
    return x + ff(self.norm2(x))
  end
  x = add_norm(self.norm1, x, sa(x))
  return add_norm(self.norm2, x, ff(x))
end

function Layer:extra_repr()
  local c = rawget(self, "_cfg") or {}
  if type(c.d_model) ~= "number" then return "" end   -- (not a layer this class made)
  return ("d_model=%d, nhead=%d, dim_feedforward=%d, dropout=%g, activation=%s%s%s"):format(c.d_model, c.nhead,
    c.dim_feedforward, c.dropout, type(c.activation) == "string" and c.activation or "(function)",
    c.batch_first and ", batch_first=true" or "", c.norm_first and ", norm_first=true" or "")
end

M._layer_repr = Layer.extra_repr   -- (the decoder layer's too)

-- a new layer of the same class and configuration with this one's parameters and buffers (torch's copy.deepcopy of
-- it); the decoder layer's too
function M._clone(self)
  local copy = require("fp8.nn.init_fns")._without_draws(getmetatable(self), self._cfg)
  copy:load_state_dict(self:state_dict())
  copy:train(self.training)
  return copy
end
Layer._clone = M._clone

-- whether m is an instance of the class named name or of a subclass of it
function M._is_a(m, name)
  if not Module.is_module(m) then return false end
  local c = getmetatable(m)
  while type(c) == "table" do
    if rawget(c, "__name") == name then return true end
    c = rawget(c, "super")
  end
  return false
end

local Encoder = Module.class("TransformerEncoder")
M.TransformerEncoder = Encoder
local EN = "TransformerEncoder"

-- _stack_options(name, layer_class, layer, num_layers, opts, keys, level) -> the options checked: what an encoder
-- or decoder stack takes (a layer of layer_class, a count, {norm=, ...keys}); level: the constructor's caller
function M._stack_options(name, layer_class, layer, num_layers, opts, keys, level)
  if not M._is_a(layer, layer_class) then
    error(("%s: %s must be a %s, got %s"):format(name, layer_class == "TransformerEncoderLayer" and "encoder_layer"
      or "decoder_layer", layer_class, O.got(layer)), level)
  end
  if math.type(num_layers) ~= "integer" or num_layers < 1 or num_layers > 4096 then
    error(("%s: num_layers must be an integer in 1..4096, got %s"):format(name, O.got(num_layers)), level)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("%s: options must be a table, got %s"):format(name, O.got(opts)), level)
  end
  opts = O.check(name, opts, keys, level)
  if opts.norm ~= nil and not Module.is_module(opts.norm) then
    error(("%s: norm must be a module (a LayerNorm), got %s"):format(name, O.got(opts.norm)), level)
  end
  return opts
end

-- _fill_stack(self, layer, num_layers, norm): num_layers copies of layer (each from its weights), then the norm
function M._fill_stack(self, layer, num_layers, norm)
  local layers = {}
  for i = 1, num_layers do layers[i] = layer:_clone() end
  self.layers = ModuleList(layers)
  self.num_layers = num_layers
  if norm ~= nil then self.norm = norm end
end

function Encoder:__init(layer, num_layers, opts)
  local level = 3
  opts = M._stack_options(EN, "TransformerEncoderLayer", layer, num_layers, opts,
    { "norm", "enable_nested_tensor", "mask_check" }, level + 1)
  if opts.enable_nested_tensor then
    error(("%s: enable_nested_tensor=true is not supported (torch's inference fast path, which also returns 0 at "
      .. "padded positions); give false"):format(EN), level)
  end
  if opts.mask_check ~= nil then
    error(("%s: mask_check is not supported (it checks masks for the nested-tensor fast path, which is not "
      .. "offered)"):format(EN), level)
  end
  M._fill_stack(self, layer, num_layers, opts.norm)
end

local ENCODER_OPTS = { "mask", "src_key_padding_mask", "is_causal" }

-- encoder(src [, {mask=, src_key_padding_mask=, is_causal=}]): every layer in turn, then the norm
function Encoder:forward(src, opts, ...)
  if select("#", ...) > 0 then error("takes (src [, {mask=, src_key_padding_mask=, is_causal=}])", 0) end
  if not require("fp8.core").is_tensor(src) then error(("expected a tensor src, got %s"):format(O.got(src)), 0) end
  opts = forward_opts(opts, ENCODER_OPTS)
  local lo = { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask, is_causal = opts.is_causal }
  local x = src
  for i = 1, self.num_layers do x = self.layers[i](x, lo) end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

function Encoder:extra_repr()
  local n = rawget(self, "num_layers")
  return math.type(n) == "integer" and ("num_layers=%d"):format(n) or ""
end
M._stack_repr = Encoder.extra_repr   -- (the decoder's too)

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Layer, LN)
O.strict_arity(Encoder, EN)
return M
