"""The etnp_demo MobileNetV2 in PyTorch, with the weights etnp_demo wrote (benchmark baseline and test oracle).

etnp_demo writes every parameter (batch norm already folded into the convolutions) to
mobilenet_v2_weights.bin with an index in mobilenet_v2_weights.json; names are torchvision state_dict keys
("features.0.0.weight"), folded biases "<conv>.bias". load_model() builds torchvision's mobilenet_v2 with its
BatchNorm layers replaced by Identity and those weights and biases put in (or, without torchvision, a plain
module with the same layers), in eval mode.
"""
import json
import os

import numpy as np


def read_weights(weights_dir):
    """{name: float32 array} from DIR/mobilenet_v2_weights.{json,bin}, and the index's metadata."""
    with open(os.path.join(weights_dir, "mobilenet_v2_weights.json")) as f:
        index = json.load(f)
    blob = np.fromfile(os.path.join(weights_dir, "mobilenet_v2_weights.bin"), dtype=np.float32)
    params = {}
    for p in index["parameters"]:
        start = p["offset"] // 4
        count = int(np.prod(p["shape"]))
        params[p["name"]] = blob[start:start + count].reshape(p["shape"]).copy()
    return params, index


# torchvision's inverted residual settings: expansion t, channels c, repeats n, first stride s.
_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _plain_model(torch, num_classes):
    nn = torch.nn

    def conv(cin, cout, k, s, groups, relu6):
        layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=True)]
        if relu6:
            layers.append(nn.ReLU6())
        return nn.Sequential(*layers)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            self.residual = stride == 1 and cin == cout
            layers = []
            if t != 1:
                layers.append(conv(cin, hidden, 1, 1, 1, True))
            layers.append(conv(hidden, hidden, 3, stride, hidden, True))
            layers.append(nn.Conv2d(hidden, cout, 1, 1, 0, bias=True))
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            feats = [conv(3, 32, 3, 2, 1, True)]
            cin = 32
            for t, c, n, s in _SETTINGS:
                for i in range(n):
                    feats.append(Block(cin, c, s if i == 0 else 1, t))
                    cin = c
            feats.append(conv(cin, 1280, 1, 1, 1, True))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.classifier(x)

    return Net()


def load_model(weights_dir, prefer_torchvision=True):
    """(model, description). The model is in eval mode, float32, on the CPU."""
    import torch

    params, index = read_weights(weights_dir)
    num_classes = index["num_classes"]
    model = None
    source = "plain torch.nn module"
    if prefer_torchvision:
        try:
            import torchvision

            model = torchvision.models.mobilenet_v2(weights=None, num_classes=num_classes)
            source = "torchvision.models.mobilenet_v2 (BatchNorm -> Identity, folded biases)"
        except Exception:  # torchvision missing or too old
            model = None
    if model is None:
        model = _plain_model(torch, num_classes)

    def strip_batch_norm(module):
        for name, child in module.named_children():
            if isinstance(child, torch.nn.BatchNorm2d):
                setattr(module, name, torch.nn.Identity())
            else:
                strip_batch_norm(child)

    strip_batch_norm(model)
    with torch.no_grad():
        for name, value in params.items():
            owner, attr = name.rsplit(".", 1)
            module = model.get_submodule(owner)  # same paths in both layouts
            tensor = torch.from_numpy(value)
            if getattr(module, attr, None) is None:
                setattr(module, attr, torch.nn.Parameter(tensor))
            else:
                getattr(module, attr).copy_(tensor)
    model.eval()
    return model, source
