# The torch 2.15 behaviour tests/spec/review16_spec.lua checks (stop 99): the conv modules' reprs (which fields a
# repr shows, in which order: a dilation other than 1 is shown, after padding and before output_padding) and
# renorm's refusal of an input of fewer than 2 dims. Run: /opt/torch2/bin/python scripts/gen_review16.py
import torch
import torch.nn as nn

print("torch", torch.__version__)
print(nn.Conv2d(4, 6, 3, dilation=2))
print(nn.Conv1d(4, 6, 3, dilation=3))
print(nn.Conv2d(4, 6, 3, dilation=(1, 2), groups=2))
print(nn.ConvTranspose2d(2, 4, 3, stride=2, dilation=2, output_padding=1, groups=2))
print(nn.ConvTranspose1d(2, 4, 3, dilation=2))
for x in (torch.tensor(3.0), torch.tensor([3.0, 4.0])):
    try:
        torch.renorm(x, 2, 0, 1.0)
    except RuntimeError as e:
        print("renorm", tuple(x.shape), "RuntimeError:", e)
print("renorm 2-d", torch.renorm(torch.tensor([[3.0, 4.0]]), 2, 0, 1.0).tolist())
