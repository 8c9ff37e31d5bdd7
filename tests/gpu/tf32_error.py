# The largest TF32 error on tests/gpu/test_gpu_cudnn_settings.c's shapes, over the
# terms' magnitudes: where its NOT_TF32 bound comes from. Float64 reference,
# inputs rounded to TF32 (10-bit mantissa, to nearest even), 20 draws.
#   python3 tests/gpu/tf32_error.py
import torch
torch.manual_seed(0)
def tf32(t):  # round-to-nearest-even to a 10-bit mantissa
    i = t.view(torch.int32)
    r = ((i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF)
    return r.view(torch.float32)
worst = {k: [] for k in ("y", "dx", "dw")}
for trial in range(20):
    x = torch.randn(4,16,12,12, dtype=torch.float64); w = torch.randn(32,16,3,3, dtype=torch.float64); s = torch.randn(4,32,12,12, dtype=torch.float64)
    conv = lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)
    y = conv(x, w); ya = conv(x.abs(), w.abs())
    yt = conv(tf32(x.float()).double(), tf32(w.float()).double())
    worst["y"].append(((yt - y).abs() / ya).max().item())
    # dx = conv_transpose(s, w): TF32 rounds s and w
    dx = torch.nn.grad.conv2d_input(x.shape, w, s, padding=1); dxa = torch.nn.grad.conv2d_input(x.shape, w.abs(), s.abs(), padding=1)
    dxt = torch.nn.grad.conv2d_input(x.shape, tf32(w.float()).double(), tf32(s.float()).double(), padding=1)
    worst["dx"].append(((dxt - dx).abs() / dxa).max().item())
    dw = torch.nn.grad.conv2d_weight(x, w.shape, s, padding=1); dwa = torch.nn.grad.conv2d_weight(x.abs(), w.shape, s.abs(), padding=1)
    dwt = torch.nn.grad.conv2d_weight(tf32(x.float()).double(), w.shape, tf32(s.float()).double(), padding=1)
    worst["dw"].append(((dwt - dw).abs() / dwa).max().item())
for k, v in worst.items(): print(k, "min worst %.2e median %.2e" % (min(v), sorted(v)[len(v)//2]))
