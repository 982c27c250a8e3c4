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
  if type(cfg) ~= "table" then
    error(("TransformerBlock: expected a table {n_embd=, n_head=, dropout=}, got %s"):format(type(cfg)), 3)
  end
  O.check("TransformerBlock", cfg, { "n_embd", "n_head", "dropout", "bias" }, 3)
  if cfg.bias ~= nil and type(cfg.bias) ~= "boolean" then
    error(("TransformerBlock: bias must be a boolean, got %s"):format(type(cfg.bias)), 3)
  end
  local d = cfg.n_embd
  self.ln1 = LayerNorm(d, { bias = cfg.bias ~= false })
  self.attn = CausalSelfAttention(cfg)
  self.ln2 = LayerNorm(d, { bias = cfg.bias ~= false })
  self.mlp = Sequential(Linear(d, 4 * d, cfg.bias ~= false), GELU("tanh"), Linear(4 * d, d, cfg.bias ~= false),
    Dropout(cfg.dropout or 0))
end

function TransformerBlock:forward(x)
  x = x + self.attn(self.ln1(x))
  return x + self.mlp(self.ln2(x))
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(TransformerBlock, "TransformerBlock")
return TransformerBlock
