-- transformer.lua — fp8.nn.TransformerBlock{n_embd, n_head, dropout=0}: a pre-LayerNorm block,
-- x + attn(ln1(x)), then x + mlp(ln2(x)) with mlp = Linear(d, 4d) → GELU(tanh) → Linear(4d, d) → Dropout.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local Linear = require "fp8.nn.linear"
local LayerNorm = require "fp8.nn.layernorm"
local GELU = require("fp8.nn.activations").GELU
local Dropout = require "fp8.nn.dropout"
local Sequential = require "fp8.nn.sequential"
local CausalSelfAttention = require "fp8.nn.attention"

local TransformerBlock = Module.class("TransformerBlock")

function TransformerBlock:__init(cfg)
  local d = CausalSelfAttention._check_cfg("TransformerBlock", cfg, 4, 3)   -- all of it, before any part is built
  self.ln1 = LayerNorm(d, { bias = cfg.bias ~= false })
  self.attn = CausalSelfAttention(cfg)
  self.ln2 = LayerNorm(d, { bias = cfg.bias ~= false })
  self.mlp = Sequential(Linear(d, 4 * d, cfg.bias ~= false), GELU("tanh"), Linear(4 * d, d, cfg.bias ~= false),
    Dropout(cfg.dropout or 0))
end

-- x + m(ln(x)); where m starts with an FP8Linear that takes it (CausalSelfAttention's and Sequential's
-- _forward_after_ln), LayerNorm's output is cast to FP8 in LayerNorm's pass and never written in fp32, and where m
-- ends with one, x is added as its FP8 GEMM stores its output (FP8Linear:forward_residual): the same results. Not
-- while the profiler times modules, or where either module's forward is replaced on the instance.
local function residual_after_ln(ln, m, x)
  if Module._call_hook == nil and type(m._forward_after_ln) == "function" then   -- it checks m's forward is its class's
    local y = m:_call_with(m._forward_after_ln, x, ln, x)
    if y ~= nil then return y end
  end
  return x + m(ln(x))
end

function TransformerBlock:forward(x)
  x = residual_after_ln(self.ln1, self.attn, x)
  return residual_after_ln(self.ln2, self.mlp, x)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(TransformerBlock, "TransformerBlock")
return TransformerBlock
