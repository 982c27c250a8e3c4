-- encoder_decoder.lua — torch's fp8.nn.Transformer([d_model=512, nhead=8 [, {num_encoder_layers=6,
-- num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=, custom_decoder=,
-- layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true}]]), or one table of all of them: the
-- encoder-decoder of "Attention Is All You Need" as torch.nn.Transformer builds it. encoder is a TransformerEncoder of
-- num_encoder_layers TransformerEncoderLayers and a final LayerNorm, decoder a TransformerDecoder of
-- num_decoder_layers TransformerDecoderLayers and a final LayerNorm (or the custom modules given); then every
-- parameter with more than one dim is drawn again Xavier-uniform, as torch's _reset_parameters. Submodule names are
-- torch's, so a state_dict moves between the two. torch's encoder would take its nested-tensor inference path where
-- it can (its default enable_nested_tensor=True); this one always runs the layers as written (the same values,
-- except that torch's path returns 0 at padded positions).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local LayerNorm = require "fp8.nn.layernorm"
local TE = require "fp8.nn.transformer_encoder"
local TD = require "fp8.nn.transformer_decoder"
local init = require "fp8.nn.init_fns"

local Transformer = Module.class("Transformer")
local N = "Transformer"
local OPTIONS = { "d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "dropout",
                  "activation", "custom_encoder", "custom_decoder", "layer_norm_eps", "batch_first", "norm_first",
                  "bias" }
local LAYER_KEYS = { "dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first",
                     "bias" }

local function layer_count(key, v, level)
  if v == nil then return 6 end
  if math.type(v) ~= "integer" or v < 1 or v > 4096 then
    error(("%s: %s must be an integer in 1..4096, got %s"):format(N, key, O.got(v)), level)
  end
  return v
end

function Transformer:__init(d_model, nhead, opts)
  local level = 3
  if type(d_model) == "table" and nhead == nil and opts == nil then
    opts = O.check(N, d_model, OPTIONS, level)
    d_model, nhead = opts.d_model, opts.nhead
  elseif opts ~= nil then
    if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(N, O.got(opts)), level) end
    O.check(N, opts, { table.unpack(OPTIONS, 3) }, level)
  end
  opts = opts or {}
  d_model, nhead = d_model or 512, nhead or 8
  local lkw = { d_model = d_model, nhead = nhead }
  for _, k in ipairs(LAYER_KEYS) do lkw[k] = opts[k] end
  local c = TE._layer_config(N, lkw, nil, nil, level + 1)   -- the layers' options, checked once for both
  local ne = layer_count("num_encoder_layers", opts.num_encoder_layers, level)
  local nd = layer_count("num_decoder_layers", opts.num_decoder_layers, level)
  for _, k in ipairs { "custom_encoder", "custom_decoder" } do
    if opts[k] ~= nil and not Module.is_module(opts[k]) then
      error(("%s: %s must be a module, got %s"):format(N, k, O.got(opts[k])), level)
    end
  end
  local function norm() return LayerNorm(c.d_model, { eps = c.layer_norm_eps, bias = c.bias }) end
  self.encoder = opts.custom_encoder or TE.TransformerEncoder(TE.TransformerEncoderLayer(c), ne, { norm = norm() })
  self.decoder = opts.custom_decoder or TD.TransformerDecoder(TD.TransformerDecoderLayer(c), nd, { norm = norm() })
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then init.xavier_uniform_(p) end
  end
  self.d_model, self.nhead, self.batch_first = c.d_model, c.nhead, c.batch_first
end

local FORWARD_OPTS = { "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
                       "memory_key_padding_mask", "src_is_causal", "tgt_is_causal", "memory_is_causal" }

-- transformer(src, tgt [, {src_mask=, tgt_mask=, memory_mask=, src_key_padding_mask=, tgt_key_padding_mask=,
-- memory_key_padding_mask=, src_is_causal=, tgt_is_causal=, memory_is_causal=false}]): the encoder over src, then the
-- decoder over tgt attending to its output; src [S, N, E], tgt [T, N, E] ([N, S, E], [N, T, E] with batch_first; [S,
-- E], [T, E] unbatched) → [T, N, E]
function Transformer:forward(src, tgt, opts, ...)
  if select("#", ...) > 0 then error("takes (src, tgt [, {src_mask=, tgt_mask=, memory_mask=, ...}])", 0) end
  if not fp8.is_tensor(src) then error(("expected a tensor src, got %s"):format(O.got(src)), 0) end
  if not fp8.is_tensor(tgt) then error(("expected a tensor tgt, got %s"):format(O.got(tgt)), 0) end
  opts = TE._forward_opts(opts, FORWARD_OPTS)
  if src:dim() == 3 then
    local b = self.batch_first and 1 or 2
    if tgt:dim() ~= 3 or src:size(b) ~= tgt:size(b) then
      error(("the batch number of src and tgt must be equal (dim %d%s), got %s and %s"):format(b,
        self.batch_first and ", batch_first" or "", src:shape_str(), tgt:shape_str()), 0)
    end
  end
  if src:dim() < 1 or tgt:dim() < 1 or src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
    error(("the feature number of src and tgt must be equal to d_model=%d, got %s and %s"):format(self.d_model,
      src:shape_str(), tgt:shape_str()), 0)
  end
  local memory = self.encoder(src, { mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask,
    is_causal = opts.src_is_causal })
  return self.decoder(tgt, memory, { tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
    tgt_key_padding_mask = opts.tgt_key_padding_mask, memory_key_padding_mask = opts.memory_key_padding_mask,
    tgt_is_causal = opts.tgt_is_causal, memory_is_causal = opts.memory_is_causal })
end

-- fp8.nn.Transformer.generate_square_subsequent_mask(sz) → [sz, sz]: 0 on and below the diagonal, -inf above it
-- (position i may attend to positions 1..i), torch's static method
function Transformer.generate_square_subsequent_mask(sz, ...)
  if select("#", ...) > 0 then error("generate_square_subsequent_mask: takes (sz)", 2) end
  if math.type(sz) ~= "integer" or sz < 1 or sz > 65536 then
    error(("generate_square_subsequent_mask: sz must be an integer in 1..65536, got %s"):format(O.got(sz)), 2)
  end
  return fp8.full({ sz, sz }, -math.huge):triu(1)
end

function Transformer:extra_repr()
  local d, h = rawget(self, "d_model"), rawget(self, "nhead")
  if math.type(d) ~= "integer" or math.type(h) ~= "integer" then return "" end   -- (not one this class made)
  return ("d_model=%d, nhead=%d%s"):format(d, h, rawget(self, "batch_first") and ", batch_first=true" or "")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Transformer, N)
return Transformer
