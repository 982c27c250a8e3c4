-- fp8_layernorm.lua — fp8.nn.FP8LayerNorm: TransformerEngine's LayerNorm. The same normalisation in
-- high precision (its output feeds an FP8 Linear, whose input cast is where FP8 happens); a class of its
-- own so has_fp8_layers and the reverse conversion (fp8.convert) see it.
local Module = require "fp8.nn.module"
local LayerNorm = require "fp8.nn.layernorm"

return Module.class("FP8LayerNorm", LayerNorm)
