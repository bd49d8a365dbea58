# PyTorch goldens of the convolution layers (values and gradients, float64):
#   /usr/bin/python3 spec/goldens/convolution.py   (writes spec/goldens/convolution.lua)
import os
import torch
from luatable import lua

torch.manual_seed(29)
torch.set_default_dtype(torch.float64)

CASES = [
    # name, class, in, out, kernel, options, input shape
    ("conv2d_stride_pad_dilation_groups", "Conv2d", 4, 6, 3,
     dict(stride=2, padding=1, dilation=2, groups=2), [2, 4, 9, 8]),
    ("conv2d_depthwise", "Conv2d", 3, 6, (3, 2),
     dict(stride=(1, 2), padding=(2, 1), dilation=(1, 2), groups=3), [2, 3, 6, 7]),
    ("conv2d_same_even_kernel", "Conv2d", 2, 3, (4, 3), dict(padding="same", dilation=(1, 2)), [1, 2, 6, 7]),
    ("conv2d_valid_no_bias", "Conv2d", 2, 3, 2, dict(padding="valid", bias=False), [2, 2, 5, 4]),
    ("conv2d_reflect", "Conv2d", 2, 2, 3, dict(padding=(2, 1), padding_mode="reflect"), [2, 2, 5, 6]),
    ("conv2d_replicate_same", "Conv2d", 2, 2, 4, dict(padding="same", padding_mode="replicate"), [1, 2, 5, 5]),
    ("conv2d_circular", "Conv2d", 3, 2, 3, dict(padding=1, padding_mode="circular", stride=2), [2, 3, 6, 5]),
    ("conv2d_unbatched", "Conv2d", 2, 3, 3, dict(padding=1), [2, 5, 5]),
    ("conv1d_dilation_groups", "Conv1d", 4, 2, 3, dict(stride=2, padding=2, dilation=2, groups=2), [3, 4, 11]),
    ("conv1d_same_circular", "Conv1d", 2, 3, 4, dict(padding="same", padding_mode="circular"), [2, 2, 9]),
    ("conv1d_unbatched_reflect", "Conv1d", 2, 2, 3, dict(padding=1, padding_mode="reflect"), [2, 7]),
    ("conv_transpose2d_full", "ConvTranspose2d", 4, 6, 3,
     dict(stride=2, padding=1, output_padding=1, dilation=2, groups=2), [2, 4, 4, 5]),
    ("conv_transpose2d_rect", "ConvTranspose2d", 3, 2, (2, 3), dict(stride=(3, 1), padding=(0, 1)), [1, 3, 3, 4]),
    ("conv_transpose1d", "ConvTranspose1d", 2, 4, 4, dict(stride=3, padding=1, output_padding=2), [2, 2, 5]),
    ("conv_transpose1d_unbatched_groups", "ConvTranspose1d", 4, 2, 3, dict(groups=2, bias=False), [4, 6]),
    # output_padding >= stride (allowed below the dilation): height's extra rows are reached
    # through the padding (output_padding <= padding), width's last ones by no input (bias only)
    ("conv_transpose2d_output_padding_past_stride", "ConvTranspose2d", 4, 2, (2, 3),
     dict(stride=(1, 2), padding=(2, 0), output_padding=(2, 2), dilation=(3, 3), groups=2), [2, 4, 4, 3]),
    ("conv_transpose1d_output_padding_past_stride", "ConvTranspose1d", 2, 3, 3,
     dict(stride=1, padding=1, output_padding=3, dilation=4), [2, 2, 5]),
]


out = ["-- written by spec/goldens/convolution.py (PyTorch " + torch.__version__ + "); do not edit", "return {"]
for name, cls, cin, cout, k, opts, shape in CASES:
    m = getattr(torch.nn, cls)(cin, cout, k, **opts)
    x = torch.randn(*shape, requires_grad=True)
    y = m(x)
    r = torch.randn(*y.shape)
    (y * r).sum().backward()
    case = dict(name=name, cls=cls, cin=cin, cout=cout, kernel=list(k) if isinstance(k, tuple) else k,
                options={kk: (list(v) if isinstance(v, tuple) else v) for kk, v in opts.items()},
                x=x.detach(), weight=m.weight.detach(), y=y.detach(), r=r, gx=x.grad, gweight=m.weight.grad)
    if m.bias is not None:
        case["bias"], case["gbias"] = m.bias.detach(), m.bias.grad
    out.append("  " + lua(case) + ",")
out.append("}")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "convolution.lua"), "w") as f:
    f.write("\n".join(out) + "\n")
