#!/usr/bin/env python3
"""gen_nn_parity.py — writes tests/data/nn_parity_torch.lua: what PyTorch 2.x's F.silu, F.rms_norm (values and the
input's and weight's gradients of their sum weighted by a fixed tensor), F.leaky_relu, F.elu, F.softplus (values and
gradients), F.nll_loss and F.binary_cross_entropy_with_logits (each reduction, ignore_index / pos_weight, and the
input's gradient), F.l1_loss, F.normalize (p 2, 1 along dim 0, 3; values and gradients), F.one_hot, nn.Flatten,
nn.Softmax, the activations with kinks (hardtanh, relu6, hardsigmoid, hardswish; mish, selu, celu, logsigmoid,
softmin, log_softmax, glu), the exponential ones in their tails (elu, celu, selu, softplus, logsigmoid, mish),
F.smooth_l1_loss, F.huber_loss, F.pad in its reflect, replicate and circular modes, pooling with ceil_mode,
F.conv_transpose1d/2d and ConvTranspose2d's output_size, adaptive pooling, F.interpolate and
pixel_shuffle, RNN/LSTM/GRU and their cells, InstanceNorm, the
multi-class margin losses, F.bilinear, Embedding's max_norm, local_response_norm,
Softmax2d, channel_shuffle, max pooling's
indices and max_unpool, embedding_bag, Conv1d/Conv2d with padding_mode, F.kl_div
and F.scaled_dot_product_attention with an
additive mask, a causal mask over more keys than queries and grouped k/v heads (values and gradients), and
nn.MultiheadAttention (self and cross attention, masks, kdim/vdim, unbatched; outputs, weights and every gradient),
nn.TransformerEncoderLayer (post- and pre-norm, relu and gelu, masks), nn.TransformerEncoder,
nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer (masks of target and memory),
F.cross_entropy and F.nll_loss with class weights (each reduction; label smoothing, ignore_index, class
probabilities), F.binary_cross_entropy (each reduction, a weight, probabilities 0 and 1) and F.cosine_similarity
(dims, broadcast, a zero vector) give on fixed inputs, for
tests/spec/nn_spec.lua to compare fp8.nn's against. Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_nn_parity.py"""

import math

import torch
import torch.nn.functional as F
from torch_fixture import rows, write

X = [[0.5, -1.25, 2.0, 0.0], [-3.0, 0.75, 1.5, -0.5], [1e-3, -2e-3, 4.0, 8.0]]
W = [1.0, 0.5, -2.0, 1.5]
G = [[1.0, -1.0, 0.5, 2.0], [0.25, 3.0, -0.5, 1.0], [-2.0, 1.0, 1.0, 0.5]]
LP = [[-0.1, -2.5, -3.0], [-1.2, -0.4, -2.2], [-2.0, -1.0, -0.6], [-0.7, -0.9, -2.1]]
T = [2, 0, -100, 1]


out = {}
x = torch.tensor(X)
out["silu"] = rows(F.silu(x))
for name, eps in (("rms", None), ("rms_eps", 1e-2)):
    xr = torch.tensor(X, requires_grad=True)
    w = torch.tensor(W, requires_grad=True)
    y = F.rms_norm(xr, (4,), w, eps)
    (y * torch.tensor(G)).sum().backward()
    out[name] = rows(y)
    out[name + "_dx"] = rows(xr.grad)
    out[name + "_dw"] = rows(w.grad)
for red in ("mean", "sum", "none"):
    for ii in (None, 1):
        lp = torch.tensor(LP, requires_grad=True)
        t = torch.tensor(T if ii is None else [2, 0, 1, 1])
        kw = {"reduction": red}
        if ii is not None:
            kw["ignore_index"] = ii
        loss = F.nll_loss(lp, t, **kw)
        key = "nll_%s%s" % (red, "" if ii is None else "_ii1")
        out[key] = rows(loss)
        loss.sum().backward()
        out[key + "_grad"] = rows(lp.grad)
out["one_hot"] = rows(F.one_hot(torch.tensor([[2, 0], [1, 3]]), 5).float())
out["flatten"] = "{" + ", ".join(str(v) for v in torch.nn.Flatten()(torch.zeros(2, 3, 4, 5)).shape) + "}"
out["flatten_13"] = "{" + ", ".join(str(v) for v in torch.nn.Flatten(0, 2)(torch.zeros(2, 3, 4, 5)).shape) + "}"
out["softmax0"] = rows(torch.nn.Softmax(0)(torch.tensor(X)))
# the activations and the two new losses, values and the input's gradient of the output weighted by G (0 included)
for key, fn in (("leaky", lambda t: F.leaky_relu(t, 0.2)), ("elu", lambda t: F.elu(t, 1.5)),
                ("softplus", lambda t: F.softplus(t, 2.0, 3.0))):
    xr = torch.tensor(X, requires_grad=True)
    y = fn(xr)
    (y * torch.tensor(G)).sum().backward()
    out[key] = rows(y)
    out[key + "_dx"] = rows(xr.grad)
Y = [[0.0, 1.0, 0.5, 1.0], [1.0, 0.0, 0.25, 0.0], [1.0, 1.0, 0.0, 0.0]]
for red in ("mean", "sum", "none"):
    xr = torch.tensor(X, requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(xr, torch.tensor(Y), reduction=red)
    loss.sum().backward()
    out["bce_" + red] = rows(loss)
    out["bce_" + red + "_dx"] = rows(xr.grad)
    out["l1_" + red] = rows(F.l1_loss(torch.tensor(X), torch.tensor(Y), reduction=red))
for key, kw in (("norm2", {}), ("norm1_dim1", {"p": 1.0, "dim": 0}), ("norm3", {"p": 3.0})):
    xr = torch.tensor(X, requires_grad=True)
    y = F.normalize(xr, **kw)
    (y * torch.tensor(G)).sum().backward()
    out[key] = rows(y)
    out[key + "_dx"] = rows(xr.grad)
xr = torch.tensor(X, requires_grad=True)
loss = F.binary_cross_entropy_with_logits(xr, torch.tensor(Y), pos_weight=torch.tensor([2.0, 0.5, 1.0, 3.0]))
loss.backward()
out["bce_pw"] = rows(loss)
out["bce_pw_dx"] = rows(xr.grad)
# a weight (broadcast over the rows), with and without pos_weight, each reduction
for red in ("mean", "sum", "none"):
    for key, pw in (("", None), ("_pw", torch.tensor([2.0, 0.5, 1.0, 3.0]))):
        xr = torch.tensor(X, requires_grad=True)
        loss = F.binary_cross_entropy_with_logits(xr, torch.tensor(Y), weight=torch.tensor([0.5, 2.0, 1.0, 0.0]),
                                                  pos_weight=pw, reduction=red)
        loss.sum().backward()
        out["bce_w_%s%s" % (red, key)] = rows(loss)
        out["bce_w_%s%s_dx" % (red, key)] = rows(xr.grad)

# the activations with kinks, at the kinks too (values and the input's gradient of the output weighted by G)
K = [[-4.0, -3.0, -1.0, 0.0], [0.5, 3.0, 6.0, 7.0], [-3.5, 2.9, 6.5, -0.2]]
for key, fn in (("hardtanh", lambda t: F.hardtanh(t)), ("hardtanh_m3_3", lambda t: F.hardtanh(t, -3.0, 3.0)),
                ("relu6", F.relu6), ("hardsigmoid", F.hardsigmoid), ("hardswish", F.hardswish), ("mish", F.mish),
                ("selu", F.selu), ("celu", lambda t: F.celu(t, 0.5)), ("logsigmoid", F.logsigmoid),
                ("softmin", lambda t: F.softmin(t, 1)), ("log_softmax0", lambda t: F.log_softmax(t, 0)),
                ("hardshrink", F.hardshrink), ("hardshrink3", lambda t: F.hardshrink(t, 3.0)),
                ("softshrink", F.softshrink), ("softshrink3", lambda t: F.softshrink(t, 3.0))):
    xr = torch.tensor(K, requires_grad=True)
    y = fn(xr)
    (y * torch.tensor(G)).sum().backward()
    out["act_" + key] = rows(y)
    out["act_" + key + "_dx"] = rows(xr.grad)
# F.embedding with padding_idx (1, and -1 for the last row): the output and the weight's gradient of the output
# weighted by EG (the padding row takes none)
EW = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-2.0, 1.0, 0.0], [3.0, -0.75, 1.25]]
EIDS = [[0, 1, 2], [1, 3, 1]]
EG = [[[1.0, -1.0, 0.5], [2.0, 0.25, 3.0], [-0.5, 1.0, 1.0]], [[0.5, 2.0, -1.0], [1.0, 1.0, 1.0], [-2.0, 0.5, 0.25]]]
for key, pad in (("emb_pad1", 1), ("emb_pad_last", -1)):
    w = torch.tensor(EW, requires_grad=True)
    y = F.embedding(torch.tensor(EIDS), w, padding_idx=pad)
    (y * torch.tensor(EG)).sum().backward()
    out[key] = rows(y)
    out[key + "_dw"] = rows(w.grad)
# convolutions and pooling: inputs written into the file too (CX [2, 4, 6, 7], CW [6, 4, 3, 3], CB [6], CX1 [2, 4, 9]),
# each case's output and the gradients of its output weighted by sin-made weights of its shape
def wave(shape, a, b):
    n = 1
    for d in shape: n *= d
    return torch.sin(torch.arange(n, dtype=torch.float32) * a + b).reshape(shape)
CX, CWT = wave((2, 4, 6, 7), 0.37, 0.1), wave((6, 4, 3, 3), 0.53, 0.3)
CB, CX1 = wave((6,), 1.1, 0.2), wave((2, 4, 9), 0.29, 0.4)
out["conv_x"], out["conv_w"], out["conv_b"], out["conv_x1"] = rows(CX), rows(CWT), rows(CB), rows(CX1)
def conv_case(key, fn, *ts):
    ts = [t.clone().requires_grad_(True) for t in ts]
    y = fn(*ts)
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out[key] = rows(y)
    for j, t in enumerate(ts, 1):
        out["%s_d%d" % (key, j)] = rows(t.grad)
conv_case("c2_s2p1", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), CX, CWT, CB)
conv_case("c2_d2", lambda x, w: F.conv2d(x, w, dilation=2, padding=(2, 1)), CX, CWT)
conv_case("c2_g2_same", lambda x, w: F.conv2d(x, w, groups=2, padding="same"), CX, CWT[:, :2, :2, :])
conv_case("c2_s21", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1)), CX, CWT, CB)
conv_case("c1", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2), CX1, CWT[:, :, 0, :], CB)
conv_case("c1_same_g2", lambda x, w: F.conv1d(x, w, padding="same", groups=2), CX1, CWT[:, :2, 0, :2])
conv_case("mp2", lambda x: F.max_pool2d(x, 2), CX)
conv_case("mp3s2p1", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), CX)
conv_case("mp_d2", lambda x: F.max_pool2d(x, 2, stride=1, dilation=2), CX)
conv_case("ap3s2p1", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), CX)
conv_case("ap_nopad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), CX)
conv_case("ap_div", lambda x: F.avg_pool2d(x, (2, 3), divisor_override=4), CX)
conv_case("mp1", lambda x: F.max_pool1d(x, 3, stride=2, padding=1), CX1)
conv_case("ap1", lambda x: F.avg_pool1d(x, 2), CX1)
# transposed convolutions: stride, padding and output_padding; groups with dilation; 1-d; a module's output_size
CWTT = CWT.transpose(0, 1).contiguous()   # [4, 6, 3, 3]: [in_channels, out_channels / groups, kh, kw]
conv_case("ct2", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1), CX, CWTT, CB)
conv_case("ct2_g2_d2", lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), padding=(2, 0), groups=2,
                                                       dilation=(2, 1)), CX, CWTT[:, :3, :2, :].contiguous())
conv_case("ct1", lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=2, output_padding=1, dilation=2),
          CX1, CWTT[:, :, 0, :].contiguous(), CB)
ct_mod = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)
with torch.no_grad():
    ct_mod.weight.copy_(CWTT)
    ct_mod.bias.copy_(CB)
conv_case("ct2_size", lambda x: ct_mod(x, output_size=(12, 14)), CX)
# adaptive pooling: overlapping windows (6 -> 4, 7 -> 3), a mean of everything, windows that divide, more outputs
# than inputs (9 -> 12), None keeping a dim
conv_case("aap2", lambda x: F.adaptive_avg_pool2d(x, (4, 3)), CX)
conv_case("aap2_1", lambda x: F.adaptive_avg_pool2d(x, 1), CX)
conv_case("aap2_none", lambda x: F.adaptive_avg_pool2d(x, (None, 5)), CX)
conv_case("amp2", lambda x: F.adaptive_max_pool2d(x, (4, 5)), CX)
conv_case("amp2_div", lambda x: F.adaptive_max_pool2d(x, (3, 7)), CX)
conv_case("aap1", lambda x: F.adaptive_avg_pool1d(x, 4), CX1)
conv_case("aap1_up", lambda x: F.adaptive_avg_pool1d(x, 12), CX1)
conv_case("amp1", lambda x: F.adaptive_max_pool1d(x, 5), CX1)
# interpolate: nearest by size and by scale factors (the scale used as given, and recomputed), doubling,
# nearest-exact, (bi/tri)linear with and without align_corners, area; pixel_shuffle and pixel_unshuffle
CX5 = CX.reshape(1, 2, 4, 6, 7)
conv_case("ip_nearest_sz", lambda x: F.interpolate(x, size=(9, 5)), CX)
conv_case("ip_nearest_sf", lambda x: F.interpolate(x, scale_factor=(1.7, 0.6)), CX)
conv_case("ip_nearest_rc", lambda x: F.interpolate(x, scale_factor=(1.7, 0.6), recompute_scale_factor=True), CX)
conv_case("ip_nearest2x", lambda x: F.interpolate(x, scale_factor=2), CX)
conv_case("ip_nexact", lambda x: F.interpolate(x, size=(4, 10), mode="nearest-exact"), CX)
conv_case("ip_bilinear", lambda x: F.interpolate(x, size=(9, 5), mode="bilinear"), CX)
conv_case("ip_bilinear_ac", lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True), CX)
conv_case("ip_bilinear_sf", lambda x: F.interpolate(x, scale_factor=(0.75, 2.5), mode="bilinear"), CX)
conv_case("ip_bicubic", lambda x: F.interpolate(x, size=(9, 5), mode="bicubic"), CX)
conv_case("ip_bicubic_ac", lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True), CX)
conv_case("ip_bicubic_sf", lambda x: F.interpolate(x, scale_factor=(0.75, 2.5), mode="bicubic"), CX)
conv_case("ip_linear", lambda x: F.interpolate(x, size=14, mode="linear"), CX1)
conv_case("ip_linear_ac", lambda x: F.interpolate(x, size=5, mode="linear", align_corners=True), CX1)
conv_case("ip_nearest1d", lambda x: F.interpolate(x, scale_factor=2.3), CX1)
conv_case("ip_trilinear", lambda x: F.interpolate(x, size=(3, 8, 5), mode="trilinear"), CX5)
conv_case("ip_area", lambda x: F.interpolate(x, size=(4, 3), mode="area"), CX)
conv_case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), CX)
conv_case("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 3), CX[:, :, :, :6].contiguous())
# ceil_mode: the output rounded up (the last window past the padding; W 7 with padding 1 drops the window that would
# start past the input), for max and average (the divisor with and without the padding, and overridden)
conv_case("mp_ceil", lambda x: F.max_pool2d(x, 2, stride=2, padding=1, ceil_mode=True), CX)
conv_case("mp_ceil_d2", lambda x: F.max_pool2d(x, 3, stride=(2, 3), dilation=(1, 2), ceil_mode=True), CX)
conv_case("ap_ceil", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), CX)
conv_case("ap_ceil_nopad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                  count_include_pad=False), CX)
conv_case("ap_ceil_div", lambda x: F.avg_pool2d(x, (2, 3), stride=(3, 2), ceil_mode=True, divisor_override=5), CX)
conv_case("mp1_ceil", lambda x: F.max_pool1d(x, 2, stride=2, ceil_mode=True), CX1)
conv_case("ap1_ceil", lambda x: F.avg_pool1d(x, 4, stride=3, padding=2, ceil_mode=True), CX1)
conv_case("unfold", lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), CX)
conv_case("fold", lambda c: F.fold(c, (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
          F.unfold(CX, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)))
# F.pad's reflect, replicate and circular modes (batched and unbatched, 1-, 2- and 3-dim pads, crops), and the
# convolution modules' padding_mode (torch's modules, their weights set to the fixture's)
conv_case("pad_reflect1", lambda x: F.pad(x, (3, 2), mode="reflect"), CX1)
conv_case("pad_replicate2", lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate"), CX)
conv_case("pad_circular2", lambda x: F.pad(x, (-1, 3, 2, 2), mode="circular"), CX)
conv_case("pad_reflect_unb", lambda x: F.pad(x, (1, 2, 3, -1), mode="reflect"), CX[0])
conv_case("pad_circular3", lambda x: F.pad(x, (1, 1, 2, 0, 1, 1), mode="circular"), CX.reshape(1, 2, 4, 6, 7))
def conv_module(cls, cin, cout, k, w, b, **kw):
    m = cls(cin, cout, k, **kw)
    with torch.no_grad():
        m.weight.copy_(w)
        m.bias.copy_(b)
    return lambda x: m(x)
conv_case("c2_reflect", conv_module(torch.nn.Conv2d, 4, 6, 3, CWT, CB, padding=(2, 1), padding_mode="reflect"), CX)
conv_case("c2_circular_s2", conv_module(torch.nn.Conv2d, 4, 6, 3, CWT, CB, padding=1, stride=2,
                                        padding_mode="circular"), CX)
conv_case("c1_replicate_same", conv_module(torch.nn.Conv1d, 4, 6, 2, CWT[:, :, 0, :2], CB, padding="same",
                                           dilation=3, padding_mode="replicate"), CX1)
# bilinear: values and the gradients of both inputs, the weight and the bias (a batch of [2, 3] positions)
conv_case("bilinear", lambda a, b, w, bias: F.bilinear(a, b, w, bias), wave((2, 3, 4), 0.29, 0.4),
          wave((2, 3, 5), 0.31, 0.1), wave((6, 4, 5), 0.53, 0.3), wave((6,), 1.1, 0.2))
# embedding with max_norm: the rows looked up renormalized in place (norm 2 and norm 1), the output, the weight
# after and its gradient
for key, kw in (("emb_maxnorm", dict(max_norm=1.0)), ("emb_maxnorm1", dict(max_norm=2.5, norm_type=1.0))):
    emb = torch.nn.Embedding(5, 3, **kw)
    with torch.no_grad():
        emb.weight.copy_(wave((5, 3), 0.7, 0.3) * 4)
    y = emb(torch.tensor([[1, 3], [1, 0]]))
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out[key], out[key + "_w"], out[key + "_dw"] = rows(y), rows(emb.weight), rows(emb.weight.grad)
# local response norm (sizes 3 and 4, 3-D and 4-D inputs), Softmax2d, channel_shuffle: values and gradients
conv_case("lrn3", lambda x: F.local_response_norm(x, 3), CX)
conv_case("lrn4_1d", lambda x: F.local_response_norm(x, 4, alpha=0.1, beta=0.5, k=2.0), CX1)
conv_case("softmax2d", lambda x: torch.nn.Softmax2d()(x), CX)
conv_case("channel_shuffle", lambda x: F.channel_shuffle(x, 2), CX)
# max pooling's indices (padding, dilation, ceil_mode, 1-d) and max_unpool back from them (values and gradients)
def indices_case(key, pool, unpool, x):
    y, idx = pool(x)
    out[key + "_idx"] = rows(idx.float())
    if unpool is not None:
        conv_case(key, lambda v: unpool(v, idx), y.detach())
indices_case("mpi2", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
             lambda v, i: F.max_unpool2d(v, i, 3, stride=2, padding=1, output_size=(6, 7)), CX)
indices_case("mpi2_d", lambda x: F.max_pool2d(x, 2, stride=(1, 2), dilation=(2, 1), ceil_mode=True,
                                             return_indices=True),
             None, CX)
indices_case("mpi1", lambda x: F.max_pool1d(x, 2, stride=2, return_indices=True),
             lambda v, i: F.max_unpool1d(v, i, 2, output_size=(9,)), CX1)
# embedding_bag: each mode over offsets (an empty bag, include_last_offset), a 2-D input, per_sample_weights,
# padding_idx (left out of the mean's count); the output and the weight's (and per-sample weights') gradients
EBW = wave((6, 3), 0.43, 0.2) * 2
EBI = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0])
EBO = torch.tensor([0, 3, 3, 5])
for key, kw in (("eb_mean", dict(offsets=EBO)), ("eb_sum_psw", dict(offsets=EBO, mode="sum", psw=True)),
                ("eb_max", dict(offsets=EBO, mode="max")),
                ("eb_last", dict(offsets=torch.tensor([0, 2, 8]), mode="sum", include_last_offset=True)),
                ("eb_pad", dict(offsets=EBO, padding_idx=4)), ("eb_2d", dict(mode="max", two_d=True))):
    w = EBW.clone().requires_grad_(True)
    psw = torch.linspace(0.5, 2.0, 8).requires_grad_(True) if kw.pop("psw", False) else None
    inp = EBI.reshape(2, 4) if kw.pop("two_d", False) else EBI
    y = F.embedding_bag(inp, w, per_sample_weights=psw, **kw)
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out[key], out[key + "_dw"] = rows(y), rows(w.grad)
    if psw is not None:
        out[key + "_dpsw"] = rows(psw.grad)
out["eb_weight"] = rows(EBW)
# multi-class margin losses: values (each reduction) and the input's gradient of the value weighted by 1..n
MX = [[0.1, 0.2, 0.4, 0.8], [0.5, -0.3, 0.2, 0.1], [-1.0, 2.0, 0.3, 0.3]]
MT = [3, 0, 2]
MLT = [[3, 0, -1, 1], [1, 1, -1, 0], [2, 1, 0, 3]]
MLS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
MW = [0.5, 1.0, 2.0, 1.5]
for key, fn, tgt, kw in (
        ("mm", F.multi_margin_loss, torch.tensor(MT), {}),
        ("mm_p2w", F.multi_margin_loss, torch.tensor(MT), {"p": 2, "margin": 0.7, "weight": torch.tensor(MW)}),
        ("mlm", F.multilabel_margin_loss, torch.tensor(MLT), {}),
        ("mls", F.multilabel_soft_margin_loss, torch.tensor(MLS), {}),
        ("mls_w", F.multilabel_soft_margin_loss, torch.tensor(MLS), {"weight": torch.tensor(MW)})):
    for red in ("mean", "sum", "none"):
        x = torch.tensor(MX, requires_grad=True)
        y = fn(x, tgt, reduction=red, **kw)
        (y * torch.arange(1.0, y.numel() + 1).reshape(y.shape)).sum().backward()
        out["%s_%s" % (key, red)] = rows(y)
        out["%s_%s_dx" % (key, red)] = rows(x.grad)
out["mm_unbatched"] = rows(F.multi_margin_loss(torch.tensor(MX[0]), torch.tensor(3)))
# instance norm: affine with running statistics over two training steps (outputs, every gradient, the statistics
# after), then eval; without affine and statistics on an unbatched 2-d input; InstanceNorm1d
inorm = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
with torch.no_grad():
    inorm.weight.copy_(torch.tensor([1.0, 0.5, 2.0, -1.0])); inorm.bias.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
for stepi, xin in enumerate((CX, CX * 2 + 0.5), 1):
    xi = xin.clone().requires_grad_(True)
    y = inorm(xi)
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out["in2_y%d" % stepi], out["in2_dx%d" % stepi] = rows(y), rows(xi.grad)
out["in2_dw"], out["in2_db"] = rows(inorm.weight.grad), rows(inorm.bias.grad)
out["in2_rm"], out["in2_rv"] = rows(inorm.running_mean), rows(inorm.running_var)
inorm.eval()
out["in2_eval"] = rows(inorm(CX))
conv_case("in2_plain", lambda x: torch.nn.InstanceNorm2d(4)(x), CX[0])
conv_case("in1", lambda x: torch.nn.InstanceNorm1d(4, affine=True)(x), CX1)
# recurrent layers and cells: every parameter set from a sin wave (its index in named_parameters order), the
# outputs and final states, and the gradients of a sin-weighted sum of them with respect to the input, the initial
# state and every parameter
def rnn_case(key, module, x, state=None, cell=False):
    torch.manual_seed(0)
    with torch.no_grad():
        for i, (_, prm) in enumerate(module.named_parameters()):
            prm.copy_(wave(tuple(prm.shape), 0.37 + 0.01 * i, 0.1 * i) * 0.5)
    x = x.clone().requires_grad_(True)
    if state is not None:
        state = tuple(t.clone().requires_grad_(True) for t in state) if isinstance(state, tuple) \
            else state.clone().requires_grad_(True)
    res = module(x, state) if state is not None else module(x)
    if cell:
        outs = list(res) if isinstance(res, tuple) else [res]
    else:
        y, st = res
        outs = [y] + (list(st) if isinstance(st, tuple) else [st])
    loss = sum((o * wave(tuple(o.shape), 0.71 + 0.05 * j, 0.5)).sum() for j, o in enumerate(outs))
    loss.backward()
    for j, o in enumerate(outs):
        out["%s_y%d" % (key, j)] = rows(o)
    out[key + "_dx"] = rows(x.grad)
    if state is not None:
        for j, t in enumerate(state if isinstance(state, tuple) else (state,)):
            out["%s_ds%d" % (key, j)] = rows(t.grad)
    for name, prm in module.named_parameters():
        out["%s_d_%s" % (key, name)] = rows(prm.grad)
rnn_case("lstm", torch.nn.LSTM(5, 8, num_layers=2, bidirectional=True, batch_first=True, proj_size=3),
         wave((4, 7, 5), 0.29, 0.4), (wave((4, 4, 3), 0.53, 0.2), wave((4, 4, 8), 0.61, 0.7)))
rnn_case("gru", torch.nn.GRU(5, 6, num_layers=2), wave((7, 2, 5), 0.31, 0.1))
rnn_case("rnn_relu", torch.nn.RNN(5, 6, nonlinearity="relu", bias=False, bidirectional=True),
         wave((7, 5), 0.23, 0.3), wave((2, 6), 0.41, 0.2))
rnn_case("lstmcell", torch.nn.LSTMCell(5, 6), wave((2, 5), 0.29, 0.4),
         (wave((2, 6), 0.53, 0.2), wave((2, 6), 0.61, 0.7)), cell=True)
rnn_case("grucell", torch.nn.GRUCell(5, 6), wave((2, 5), 0.29, 0.4), wave((2, 6), 0.53, 0.2), cell=True)
rnn_case("rnncell", torch.nn.RNNCell(5, 6), wave((5,), 0.29, 0.4), cell=True)
# batch and group norm: BatchNorm2d over two training steps (the outputs, the input's, weight's and bias's gradients,
# the running statistics after), then its eval output; BatchNorm1d on [N, C] and [N, C, L] with momentum None;
# track_running_stats=False; GroupNorm (values and gradients)
torch.manual_seed(0)
bn = torch.nn.BatchNorm2d(4)
with torch.no_grad():
    bn.weight.copy_(torch.tensor([1.0, 0.5, 2.0, -1.0])); bn.bias.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
for step, xin in enumerate((CX, CX * 2 + 0.5), 1):
    xr = xin.clone().requires_grad_(True)
    y = bn(xr)
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out["bn2_y%d" % step], out["bn2_dx%d" % step] = rows(y), rows(xr.grad)
out["bn2_dw"], out["bn2_db"] = rows(bn.weight.grad), rows(bn.bias.grad)
out["bn2_rm"], out["bn2_rv"] = rows(bn.running_mean), rows(bn.running_var)
bn.eval()
out["bn2_eval"] = rows(bn(CX))
bn1 = torch.nn.BatchNorm1d(4, momentum=None)
out["bn1_y"] = rows(bn1(CX1))
out["bn1_y2"] = rows(bn1(CX1[:, :, 0] * 3))
out["bn1_rm"], out["bn1_rv"] = rows(bn1.running_mean), rows(bn1.running_var)
bnf = torch.nn.BatchNorm2d(4, track_running_stats=False, affine=False)
bnf.eval()
out["bn_nots"] = rows(bnf(CX))
for key, groups in (("gn2", 2), ("gn4", 4)):
    gn = torch.nn.GroupNorm(groups, 4)
    with torch.no_grad():
        gn.weight.copy_(torch.tensor([1.0, 0.5, 2.0, -1.0])); gn.bias.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
    xr = CX.clone().requires_grad_(True)
    y = gn(xr)
    (y * wave(tuple(y.shape), 0.71, 0.5)).sum().backward()
    out[key], out[key + "_dx"], out[key + "_dw"] = rows(y), rows(xr.grad), rows(gn.weight.grad)
# class weights: F.cross_entropy (class ids with and without label smoothing and ignore_index, class probabilities)
# and F.nll_loss, each reduction; the loss and the input's gradient of its sum
CW = [1.0, 2.5, 0.5]
CE_T = [2, 0, 1, 1]
for red in ("mean", "sum", "none"):
    for key, kw in (("", {}), ("_ls", {"label_smoothing": 0.2}), ("_ii", {"ignore_index": 1}),
                    ("_ls_ii", {"label_smoothing": 0.3, "ignore_index": 0})):
        xr = torch.tensor(LP, requires_grad=True)
        loss = F.cross_entropy(xr, torch.tensor(CE_T), weight=torch.tensor(CW), reduction=red, **kw)
        loss.sum().backward()
        out["cew_%s%s" % (red, key)] = rows(loss)
        out["cew_%s%s_dx" % (red, key)] = rows(xr.grad)
    xr = torch.tensor(LP, requires_grad=True)
    probs = torch.tensor([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0], [0.1, 0.1, 0.8], [0.0, 0.6, 0.4]])
    loss = F.cross_entropy(xr, probs, weight=torch.tensor(CW), reduction=red, label_smoothing=0.1)
    loss.sum().backward()
    out["cew_prob_%s" % red] = rows(loss)
    out["cew_prob_%s_dx" % red] = rows(xr.grad)
    for key, kw in (("", {}), ("_ii", {"ignore_index": 1})):
        xr = torch.tensor(LP, requires_grad=True)
        loss = F.nll_loss(xr, torch.tensor(CE_T), weight=torch.tensor(CW), reduction=red, **kw)
        loss.sum().backward()
        out["nllw_%s%s" % (red, key)] = rows(loss)
        out["nllw_%s%s_dx" % (red, key)] = rows(xr.grad)
# the exponential activations in their tails, where exp(x) - 1 and log(1 + exp(x)) lose everything (expm1 and
# log1p do not): values and the input's gradient of the output weighted by G
TAIL = [[-1e-5, -1e-3, -0.3, -20.0], [-30.0, -87.0, -90.0, -100.0], [20.0, 30.0, 1e-6, -5.0]]
for key, fn in (("elu", F.elu), ("celu", lambda t: F.celu(t, 0.5)), ("selu", F.selu), ("softplus", F.softplus),
                ("softplus_b2", lambda t: F.softplus(t, 2.0, 3.0)), ("logsigmoid", F.logsigmoid), ("mish", F.mish)):
    xr = torch.tensor(TAIL, requires_grad=True)
    y = fn(xr)
    (y * torch.tensor(G)).sum().backward()
    out["tail_" + key] = rows(y)
    out["tail_" + key + "_dx"] = rows(xr.grad)
xr = torch.tensor(X, requires_grad=True)
y = F.glu(xr, 1)
(y * torch.tensor(G)[:, :2]).sum().backward()
out["glu"], out["glu_dx"] = rows(y), rows(xr.grad)
# smooth L1, Huber, KL divergence: each reduction, the input's gradient
for red in ("mean", "sum", "none"):
    for key, fn in (("sl1", lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r)),
                    ("sl1_b05", lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.5)),
                    ("sl1_b0", lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0)),
                    ("huber", lambda a, b, r: F.huber_loss(a, b, reduction=r)),
                    ("huber_d2", lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=2.0))):
        xr = torch.tensor(X, requires_grad=True)
        loss = fn(xr, torch.tensor(Y), red)
        (loss * (torch.tensor(G) if red == "none" else 1.0)).sum().backward()
        out["%s_%s" % (key, red)] = rows(loss)
        out["%s_%s_dx" % (key, red)] = rows(xr.grad)
PT = [[0.2, 0.0, 0.5, 0.3], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]]
for red in ("mean", "batchmean", "sum", "none"):
    for lt in (False, True):
        xr = torch.tensor(X, requires_grad=True)
        inp = F.log_softmax(xr, 1)
        tgt = torch.tensor(PT)
        if lt:
            tgt = F.log_softmax(torch.tensor(G), 1)
        loss = F.kl_div(inp, tgt, reduction=red, log_target=lt)
        (loss * (torch.tensor(G) if red == "none" else 1.0)).sum().backward()
        key = "kl_%s%s" % (red, "_lt" if lt else "")
        out[key] = rows(loss)
        out[key + "_dx"] = rows(xr.grad)

# scaled_dot_product_attention's written-out cases: an additive mask, a causal mask with fewer queries than keys
# (top-left), grouped k/v heads; values and the gradients of q, k and v (inputs from a fixed formula)
def qkv_inputs(b, h, t, d, off):
    n = b * h * t * d
    return torch.tensor([math.sin(0.37 * i + off) for i in range(n)]).reshape(b, h, t, d).requires_grad_()


MASK = [[0.0, -1.5, float("-inf"), 0.5], [0.0, 0.0, -2.0, float("-inf")], [1.0, 0.0, 0.0, 0.0]]
for key, shapes, kw in (("sdpa_mask", ((1, 2, 3, 4), (1, 2, 4, 4), (1, 2, 4, 4)), {"attn_mask": torch.tensor(MASK)}),
                        ("sdpa_causal_tq2", ((1, 2, 2, 4), (1, 2, 4, 4), (1, 2, 4, 4)), {"is_causal": True}),
                        ("sdpa_gqa", ((2, 4, 3, 4), (2, 2, 3, 4), (2, 2, 3, 4)), {"enable_gqa": True, "scale": 0.3})):
    q, k, v = (qkv_inputs(*sh, off) for sh, off in zip(shapes, (0.0, 1.0, 2.0)))
    y = F.scaled_dot_product_attention(q, k, v, **kw)
    (y * torch.cos(torch.arange(y.numel(), dtype=torch.float32)).reshape(y.shape)).sum().backward()
    out[key] = rows(y.reshape(-1, 4))   # a row of D a line
    out[key + "_dq"], out[key + "_dk"], out[key + "_dv"] = (rows(t.grad.reshape(-1, 4)) for t in (q, k, v))

# nn.MultiheadAttention: parameters and inputs made by fill() (nn_spec.lua makes the same), each case's output and
# weights, and the gradients of both weighted by fill()s, for the inputs and every parameter (torch's names)
def fill(shape, seed, scale):
    n = math.prod(shape)
    return torch.tensor([((i * 37 + seed * 11) % 23 - 11) / 8 * scale for i in range(n)]).reshape(shape)


MHA = [  # name, constructor kwargs, query/key/value shapes (None: the query itself), forward kwargs
    ("self", dict(embed_dim=8, num_heads=2), (5, 3, 8), None, None, {}),
    ("cross", dict(embed_dim=8, num_heads=4, batch_first=True), (3, 5, 8), (3, 4, 8), (3, 4, 8),
     dict(attn_mask="causal", key_padding_mask="pad", average_attn_weights=False)),
    ("kvdim", dict(embed_dim=8, num_heads=2, kdim=6, vdim=4, bias=False), (5, 2, 8), (3, 2, 6), (3, 2, 4),
     dict(need_weights=False)),
    ("unbatched", dict(embed_dim=8, num_heads=2), (5, 8), (4, 8), (4, 8), dict(key_padding_mask="pad")),
    ("biaskv_zero", dict(embed_dim=8, num_heads=2, add_bias_kv=True, add_zero_attn=True), (5, 3, 8), (4, 3, 8),
     (4, 3, 8), dict(attn_mask="causal", key_padding_mask="pad")),
    ("zero_self", dict(embed_dim=8, num_heads=4, add_zero_attn=True, batch_first=True), (3, 5, 8), None, None,
     dict(attn_mask="causal", need_weights=False)),
    ("biaskv_unbatched", dict(embed_dim=8, num_heads=2, add_bias_kv=True, bias=False), (5, 8), (4, 8), (4, 8),
     dict(key_padding_mask="pad", average_attn_weights=False)),
]
for name, ctor, qs, ks, vs, fkw in MHA:
    m = torch.nn.MultiheadAttention(**ctor)
    with torch.no_grad():
        for j, (pname, prm) in enumerate(sorted(m.named_parameters()), 1):
            prm.copy_(fill(tuple(prm.shape), j, 0.25))
    q = fill(qs, 11, 1.0).requires_grad_()
    k = q if ks is None else fill(ks, 12, 1.0).requires_grad_()
    v = q if vs is None else fill(vs, 13, 1.0).requires_grad_()
    kw = dict(fkw)
    L, S = (qs[1] if ctor.get("batch_first") else qs[0]), (ks or qs)[1 if ctor.get("batch_first") else 0]
    if kw.get("attn_mask") == "causal":
        kw["attn_mask"] = torch.full((L, S), -math.inf).triu(1)
    if kw.get("key_padding_mask") == "pad":   # the last key of each sequence ignored
        kpm = torch.zeros(S)
        kpm[-1] = -math.inf
        kw["key_padding_mask"] = kpm if len(qs) == 2 else kpm.expand((ks or qs)[0 if ctor.get("batch_first") else 1], S)
    y, w = m(q, k, v, **kw)
    loss = (y * fill(tuple(y.shape), 21, 1.0)).sum()
    if w is not None:
        loss = loss + (w * fill(tuple(w.shape), 22, 1.0)).sum()
        out["mha_%s_w" % name] = rows(w.reshape(-1, w.shape[-1]))
    loss.backward()
    out["mha_%s" % name] = rows(y.reshape(-1, y.shape[-1]))
    for t, tn in ((q, "q"), (k, "k"), (v, "v")):
        if t.grad is not None and (tn == "q" or t is not q):
            out["mha_%s_d%s" % (name, tn)] = rows(t.grad.reshape(-1, t.shape[-1]))
    for pname, prm in m.named_parameters():
        out["mha_%s_d_%s" % (name, pname.replace(".", "_"))] = rows(prm.grad.reshape(-1, prm.shape[-1]))

# nn.TransformerEncoderLayer / TransformerEncoder: the layer's parameters by fill() in the order of their sorted names
# (the encoder deep-copies the filled layer), the input by fill(); outputs and the gradients of the output weighted by
# fill(), for the input and each listed parameter
TEL = [  # name, layer kwargs, input shape, causal src_mask, pad the last key, encoder layers (0: the layer alone)
    ("post", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0), (5, 3, 8), True, True, 0),
    ("pre_gelu", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, activation="gelu", batch_first=True,
                      norm_first=True, layer_norm_eps=1e-3), (3, 5, 8), False, True, 0),
    ("enc", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0), (5, 3, 8), True, False, 2),
]
for name, kw, xs, causal, pad, nl in TEL:
    layer = torch.nn.TransformerEncoderLayer(**kw)
    with torch.no_grad():
        for j, (pname, prm) in enumerate(sorted(layer.named_parameters()), 1):
            prm.copy_(fill(tuple(prm.shape), j, 0.25))
    m = layer
    if nl:
        m = torch.nn.TransformerEncoder(layer, nl, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    m.train()
    x = fill(xs, 11, 1.0).requires_grad_()
    S = xs[1] if kw.get("batch_first") else xs[0]
    Nb = xs[0] if kw.get("batch_first") else xs[1]
    fkw = {}
    if causal:
        fkw["mask" if nl else "src_mask"] = torch.full((S, S), -math.inf).triu(1)
    if pad:
        kpm = torch.zeros(Nb, S)
        kpm[:, -1] = -math.inf
        fkw["src_key_padding_mask"] = kpm
    y = m(x, **fkw)
    (y * fill(tuple(y.shape), 21, 1.0)).sum().backward()
    out["tel_%s" % name] = rows(y.reshape(-1, 8))
    out["tel_%s_dx" % name] = rows(x.grad.reshape(-1, 8))
    for pname, prm in m.named_parameters():
        if pname.endswith("linear1.weight") or pname.endswith("in_proj_weight") or pname.endswith("norm2.weight"):
            out["tel_%s_d_%s" % (name, pname.replace(".", "_"))] = rows(prm.grad.reshape(-1, prm.shape[-1]))

# nn.TransformerDecoderLayer / TransformerDecoder / nn.Transformer: parameters by fill() in the order of their sorted
# names (after the stacks deep-copied the filled layer; nn.Transformer filled whole, after its own Xavier draw), the
# inputs by fill(); outputs and the gradients of the output weighted by fill(), for the inputs and listed parameters
TDL = [  # name, layer kwargs, tgt shape, memory shape, causal tgt_mask, pad the last memory key, pad the last tgt key,
         # decoder layers (0: the layer alone; -1: nn.Transformer with one encoder and two decoder layers, src = memory)
    ("post", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0), (4, 3, 8), (5, 3, 8), True, True, False, 0),
    ("pre_gelu", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, activation="gelu", batch_first=True,
                      norm_first=True, layer_norm_eps=1e-3), (3, 4, 8), (3, 5, 8), True, False, True, 0),
    ("dec", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0), (4, 3, 8), (5, 3, 8), True, True, False, 2),
    ("full", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0), (4, 3, 8), (5, 3, 8), True, True, True, -1),
]
for name, kw, ts, ms, causal, mpad, tpad, nl in TDL:
    if nl >= 0:
        layer = torch.nn.TransformerDecoderLayer(**kw)
        with torch.no_grad():
            for j, (pname, prm) in enumerate(sorted(layer.named_parameters()), 1):
                prm.copy_(fill(tuple(prm.shape), j, 0.25))
        m = layer if nl == 0 else torch.nn.TransformerDecoder(layer, nl, norm=torch.nn.LayerNorm(8))
    else:
        m = torch.nn.Transformer(num_encoder_layers=1, num_decoder_layers=2, **kw)
        with torch.no_grad():
            for j, (pname, prm) in enumerate(sorted(m.named_parameters()), 1):
                prm.copy_(fill(tuple(prm.shape), j, 0.25))
    m.train()
    bf = kw.get("batch_first")
    tgt = fill(ts, 11, 1.0).requires_grad_()
    mem = fill(ms, 12, 1.0).requires_grad_()
    T, S = (ts[1], ms[1]) if bf else (ts[0], ms[0])
    Nb = ts[0] if bf else ts[1]
    fkw = {}
    if causal:
        fkw["tgt_mask"] = torch.full((T, T), -math.inf).triu(1)
    if mpad:
        kpm = torch.zeros(Nb, S)
        kpm[:, -1] = -math.inf
        fkw["memory_key_padding_mask"] = kpm
        if nl < 0:
            fkw["src_key_padding_mask"] = kpm
    if tpad:
        kpm = torch.zeros(Nb, T)
        kpm[:, -1] = -math.inf
        fkw["tgt_key_padding_mask"] = kpm
    y = m(mem, tgt, **fkw) if nl < 0 else m(tgt, mem, **fkw)
    (y * fill(tuple(y.shape), 21, 1.0)).sum().backward()
    out["tdl_%s" % name] = rows(y.reshape(-1, 8))
    out["tdl_%s_dtgt" % name] = rows(tgt.grad.reshape(-1, 8))
    out["tdl_%s_dmem" % name] = rows(mem.grad.reshape(-1, 8))
    for pname, prm in m.named_parameters():
        if pname.endswith("linear1.weight") or pname.endswith("multihead_attn.in_proj_weight") \
                or pname.endswith("norm3.weight") or pname.endswith("encoder.norm.weight"):
            out["tdl_%s_d_%s" % (name, pname.replace(".", "_"))] = rows(prm.grad.reshape(-1, prm.shape[-1]))

# F.binary_cross_entropy (probabilities at 0, 1 and in between, a per-element weight, each reduction; the input's
# and the target's gradients, torch's own formulas at the ends, where the logs clamp at -100) and
# F.cosine_similarity (along dims 1 and 0, broadcast, a zero vector; both inputs' gradients)
BX = [[0.0, 1e-12, 0.3, 0.5], [1.0, 0.999, 0.7, 0.05]]
BY = [[1.0, 1.0, 0.2, 0.5], [0.0, 1.0, 0.7, 0.0]]
BW = [[1.0, 2.0, 0.5, 1.0], [3.0, 1.0, 1.0, 0.25]]
for red in ("mean", "sum", "none"):
    for wk in (None, "w"):
        xb = torch.tensor(BX, requires_grad=True)
        yb = torch.tensor(BY, requires_grad=True)
        loss = F.binary_cross_entropy(xb, yb, weight=torch.tensor(BW) if wk else None, reduction=red)
        key = "bcep_%s%s" % (red, "_w" if wk else "")
        out[key] = rows(loss)
        (loss * (torch.tensor(G[:2]) if red == "none" else 1.0)).sum().backward()
        out[key + "_dx"], out[key + "_dy"] = rows(xb.grad), rows(yb.grad)
for key, a_, b_, dim in (("cos_d2", X, G, 1), ("cos_d1", X, G, 0), ("cos_zero", [[0.0, 0.0, 0.0, 0.0], X[1]], G[:2], 1),
                         ("cos_bcast", [X[0]], G, 1)):
    a = torch.tensor(a_, requires_grad=True)
    b = torch.tensor(b_, requires_grad=True)
    y = F.cosine_similarity(a, b, dim=dim)
    (y * torch.arange(1.0, y.numel() + 1).reshape(y.shape)).sum().backward()
    out[key] = rows(y)
    out[key + "_da"], out[key + "_db"] = rows(a.grad), rows(b.grad)

# more activations (values and the input's gradient of the output weighted by G; PReLU's weight's too), the
# pairwise and embedding losses and the likelihood losses (values, each reduction, every input's gradient)
X2 = [[0.25, -0.5, 1.5, 2.0], [1.0, 0.75, -1.5, 0.5], [0.0, -2.0, 3.0, 1.0]]
Y3 = [1.0, -1.0, 1.0]
for key, fn in (("softsign", F.softsign), ("tanhshrink", F.tanhshrink),
                ("threshold", lambda t: F.threshold(t, 0.5, -7.0))):
    xr = torch.tensor(X, requires_grad=True)
    y = fn(xr)
    (y * torch.tensor(G)).sum().backward()
    out["act_" + key], out["act_" + key + "_dx"] = rows(y), rows(xr.grad)
for key, w in (("prelu1", [0.25]), ("prelu4", [0.1, -0.5, 2.0, 0.0])):
    xr = torch.tensor(X, requires_grad=True)
    wr = torch.tensor(w, requires_grad=True)
    y = F.prelu(xr, wr)
    (y * torch.tensor(G)).sum().backward()
    out["act_" + key], out["act_" + key + "_dx"], out["act_" + key + "_dw"] = rows(y), rows(xr.grad), rows(wr.grad)
PAIR = [  # key, function, inputs (names of the tensors above, or a target list), keyword arguments
    ("pdist", F.pairwise_distance, ("X", "X2"), {}),
    ("pdist_p1k", F.pairwise_distance, ("X", "X2"), {"p": 1.0, "keepdim": True, "eps": 0.0}),
    ("pdist_inf", F.pairwise_distance, ("X", "X2"), {"p": math.inf}),
    ("pdist_same", F.pairwise_distance, ("X", "X"), {}),
    ("margin_rank", F.margin_ranking_loss, ("x0", "x1", "Y3"), {"margin": 0.5}),
    ("margin_rank_sum", F.margin_ranking_loss, ("x0", "x1", "Y3"), {"reduction": "sum"}),
    ("triplet", F.triplet_margin_loss, ("X", "X2", "G"), {}),
    ("triplet_swap", F.triplet_margin_loss, ("X", "X2", "G"), {"margin": 2.0, "p": 1.0, "swap": True,
                                                               "reduction": "none"}),
    ("cos_emb", F.cosine_embedding_loss, ("X", "X2", "Y3"), {"margin": 0.1, "reduction": "none"}),
    ("cos_emb_mean", F.cosine_embedding_loss, ("X", "G", "Y3"), {}),
    ("hinge", F.hinge_embedding_loss, ("X", "SIGNS"), {"margin": 1.5}),
    ("hinge_none", F.hinge_embedding_loss, ("X", "SIGNS"), {"reduction": "none"}),
    ("soft_margin", F.soft_margin_loss, ("X", "SIGNS"), {}),
    ("soft_margin_sum", F.soft_margin_loss, ("X", "SIGNS"), {"reduction": "sum"}),
    ("gauss", F.gaussian_nll_loss, ("X", "X2", "VAR"), {}),
    ("gauss_full", F.gaussian_nll_loss, ("X", "X2", "VAR1"), {"full": True, "eps": 0.5, "reduction": "sum"}),
    ("poisson", F.poisson_nll_loss, ("X", "COUNTS"), {}),
    ("poisson_rate", F.poisson_nll_loss, ("RATES", "COUNTS"), {"log_input": False, "full": True,
                                                               "reduction": "none"}),
]
NAMED = {
    "X": X, "X2": X2, "G": G, "x0": [0.5, -1.0, 2.0], "x1": [1.0, -1.5, 2.0], "Y3": Y3,
    "SIGNS": [[1.0, -1.0, 1.0, -1.0], [-1.0, -1.0, 1.0, 1.0], [1.0, 1.0, -1.0, -1.0]],
    "VAR": [[0.5, 1e-9, 2.0, 1.0], [1.0, 0.25, 3.0, 0.5], [2.0, 1.0, 0.1, 4.0]],
    "VAR1": [[0.25], [1.0], [0.75]],
    "COUNTS": [[0.0, 1.0, 3.0, 2.0], [5.0, 0.0, 1.0, 1.0], [2.0, 4.0, 0.0, 7.0]],
    "RATES": [[0.5, 1.25, 2.0, 0.0], [3.0, 0.75, 1.5, 0.5], [1e-3, 2e-3, 4.0, 8.0]],
}
for key, fn, names, kw in PAIR:
    ts = [torch.tensor(NAMED[n], requires_grad=n not in ("Y3", "SIGNS", "COUNTS")) for n in names]
    y = fn(*ts, **kw)
    out["pl_" + key] = rows(y)
    (y * torch.arange(1.0, y.numel() + 1).reshape(y.shape)).sum().backward()
    for j, t in enumerate(ts, 1):
        if t.grad is not None:
            out["pl_%s_d%d" % (key, j)] = rows(t.grad)

write("tests/data/nn_parity_torch.lua", "scripts/gen_nn_parity.py", torch.__version__, out)
