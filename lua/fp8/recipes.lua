-- fp8.recipes — the FP8 recipe API gathered in one table (what fp8.convert_model, fp8.stats, ... and
-- `fp8.recipes.*` resolve to). Each piece lives in the file named for it:
--   fp8.nn.FP8Linear, fp8.nn.FP8LayerNorm   the FP8 layer classes (lua/fp8/nn/fp8_linear.lua, fp8_layernorm.lua)
--   fp8.convert                             convert_model and the queries on a model's FP8 layers
--   fp8.fp8_autocast                        FP8 autocast and Accelerate's contextual wrapper
--   fp8.stats                               per layer and role scaling statistics
--   fp8.fp8_state                           the recipe state buffer's layout (checkpoints)
--   layer_config(recipe)                    the recipe → the three roles' configuration (core/recipe.c)
--   NAMED                                   every precision and FP8 recipe under one short name (the scripts' --recipe, --only)
local M = {}
for _, mod in ipairs { "fp8.convert", "fp8.fp8_autocast", "fp8.stats" } do
  for k, v in next, (require(mod)) do M[k] = v end
end
M.FP8Linear = require "fp8.nn.fp8_linear"
M.FP8LayerNorm = require "fp8.nn.fp8_layernorm"
M.layer_config = require("fp8._fp8_layer").layer_config

-- { name, mixed_precision, handler() or nil }: the names scripts/train_char_gpt.lua's --recipe and
-- scripts/compare_recipes.lua's --only take.
local function handler(class, key, value)
  return function() return require("fp8")[class] { [key] = value } end
end
M.NAMED = {
  { "fp32", "no" }, { "fp16", "fp16" }, { "bf16", "bf16" },
  { "te-hybrid", "fp8", handler("TERecipeKwargs", "fp8_format", "HYBRID") },
  { "te-e4m3", "fp8", handler("TERecipeKwargs", "fp8_format", "E4M3") },
  { "ao-tensorwise", "fp8", handler("AORecipeKwargs", "config", "tensorwise") },
  { "ao-rowwise", "fp8", handler("AORecipeKwargs", "config", "rowwise") },
  { "ao-rowwise_gw_hp", "fp8", handler("AORecipeKwargs", "config", "rowwise_with_gw_hp") },
  { "msamp-O1", "fp8", handler("MSAMPRecipeKwargs", "opt_level", "O1") },
  { "msamp-O2", "fp8", handler("MSAMPRecipeKwargs", "opt_level", "O2") },
  { "msamp-O3", "fp8", handler("MSAMPRecipeKwargs", "opt_level", "O3") },
}
local help = require "fp8.help"
help.add { section = "Accelerator & recipes", name = "recipes", sig = "fp8.recipes.<name>",
  doc = "The FP8 recipe API in one table (the Accelerator's pieces, for scripts that convert by hand):\n"
    .. "linears(model) -> {{name, module, parent, key}}: the Linear and FP8Linear layers in forward order\n"
    .. "fp8_layers(model) -> {{name, module}}: the FP8Linear layers; is_fp8_linear(m)\n"
    .. "shape_ok(linear): both dims multiples of 16 (the GPU rule for FP8 GEMMs)\n"
    .. "linear_to_fp8(linear, recipe), ln_to_fp8(ln): the FP8 layer over the same tensors\n"
    .. "to_plain(m): an FP8 layer's plain Linear/LayerNorm over the same tensors (m itself otherwise)\n"
    .. "enabled(): whether FP8 autocast is on; apply_fp8_autowrap(model, recipe), remove_fp8_autowrap(model)\n"
    .. "layer_config(recipe): the three roles' scaling settings; NAMED: every precision and recipe by the\n"
    .. "short name the scripts' --recipe and --only take. Also here: FP8Linear, FP8LayerNorm, convert_model,\n"
    .. "has_fp8_layers, has_ao_layers, fp8_autocast, contextual_fp8_autocast, stats (each has its entry)." }
for _, n in ipairs { "linears", "fp8_layers", "is_fp8_linear", "shape_ok", "linear_to_fp8", "ln_to_fp8", "to_plain",
                     "enabled", "apply_fp8_autowrap", "remove_fp8_autowrap", "layer_config" } do
  help.ALIASES["recipes." .. n] = "recipes"
end
for _, n in ipairs { "convert_model", "has_fp8_layers", "has_ao_layers", "fp8_autocast", "contextual_fp8_autocast",
                     "stats" } do
  help.ALIASES["recipes." .. n] = n
end
help.ALIASES.has_transformer_engine_layers = "has_fp8_layers"   -- fp8's alias (TransformerEngine's name)

-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(M, "recipes")
return M
