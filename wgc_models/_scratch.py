import torch
import torch.nn.functional as F
from torch import nn
def f(t: torch.Tensor) -> None:
    a = torch.split(t, 4)
    b = t.split(4)
    c = torch.unique(t)
    d = t.unique()
    e = t.chunk(2)
    g = torch.manual_seed(3)
    h = torch.random.manual_seed(3)
    with torch.random.fork_rng(devices=[]):
        pass
    i = F.pad(t, (1, 1))
    j = F.interpolate(t, scale_factor=2.0)
    k = t.unbind(0)
    l = torch.cat([t]).split([1, 2])
    m = nn.ModuleList([nn.Linear(2, 2)])
    for x in m: print(x)
    n = m[0]
    o = F.scaled_dot_product_attention(t, t, t)
    p = t.new_tensor([1])
    q = torch.from_numpy(t.numpy())
    r = t.numpy()
    s = F.gelu(t, approximate="tanh")
    u = torch.nn.utils.parametrizations.weight_norm(nn.Conv1d(1,1,1))
    v = t.max(-1)
    w = t.topk(2)
    x2 = torch.sort(t)
    y = t.sort()
    z = t.cumsum(0)
