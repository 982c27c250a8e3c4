-- attention.lua — fp8.nn.CausalSelfAttention{n_embd, n_head, dropout=0}: a fused qkv projection
-- Linear(d, 3d), causal scaled-dot-product attention over n_head heads, an output projection, and
-- dropout on the attention output (nanoGPT's block; input and output [B, T, n_embd]).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local Linear = require "fp8.nn.linear"
local Dropout = require "fp8.nn.dropout"
local F = require "fp8.nn.functional"
local LayerNorm = require "fp8.nn.layernorm"

local CausalSelfAttention = Module.class("CausalSelfAttention")

-- The config {n_embd=, n_head=, dropout=, bias=} checked in the name of the class being built (CausalSelfAttention, or
-- TransformerBlock before it builds its LayerNorms and its attention: their checks named themselves at
-- transformer.lua's line). widest: the largest weight's rows per n_embd (3: qkv; 4: the block's MLP); level: as
-- the constructor's error().
function CausalSelfAttention._check_cfg(name, cfg, widest, level)
  level = level + 1
  if type(cfg) ~= "table" then
    error(("%s: expected a table {n_embd=, n_head=, dropout=}, got %s"):format(name, type(cfg)), level)
  end
  O.check(name, cfg, { "n_embd", "n_head", "dropout", "bias" }, level)
  if cfg.bias ~= nil and type(cfg.bias) ~= "boolean" then
    error(("%s: bias must be a boolean, got %s"):format(name, type(cfg.bias)), level)
  end
  local d, h = cfg.n_embd, cfg.n_head
  if math.type(d) ~= "integer" or d <= 0 then
    error(("%s: n_embd must be a positive integer, got %s"):format(name, O.got(d)), level)
  end
  if math.type(h) ~= "integer" or h <= 0 or d % h ~= 0 then
    error(("%s: n_head must be a positive integer dividing n_embd=%d, got %s"):format(name, d, tostring(h)), level)
  end
  local p = cfg.dropout
  if p ~= nil and (type(p) ~= "number" or not (p >= 0 and p <= 1)) then   -- `not (...)` also refuses NaN
    error(("%s: dropout must be a probability in [0, 1], got %s"):format(name, O.got(p)), level)
  end
  Module._check_size(name, level, widest .. " * n_embd * n_embd", widest, d, d)
  return d, h
end

function CausalSelfAttention:__init(cfg)
  local d, h = CausalSelfAttention._check_cfg("CausalSelfAttention", cfg, 3, 3)
  self.n_embd, self.n_head = d, h
  self.qkv = Linear(d, 3 * d, cfg.bias ~= false)
  self.proj = Linear(d, d, cfg.bias ~= false)
  self.resid_dropout = Dropout(cfg.dropout or 0)
end

-- The rest of forward from the packed projection qkv [B, T, 3C]: heads split ([B, T, 3C] → q, k, v [B, H, T, D])
-- and merged back to [B, T, C] inside the op. With residual: residual + that, added in the projection's FP8 GEMM
-- where it can (FP8Linear:forward_residual; the dropout after it an identity now).
local function attend(self, qkv, residual)
  local y = F.qkv_attention(qkv, self.n_head, { is_causal = true })
  if residual == nil then return self.resid_dropout(self.proj(y)) end
  local p = self.proj
  if Module._call_hook == nil and Module.runs_forward_of(p, "FP8Linear") and Dropout.is_identity(self.resid_dropout) then
    local out = p:_call_with(p.forward_residual, y, residual)
    if out ~= nil then return out end
  end
  return residual + self.resid_dropout(self.proj(y))
end

local function check_input(self, x)
  if not fp8.is_tensor(x) or x:dim() ~= 3 or x:size(3) ~= self.n_embd then
    Module._forward_error(self, ("expected input [B, T, %d], got %s"):format(self.n_embd,
      fp8.is_tensor(x) and Module._shape_str(x) or type(x)))
  end
end

function CausalSelfAttention:forward(x)
  check_input(self, x)
  return attend(self, self.qkv(x))
end

-- self(ln(x)) with the LayerNorm's output cast to FP8 in its pass where the projection is an FP8Linear that takes
-- it (FP8Linear:forward_layernorm; TransformerBlock), and with residual, residual + that (attend); nil where
-- LayerNorm's pass cannot cast (the caller runs the two and adds).
function CausalSelfAttention:_forward_after_ln(x, ln, residual)
  if not Module.runs_forward_of(self, "CausalSelfAttention") or not LayerNorm.fuses_into(ln, self.qkv) then return nil end
  check_input(self, x)
  local qkv = self.qkv:_call_with(self.qkv.forward_layernorm, x, ln)
  if qkv == nil then return nil end
  return attend(self, qkv, residual)
end

function CausalSelfAttention:extra_repr() return ("n_embd=%d, n_head=%d"):format(self.n_embd, self.n_head) end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(CausalSelfAttention, "CausalSelfAttention")
return CausalSelfAttention
