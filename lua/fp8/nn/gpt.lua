-- gpt.lua — fp8.nn.GPT{vocab_size, block_size, n_layer, n_head, n_embd, dropout=0, bias=true,
-- gradient_checkpointing=false}: a small GPT-2
-- (nanoGPT): token + position embeddings, n_layer pre-LN TransformerBlocks, a final LayerNorm and an
-- LM head tied to the token embedding; bias=false drops the biases of every Linear and LayerNorm (as nanoGPT's).
-- Initialised as nanoGPT: N(0, 0.02), biases 0, and the
-- residual projections (attn.proj, mlp's second Linear) N(0, 0.02/√(2·n_layer)).
local O = require "fp8.opts"
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local Embedding = require "fp8.nn.embedding"
local Linear = require "fp8.nn.linear"   -- at load time, the class the blocks' layers were made from
local LayerNorm = require "fp8.nn.layernorm"
local Dropout = require "fp8.nn.dropout"
local Sequential = require "fp8.nn.sequential"
local TransformerBlock = require "fp8.nn.transformer"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local GPT = Module.class("GPT")

local REQUIRED = { "vocab_size", "block_size", "n_layer", "n_head", "n_embd" }
local VALID = { vocab_size = true, block_size = true, n_layer = true, n_head = true, n_embd = true, dropout = true,
                bias = true, gradient_checkpointing = true }

function GPT:__init(cfg)
  if type(cfg) ~= "table" then
    error(("GPT: expected a config table {vocab_size=, block_size=, n_layer=, n_head=, n_embd=, dropout=}, got %s")
      :format(type(cfg)), 3)
  end
  O.check("GPT", cfg, VALID, 3)
  for _, k in ipairs(REQUIRED) do
    if math.type(cfg[k]) ~= "integer" or cfg[k] <= 0 then
      error(("GPT: %s must be a positive integer, got %s"):format(k, (type(cfg[k]) == "string" and cfg[k] or O.got(cfg[k]))), 3)
    end
  end
  -- (bounded as the encoder stacks' num_layers: n_layer = 2^62 built blocks for ever, each one small; sweep 111)
  if cfg.n_layer > 4096 then
    error(("GPT: n_layer must be an integer in 1..4096, got %s"):format(tostring(cfg.n_layer)), 3)
  end
  if cfg.bias ~= nil and type(cfg.bias) ~= "boolean" then
    error(("GPT: bias must be a boolean, got %s"):format(type(cfg.bias)), 3)
  end
  if cfg.dropout ~= nil then Dropout._check_p("GPT", "dropout", cfg.dropout, 4) end
  if cfg.gradient_checkpointing ~= nil and type(cfg.gradient_checkpointing) ~= "boolean" then
    error(("GPT: gradient_checkpointing must be a boolean, got %s"):format(O.got(cfg.gradient_checkpointing)), 3)
  end
  if cfg.n_embd % cfg.n_head ~= 0 then
    error(("GPT: n_embd (%d) must be divisible by n_head (%d)"):format(cfg.n_embd, cfg.n_head), 3)
  end
  local c = {}
  for k, v in next, cfg do c[k] = v end
  c.dropout = c.dropout or 0
  self.config = c
  self.wte = Embedding(c.vocab_size, c.n_embd)
  self.wpe = Embedding(c.block_size, c.n_embd)
  self.drop = Dropout(c.dropout)
  local blocks = {}
  for i = 1, c.n_layer do
    blocks[i] = TransformerBlock { n_embd = c.n_embd, n_head = c.n_head, dropout = c.dropout, bias = c.bias }
  end
  self.blocks = Sequential(blocks)
  self.ln_f = LayerNorm(c.n_embd, { bias = c.bias ~= false })
  self.is_gradient_checkpointing = c.gradient_checkpointing == true
  self:_init_weights()
end

-- transformers' gradient_checkpointing_enable() / _disable(): in training, each block runs through
-- fp8.utils.checkpoint (lua/fp8/activation_checkpoint.lua): its activations are not kept, it runs again in the
-- backward. The same losses and gradients; the memory of n_layer blocks' activations for a second forward of each.
function GPT:gradient_checkpointing_enable(...)
  O.no_more("GPT:gradient_checkpointing_enable", "no arguments (transformers' gradient_checkpointing_kwargs are "
    .. "torch's checkpoint options, not offered)", ...)
  self.is_gradient_checkpointing = true
  self.config.gradient_checkpointing = true
end
function GPT:gradient_checkpointing_disable(...)
  O.no_more("GPT:gradient_checkpointing_disable", "no arguments", ...)
  self.is_gradient_checkpointing = false
  self.config.gradient_checkpointing = false
end

function GPT:_init_weights()
  local Emb = Embedding
  local std = 0.02
  for _, nm in ipairs(self:named_modules()) do
    local m = nm[2]
    local mt = getmetatable(m)
    if mt == Linear then
      init.normal_(m.weight, 0, std)
      if m.bias then init.zeros_(m.bias) end
    elseif mt == Emb then
      init.normal_(m.weight, 0, std)
    end
  end
  -- GPT-2's scaled init of the projections that write into the residual stream
  local scaled = std / math.sqrt(2 * self.config.n_layer)
  for _, np in ipairs(self:named_parameters()) do
    if np[1]:match("%.attn%.proj%.weight$") or np[1]:match("%.mlp%.2%.weight$") then
      init.normal_(np[2], 0, scaled)
    end
  end
end

-- forward(idx[B, T] [, targets[B, T]]) → logits[B, T, vocab] (, loss when targets are given)
function GPT:forward(idx, targets)
  if not fp8.is_tensor(idx) or idx:dim() ~= 2 then
    Module._forward_error(self, ("expected token ids [B, T], got %s"):format(fp8.is_tensor(idx)
      and Module._shape_str(idx) or type(idx)))
  end
  local B, T = idx:size(1), idx:size(2)
  local c = self.config
  if T > c.block_size then
    Module._forward_error(self, ("sequence length %d is longer than block_size %d"):format(T, c.block_size))
  end
  local pos = fp8.arange(T, { device = idx:device() })   -- positions 0..T-1, where the ids are
  local x = self.drop(self.wte(idx) + self.wpe(pos))  -- [B, T, d] + [T, d]
  if rawget(self, "is_gradient_checkpointing") and self.training and fp8.is_grad_enabled() then
    local checkpoint = require("fp8.activation_checkpoint").checkpoint
    for i = 1, #self.blocks do x = checkpoint(self.blocks[i], x) end
  else
    x = self.blocks(x)
  end
  x = self.ln_f(x)
  local logits = F.linear(x, self.wte.weight)         -- tied head: [B, T, vocab]
  if targets == nil then return logits end
  if not fp8.is_tensor(targets) or targets:numel() ~= B * T then
    Module._forward_error(self, ("targets must be [%d, %d] like idx, got %s"):format(B, T,
      fp8.is_tensor(targets) and Module._shape_str(targets) or type(targets)))
  end
  local loss = F.cross_entropy(logits:reshape { B * T, c.vocab_size }, targets:reshape { B * T })
  return logits, loss
end

-- A small local generator (SplitMix64) so a `seed` makes sampling reproducible without touching
-- the global fp8 RNG stream used by training.
local function splitmix(seed)
  local s = seed
  return function()
    s = s + 0x9E3779B97F4A7C15
    local z = s
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 11) * (1.0 / 9007199254740992.0)   -- 53 bits → [0, 1)
  end
end

-- Every module's training flag, and a function that puts them back as they were: a model that trains may hold
-- some submodules in eval mode (frozen ones), which train(was_training) turned back to training.
local function save_modes(self)
  local saved = {}
  for _, nm in ipairs(self:named_modules()) do saved[#saved + 1] = { nm[2], nm[2].training } end
  return function() for _, s in ipairs(saved) do rawset(s[1], "training", s[2]) end end
end

-- generate(idx[B, T], max_new_tokens [, {temperature=1, top_k=nil, seed=nil}]) → idx[B, T + new]
-- Samples one token at a time from the last position's distribution (temperature 0: greedy), in
-- eval mode; with `seed` the draws come from a private generator (fp8's is left alone), else from fp8's generator.
function GPT:generate(idx, max_new_tokens, opts)
  if not fp8.is_tensor(idx) or idx:dim() ~= 2 then
    error(("generate: idx must be token ids [B, T], got %s"):format(fp8.is_tensor(idx) and Module._shape_str(idx) or type(idx)), 2)
  end
  if math.type(max_new_tokens) ~= "integer" or max_new_tokens < 0 then
    error(("generate: max_new_tokens must be a non-negative integer, got %s"):format(O.got(max_new_tokens)), 2)
  end
  if idx:size(2) == 0 then
    error(("generate: idx %s holds no context: each row needs at least one token to continue"):format(
      Module._shape_str(idx)), 2)
  end
  -- the result [B, T + max_new_tokens] is built in Lua tables one forward pass per token: refuse what
  -- could never finish (or wraps) before starting
  local LIMIT = 1 << 24
  if max_new_tokens > LIMIT or idx:size(1) * (idx:size(2) + max_new_tokens) > LIMIT then
    error(("generate: too large: %d x (%d + %d) tokens (limit %d)"):format(idx:size(1), idx:size(2), max_new_tokens, LIMIT), 2)
  end
  opts = O.check("generate", opts, { "seed", "temperature", "top_k" }, 2)
  local temperature = opts.temperature or 1.0
  if type(temperature) ~= "number" or not (temperature >= 0) then   -- (NaN too: it drew the last token every time)
    error(("generate: temperature must be a number >= 0, got %s"):format(O.got(temperature)), 2)
  end
  local top_k = opts.top_k
  if top_k ~= nil and (math.type(top_k) ~= "integer" or top_k < 1) then
    error(("generate: top_k must be a positive integer, got %s"):format(O.got(top_k)), 2)
  end
  -- a whole float is that integer (as DataLoader's seed); anything else broke inside the generator, or drew from a
  -- float state that lost its low bits at the first step
  local seed = type(opts.seed) == "number" and math.tointeger(opts.seed) or nil
  if opts.seed ~= nil and seed == nil then
    error(("generate: seed must be an integer, got %s"):format(O.got(opts.seed)), 2)
  end
  if idx:size(1) == 0 then return fp8.zeros({ 0, idx:size(2) + max_new_tokens }, { device = self:device() }) end
  -- without a seed, fp8's generator (fp8.manual_seed / set_seed), as torch's multinomial draws from torch's: Lua's
  -- math.random, seeded from the clock, gave another sample every run whatever the script seeded
  local rand = seed and splitmix(seed) or function() return fp8.rand({ 1 }):item() end
  local V, bs = self.config.vocab_size, self.config.block_size
  local rows = idx:totable()
  local B = #rows
  local dev = self:device()
  local function step()
    local T = #rows[1]
    local first = math.max(1, T - bs + 1)             -- crop the context to block_size
    local ctx = {}
    for b = 1, B do ctx[b] = table.move(rows[b], first, T, 1, {}) end
    local logits = self(fp8.tensor(ctx):to(dev))      -- [B, Tc, V]
    local Tc = logits:size(2)
    local last = logits:narrow(2, Tc, 1):reshape { B, V }:totable()
    for b = 1, B do
      local l = last[b]
      -- a NaN or an infinity in the logits (a model whose weights went NaN) drew the last token every time, or
      -- greedily the first, without a word; torch's multinomial refuses such probabilities
      for i = 1, V do
        if not (l[i] > -math.huge and l[i] < math.huge) then
          error(("generate: the logits of row %d hold %s at token %d: the model's weights or inputs are not finite")
            :format(b, l[i] ~= l[i] and "NaN" or tostring(l[i]), i - 1), 0)
        end
      end
      local tok
      if temperature == 0 then
        tok = 1
        for i = 2, V do if l[i] > l[tok] then tok = i end end
      else
        local cut = -math.huge
        if top_k and top_k < V then
          local sorted = table.move(l, 1, V, 1, {})
          table.sort(sorted, function(a, c) return a > c end)
          cut = sorted[top_k]
        end
        local mx = -math.huge
        for i = 1, V do if l[i] > mx then mx = l[i] end end
        local p, sum = {}, 0
        for i = 1, V do
          p[i] = l[i] >= cut and math.exp((l[i] - mx) / temperature) or 0
          sum = sum + p[i]
        end
        local r, acc = rand() * sum, 0
        tok = V
        for i = 1, V do
          acc = acc + p[i]
          if r < acc and p[i] > 0 then tok = i break end
        end
      end
      rows[b][#rows[b] + 1] = tok - 1                  -- token ids are 0-based
    end
  end
  -- sampling runs in eval mode (no dropout) without recording a graph; every module's mode is restored after
  local restore = save_modes(self)
  self:eval()
  local run = function() for _ = 1, max_new_tokens do step() end end
  local no_grad = (package.loaded.fp8 or {}).no_grad or fp8.no_grad
  local ok, err
  if no_grad then ok, err = pcall(no_grad, run) else ok, err = pcall(run) end
  restore()
  if not ok then error(err, 0) end
  return fp8.tensor(rows):to(idx:device())
end

-- evaluate(loader) -> the mean loss over every (x, y) batch of loader, weighted by batch size, in eval
-- mode (no dropout; FP8 layers as the recipe evaluates) without recording a graph; every module's mode is restored.
function GPT:evaluate(loader)
  -- tensors and modules are callable too, but not iterators (a module's forward complained of the loop's arguments)
  local mt = getmetatable(loader)
  local bad = fp8.is_tensor(loader) and "a tensor" or Module.is_module(loader) and "a module (" .. loader:type_name() .. ")"
    or type(loader) ~= "function" and not (type(mt) == "table" and rawget(mt, "__call") ~= nil) and type(loader)
  if bad then
    error(("GPT:evaluate: expected a data loader (what `for x, y in loader do` loops over), got %s"):format(bad), 2)
  end
  local restore = save_modes(self)
  self:eval()
  local sum, n = 0, 0
  local ok, err = pcall(fp8.no_grad, function()
    for x, y in loader do
      if y == nil then   -- without targets the forward gives no loss ("attempt to index a nil value (local 'loss')")
        error("GPT:evaluate: the loader gave a batch without targets: it must give (x, y), token ids and their "
          .. "next tokens", 0)
      end
      local _, loss = self(x, y)
      sum, n = sum + loss:item() * x:size(1), n + x:size(1)
    end
  end)
  restore()
  if not ok then error(err, 0) end
  if n == 0 then error("GPT:evaluate: the loader gave no batch", 2) end
  return sum / n
end

function GPT:extra_repr() return "" end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(GPT, "GPT")
return GPT
