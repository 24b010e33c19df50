"""mindexp's callbacks in a plain MindSpore script: no framework needed."""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Model

from mindexp.callbacks import Checkpoint, GradNormMonitor, LossMonitor, ParameterTracker, TrainStep

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_seed(0)

x = np.random.default_rng(0).random((100, 1), dtype=np.float32)
y = 2 * x
dataset = ds.GeneratorDataset(list(zip(x, y)), ["x", "y"], shuffle=True).batch(10)

net = nn.Dense(1, 1, weight_init="normal", bias_init="zeros")
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.2)
train_cell = TrainStep(nn.WithLossCell(net, nn.MSELoss()), optimizer, clip_grad_norm=10.0)
model = Model(train_cell)  # the train cell returns (loss, grad_norm)
logs = [
    LossMonitor("logs"),                              # logs/loss.csv
    ParameterTracker("logs"),                         # logs/params.csv
    GradNormMonitor("logs"),                          # logs/grad_norm.csv
]
model.train(30, dataset, callbacks=logs + [
    Checkpoint("logs", every_epochs=10, keep_last=3, flush=logs),  # logs/checkpoints/
])
print("weight", net.weight.asnumpy().item(), "bias", net.bias.asnumpy().item())
