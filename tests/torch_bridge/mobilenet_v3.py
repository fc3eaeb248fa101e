"""MobileNetV3-small's building blocks as torchvision writes them (inverted residuals with
squeeze-and-excitation, hardswish / hardsigmoid), tiny widths, random weights. Written out
here because torchvision's wheels do not load against this CPU build of torch 2.13."""
import torch
from torch import nn


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


def conv_bn(cin, cout, k, stride, groups=1, act=nn.Hardswish):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), act())


class Block(nn.Module):
    def __init__(self, cin, expand, cout, k, stride, se, act) -> None:
        super().__init__()
        self.expand = conv_bn(cin, expand, 1, 1, act=act)
        self.depthwise = conv_bn(expand, expand, k, stride, groups=expand, act=act)
        self.se = SqueezeExcite(expand, max(8, expand // 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(expand, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.depthwise(self.expand(x))))
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2)
        self.blocks = nn.Sequential(Block(16, 16, 16, 3, 2, True, nn.ReLU),
                                    Block(16, 72, 24, 3, 2, False, nn.ReLU),
                                    Block(24, 88, 24, 3, 1, False, nn.ReLU),
                                    Block(24, 96, 40, 5, 2, True, nn.Hardswish))
        self.head = nn.Sequential(nn.Linear(40, 64), nn.Hardswish(), nn.Linear(64, classes))

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


