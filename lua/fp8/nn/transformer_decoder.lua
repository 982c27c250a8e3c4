-- transformer_decoder.lua — torch's fp8.nn.TransformerDecoderLayer(d_model, nhead [, {dim_feedforward=2048,
-- dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true}]) and
-- fp8.nn.TransformerDecoder(decoder_layer, num_layers [, {norm=}]).
-- The layer is torch's: self-attention over the target (self_attn), attention from the target to the encoder's
-- output, the memory (multihead_attn), and the feed-forward block (linear1 → activation → dropout → linear2), each
-- followed by its dropout (dropout1, dropout2, dropout3) and added to its input, with LayerNorms norm1, norm2 and
-- norm3 after each sum (post-norm, torch's default) or before each block (norm_first). It takes the encoder layer's
-- options (lua/fp8/nn/transformer_encoder.lua) and carries torch's submodule names, so a state_dict moves between
-- the two. The decoder stacks num_layers copies of the layer it is given, each from that layer's weights (torch
-- deep-copies it), then the optional norm.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local Linear = require "fp8.nn.linear"
local LayerNorm = require "fp8.nn.layernorm"
local Dropout = require "fp8.nn.dropout"
local MHA = require "fp8.nn.multihead_attention"
local TE = require "fp8.nn.transformer_encoder"

local M = {}

local Layer = Module.class("TransformerDecoderLayer")
M.TransformerDecoderLayer = Layer
local LN = "TransformerDecoderLayer"

function Layer:__init(d_model, nhead, opts)
  local c = TE._layer_config(LN, d_model, nhead, opts, 4)
  self._cfg = c
  local d, p, bias = c.d_model, c.dropout, c.bias
  local mha = { dropout = p, bias = bias, batch_first = c.batch_first }
  -- in torch's order of registration (its state_dict's order)
  self.self_attn = MHA(d, c.nhead, mha)
  self.multihead_attn = MHA(d, c.nhead, mha)
  self.linear1 = Linear(d, c.dim_feedforward, bias)
  self.dropout = Dropout(p)
  self.linear2 = Linear(c.dim_feedforward, d, bias)
  self.norm_first = c.norm_first
  for i = 1, 3 do self["norm" .. i] = LayerNorm(d, { eps = c.layer_norm_eps, bias = bias }) end
  for i = 1, 3 do self["dropout" .. i] = Dropout(p) end
  self.activation = c.activation
end

local FORWARD_OPTS = { "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask", "tgt_is_causal",
                       "memory_is_causal" }

-- a forward's arguments (the layer's and the stack's): two tensors, its options checked, nothing more
local function check_call(tgt, memory, opts, extra)
  if extra > 0 then
    error("takes (tgt, memory [, {tgt_mask=, memory_mask=, tgt_key_padding_mask=, memory_key_padding_mask=, "
      .. "tgt_is_causal=, memory_is_causal=}])", 0)
  end
  local is_tensor = require("fp8.core").is_tensor
  if not is_tensor(tgt) then error(("expected a tensor tgt, got %s"):format(O.got(tgt)), 0) end
  if not is_tensor(memory) then error(("expected a tensor memory, got %s"):format(O.got(memory)), 0) end
  return TE._forward_opts(opts, FORWARD_OPTS)
end

-- layer(tgt, memory [, {tgt_mask=, memory_mask=, tgt_key_padding_mask=, memory_key_padding_mask=,
-- tgt_is_causal=false, memory_is_causal=false}]): tgt [T, N, E] and memory [S, N, E] ([N, T, E] and [N, S, E] with
-- batch_first; [T, E] and [S, E] unbatched); the masks are MultiheadAttention's attn_mask and key_padding_mask of
-- the self-attention (tgt_*) and of the attention to the memory (memory_*)
function Layer:forward(tgt, memory, opts, ...)
  opts = check_call(tgt, memory, opts, select("#", ...))
  local sa_opts = { attn_mask = opts.tgt_mask, key_padding_mask = opts.tgt_key_padding_mask, need_weights = false,
                    is_causal = opts.tgt_is_causal }
  local ca_opts = { attn_mask = opts.memory_mask, key_padding_mask = opts.memory_key_padding_mask,
                    need_weights = false, is_causal = opts.memory_is_causal }
  local function sa(x) return self.dropout1((self.self_attn(x, x, x, sa_opts))) end
  local function ca(x) return self.dropout2((self.multihead_attn(x, memory, memory, ca_opts))) end
  local function ff(x) return self.dropout3(self.linear2(self.dropout(TE._act(self, self.linear1(x))))) end
  local x = tgt
  if self.norm_first then
    x = x + sa(self.norm1(x))
    x = x + ca(self.norm2(x))
    return x + ff(self.norm3(x))
  end
  x = self.norm1(x + sa(x))
  x = self.norm2(x + ca(x))
  return self.norm3(x + ff(x))
end

Layer.extra_repr = TE._layer_repr

Layer._clone = TE._clone   -- (torch's copy.deepcopy of it)

local Decoder = Module.class("TransformerDecoder")
M.TransformerDecoder = Decoder
local DN = "TransformerDecoder"

function Decoder:__init(layer, num_layers, opts)
  opts = TE._stack_options(DN, "TransformerDecoderLayer", layer, num_layers, opts, { "norm" }, 4)
  TE._fill_stack(self, layer, num_layers, opts.norm)
end

-- decoder(tgt, memory [, {the layer's options}]): every layer in turn, then the norm
function Decoder:forward(tgt, memory, opts, ...)
  opts = check_call(tgt, memory, opts, select("#", ...))
  local x = tgt
  for i = 1, self.num_layers do x = self.layers[i](x, memory, opts) end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

Decoder.extra_repr = TE._stack_repr

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Layer, LN)
O.strict_arity(Decoder, DN)
return M
