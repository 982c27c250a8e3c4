-- multihead_attention.lua — fp8.nn.MultiheadAttention(embed_dim, num_heads [, {dropout=0, bias=true,
-- add_bias_kv=false, add_zero_attn=false, kdim=, vdim=, batch_first=false}]): torch.nn.MultiheadAttention. The
-- parameters are torch's, under torch's names, so a state_dict moves between the two: in_proj_weight [3E, E] (or
-- q_proj_weight, k_proj_weight, v_proj_weight where kdim or vdim differ from E), in_proj_bias [3E], bias_k and bias_v
-- [1, 1, E] (add_bias_kv) and out_proj, a Linear(E, E). Initialised as torch's: Xavier-uniform projection weights,
-- zero biases, Xavier-normal bias_k and bias_v, out_proj's weight as a Linear's. The weights returned cover the
-- S keys and the appended ones (S + 1 or S + 2).
-- mha(query, key, value [, {key_padding_mask=, need_weights=true, attn_mask=, average_attn_weights=true,
-- is_causal=false}]) → output, weights: query [L, N, E] ([N, L, E] with batch_first; [L, E] unbatched), key and value
-- [S, N, kdim / vdim]; weights [N, L, S] (averaged over the heads) or [N, H, L, S], nil with need_weights=false.
-- out_proj is called as a module, so FP8 conversion (acc:prepare, fp8.convert) runs it as an FP8Linear; torch's
-- forward reads out_proj's weight itself, so under TransformerEngine's conversion it stays in high precision there.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local Linear = require "fp8.nn.linear"
local Dropout = require "fp8.nn.dropout"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local MHA = Module.class("MultiheadAttention")

local N = "MultiheadAttention"
local OPTIONS = { "embed_dim", "num_heads", "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim",
                  "batch_first" }

function MHA:__init(embed_dim, num_heads, opts)
  local level = 3
  if type(embed_dim) == "table" then
    if num_heads ~= nil or opts ~= nil then
      error(("%s: give (embed_dim, num_heads [, {options}]) or one table {embed_dim=, num_heads=, ...}"):format(N),
        level)
    end
    opts = O.check(N, embed_dim, OPTIONS, level)
    embed_dim, num_heads = opts.embed_dim, opts.num_heads
  elseif type(opts) == "number" then
    opts = { dropout = opts }   -- torch's third positional argument
  elseif opts ~= nil then
    if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(N, O.got(opts)), level) end
    O.check(N, opts, { "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first" }, level)
  end
  opts = opts or {}
  local E, H = embed_dim, num_heads
  if math.type(E) ~= "integer" or E <= 0 then
    error(("%s: embed_dim must be a positive integer, got %s"):format(N, O.got(E)), level)
  end
  if math.type(H) ~= "integer" or H <= 0 or E % H ~= 0 then
    error(("%s: num_heads must be a positive integer dividing embed_dim=%d, got %s"):format(N, E, O.got(H)), level)
  end
  local p = opts.dropout or 0
  Dropout._check_p(N, "dropout", p, level + 1)
  for _, k in ipairs { "bias", "add_bias_kv", "add_zero_attn", "batch_first" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s: %s must be a boolean, got %s"):format(N, k, O.got(opts[k])), level)
    end
  end
  local kdim, vdim = opts.kdim or E, opts.vdim or E
  for _, k in ipairs { "kdim", "vdim" } do
    local v = k == "kdim" and kdim or vdim
    if math.type(v) ~= "integer" or v <= 0 then
      error(("%s: %s must be a positive integer, got %s"):format(N, k, O.got(opts[k])), level)
    end
  end
  Module._check_size(N, level, "3 * embed_dim * embed_dim", 3, E, math.max(E, kdim, vdim))
  self.embed_dim, self.num_heads, self.head_dim = E, H, E // H
  self.kdim, self.vdim, self.dropout = kdim, vdim, p
  self.batch_first = opts.batch_first or false
  self._qkv_same_embed_dim = kdim == E and vdim == E
  if self._qkv_same_embed_dim then
    self:register_parameter("in_proj_weight", init.xavier_uniform_(fp8.zeros { 3 * E, E }))
  else
    self:register_parameter("q_proj_weight", init.xavier_uniform_(fp8.zeros { E, E }))
    self:register_parameter("k_proj_weight", init.xavier_uniform_(fp8.zeros { E, kdim }))
    self:register_parameter("v_proj_weight", init.xavier_uniform_(fp8.zeros { E, vdim }))
  end
  if opts.bias ~= false then self:register_parameter("in_proj_bias", fp8.zeros { 3 * E }) end
  -- add_bias_kv: a learned key and value [1, 1, E] appended to every sequence's projected keys and values (torch's
  -- bias_k and bias_v, drawn Xavier-normal, whatever bias says)
  if opts.add_bias_kv then
    self:register_parameter("bias_k", init.xavier_normal_(fp8.zeros { 1, 1, E }))
    self:register_parameter("bias_v", init.xavier_normal_(fp8.zeros { 1, 1, E }))
  end
  -- add_zero_attn: a key and value of zeros appended to every head's (after the bias)
  self.add_zero_attn = opts.add_zero_attn or false
  self.out_proj = Linear(E, E, opts.bias ~= false)
  if self.out_proj.bias ~= nil then init.zeros_(self.out_proj.bias) end
end

-- mask (nil, or [..., S]) with n zeros appended along its last dim: the appended keys are attended to, as torch pads
local function pad_keys(mask, n)
  if mask == nil or n == 0 then return mask end
  local shape = mask:shape()
  shape[#shape] = n
  return fp8.cat({ mask, fp8.zeros(shape):to(mask:device()) }, #shape)
end

-- torch refuses a mask's dtype it cannot read; here every mask is added, so one of only 0s and 1s (a bool mask
-- written as numbers, which added would barely change anything) is refused with the conversion
local function check_mask(what, m, drop_where)
  if not fp8.is_tensor(m) then error(("%s must be a tensor, got %s"):format(what, O.got(m)), 0) end
  local d = m:detach()
  if d:numel() > 0 and d:eq(0):logical_or(d:eq(1)):all():item() == 1 and d:eq(1):any():item() == 1 then
    error(("%s holds only 0s and 1s: torch reads a bool mask as %s and a float one as added to the scores; "
      .. "here a mask is added, so give -math.huge where attention may not go and 0 elsewhere: "
      .. "fp8.where(m, -math.huge, 0)"):format(what, drop_where), 0)
  end
end

local FORWARD_OPTS = { "key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal" }
local FORWARD_SET = {}
for _, k in ipairs(FORWARD_OPTS) do FORWARD_SET[k] = true end

function MHA:forward(query, key, value, opts, ...)
  if select("#", ...) > 0 then error("takes (query, key, value [, {options}])", 0) end
  for i = 1, 3 do   -- (not ipairs: it stops at a nil)
    local t = select(i, query, key, value)
    if not fp8.is_tensor(t) then
      error(("expected tensors (query, key, value), got %s for %s"):format(O.got(t),
        ({ "query", "key", "value" })[i]), 0)
    end
  end
  if opts ~= nil and (type(opts) ~= "table" or fp8.is_tensor(opts)) then
    error(("options must be a table {key_padding_mask=, need_weights=, attn_mask=, average_attn_weights=, "
      .. "is_causal=}, got %s"):format(O.got(opts)), 0)
  end
  opts = opts or {}
  local proxy = O.proxy_text(opts)   -- (stop 102) a proxy's keys are not read
  if proxy then error(proxy, 0) end
  for k in next, opts do
    if not FORWARD_SET[k] then error(O.unknown_text(k, FORWARD_OPTS), 0) end
  end
  for _, k in ipairs { "need_weights", "average_attn_weights", "is_causal" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s must be a boolean, got %s"):format(k, O.got(opts[k])), 0)
    end
  end
  local need_weights = opts.need_weights ~= false
  local E, H, D = self.embed_dim, self.num_heads, self.head_dim
  local batched = query:dim() == 3
  if query:dim() ~= 2 and query:dim() ~= 3 then
    error(("query must be [L, N, E]%s or [L, E] (unbatched), got %s"):format(
      self.batch_first and " ([N, L, E]: batch_first)" or "", query:shape_str()), 0)
  end
  if key:dim() ~= query:dim() or value:dim() ~= query:dim() then
    error(("query, key and value must have the same number of dims (batched or not), got %s, %s and %s")
      :format(query:shape_str(), key:shape_str(), value:shape_str()), 0)
  end
  local q, k, v = query, key, value
  if not batched then
    q, k, v = q:unsqueeze(2), k:unsqueeze(2), v:unsqueeze(2)   -- [L, 1, E]: torch's unbatched inputs
  elseif self.batch_first then
    q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2)
  end
  -- now [L, N, E], [S, N, kdim], [S, N, vdim]
  local L, B, S = q:size(1), q:size(2), k:size(1)
  if q:size(3) ~= E or k:size(3) ~= self.kdim or v:size(3) ~= self.vdim then
    error(("expected query [..., %d], key [..., %d] and value [..., %d], got %s, %s and %s"):format(E, self.kdim,
      self.vdim, query:shape_str(), key:shape_str(), value:shape_str()), 0)
  end
  if k:size(2) ~= B or v:size(2) ~= B or v:size(1) ~= S then
    error(("key and value must be [S, N, ...] with query's batch N=%d and one S, got %s and %s%s"):format(B,
      key:shape_str(), value:shape_str(), self.batch_first and " (batch_first: [N, S, ...])" or ""), 0)
  end
  -- the masks, merged into one additive [N, H, L, S] (or broadcastable) mask, as torch merges them
  local mask = nil
  if opts.attn_mask ~= nil then
    local m = opts.attn_mask
    check_mask("attn_mask", m, "where attention may not go (True)")
    if m:dim() == 2 and m:size(1) == L and m:size(2) == S then
      mask = m
    elseif m:dim() == 3 and m:size(1) == B * H and m:size(2) == L and m:size(3) == S then
      mask = m:reshape { B, H, L, S }
    else
      error(("attn_mask must be [L, S] = [%d, %d] or [N·num_heads, L, S] = [%d, %d, %d], got %s"):format(L, S,
        B * H, L, S, m:shape_str()), 0)
    end
  elseif opts.is_causal then
    error("is_causal=true needs attn_mask (torch's: is_causal is a hint that attn_mask is the causal mask); give "
      .. "the causal mask: fp8.full({L, L}, -math.huge):triu(1)", 0)
  end
  if opts.key_padding_mask ~= nil then
    local m = opts.key_padding_mask
    check_mask("key_padding_mask", m, "the keys to ignore (True)")
    local want = batched and { B, S } or { S }
    if m:dim() ~= #want or m:size(1) ~= want[1] or (batched and m:size(2) ~= S) then
      error(("key_padding_mask must be %s, got %s"):format(batched and ("[N, S] = [%d, %d]"):format(B, S)
        or ("[S] = [%d]"):format(S), m:shape_str()), 0)
    end
    m = m:reshape { B, 1, 1, S }
    mask = mask == nil and m or mask + m
  end
  local p = self.training and self.dropout or 0
  -- batch_first self-attention with nothing but the heads to split, no gradient recorded: the packed projection
  -- [N, L, 3E] read in place by the attention (F.qkv_attention) and its [N, L, E] result projected as it is, where
  -- the path below transposes to [L, N, E] and back and copies the heads out and in (the same bits: each row's
  -- products and each head's attention are the same operations on the same values; docs/performance.md,
  -- "TransformerEncoderLayer under bf16 autocast")
  local w, b = self.in_proj_weight, self.in_proj_bias
  if batched and self.batch_first and self._qkv_same_embed_dim and rawequal(query, key) and rawequal(key, value)
     and mask == nil and not need_weights and p == 0 and self.bias_k == nil and not self.add_zero_attn
     and not (fp8.is_grad_enabled() and (query:requires_grad() or w:requires_grad() or (b ~= nil and b:requires_grad())))
  then
    return self.out_proj(F.qkv_attention(F.linear(query, w, b), H)), nil
  end
  -- the input projections: one GEMM for self-attention's packed weight, else the weight's rows per input
  local qp, kp, vp
  local bq, bk, bv
  if b ~= nil then bq, bk, bv = b:narrow(1, 1, E), b:narrow(1, E + 1, E), b:narrow(1, 2 * E + 1, E) end
  if self._qkv_same_embed_dim then
    if rawequal(query, key) and rawequal(key, value) then
      qp, kp, vp = F.linear(q, w, b):chunk(3, -1)
    else
      qp = F.linear(q, w:narrow(1, 1, E), bq)
      kp = F.linear(k, w:narrow(1, E + 1, E), bk)
      vp = F.linear(v, w:narrow(1, 2 * E + 1, E), bv)
    end
  else
    qp, kp, vp = F.linear(q, self.q_proj_weight, bq), F.linear(k, self.k_proj_weight, bk),
      F.linear(v, self.v_proj_weight, bv)
  end
  local extra = 0   -- keys appended to S: the bias, then the zero key
  local bk = self.bias_k
  if bk ~= nil then
    kp = fp8.cat({ kp, bk:expand { 1, B, E } }, 1)
    vp = fp8.cat({ vp, self.bias_v:expand { 1, B, E } }, 1)
    extra = 1
  end
  -- [L, N, E] → [N, H, L, D]
  local function heads(t, len) return t:reshape { len, B, H, D }:permute { 2, 3, 1, 4 } end
  qp, kp, vp = heads(qp, L), heads(kp, S + extra), heads(vp, S + extra)
  if self.add_zero_attn then
    local z = fp8.zeros({ B, H, 1, D }):to(kp:device())
    kp, vp = fp8.cat({ kp, z }, 3), fp8.cat({ vp, z }, 3)
    extra = extra + 1
  end
  mask = pad_keys(mask, extra)
  local out, weights
  if need_weights then
    -- torch's written-out path: q scaled first, the probabilities kept (and returned)
    local s = (qp * math.sqrt(1 / D)):matmul(kp:transpose(3, 4))
    if mask ~= nil then s = s + mask end
    local w = F.softmax(s, -1)
    if p > 0 then w = F.dropout(w, p, true) end
    weights = w   -- after the dropout, as torch returns them
    out = w:matmul(vp)
  else
    out = F.scaled_dot_product_attention(qp, kp, vp, { attn_mask = mask, dropout_p = p })
  end
  -- [N, H, L, D] → [L, N, E], the output projection (a module: FP8 where converted)
  out = self.out_proj(out:permute { 3, 1, 2, 4 }:reshape { L, B, E })
  if not batched then
    out = out:squeeze(2)
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  if weights ~= nil then
    if opts.average_attn_weights ~= false then weights = weights:mean(2) end   -- [N, L, S]
    if not batched then weights = weights:squeeze(1) end
  end
  return out, weights
end

function MHA:extra_repr()
  local parts = { ("embed_dim=%d, num_heads=%d"):format(self.embed_dim, self.num_heads) }
  if self.dropout ~= 0 then parts[#parts + 1] = ("dropout=%g"):format(self.dropout) end
  if not self._qkv_same_embed_dim then parts[#parts + 1] = ("kdim=%d, vdim=%d"):format(self.kdim, self.vdim) end
  if self.batch_first then parts[#parts + 1] = "batch_first=true" end
  if rawget(self, "_parameters") and self.bias_k ~= nil then parts[#parts + 1] = "add_bias_kv=true" end
  if self.add_zero_attn then parts[#parts + 1] = "add_zero_attn=true" end
  return table.concat(parts, ", ")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(MHA, N)
return MHA
