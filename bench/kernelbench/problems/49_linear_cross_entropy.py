import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Classifier head and its loss: cross_entropy(Linear(x), targets), mean over the batch."""

    def __init__(self, hidden, num_classes):
        super().__init__()
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, targets):
        return F.cross_entropy(self.head(x), targets)


batch_size = 256
hidden = 300
num_classes = 1000


def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return [hidden, num_classes]
