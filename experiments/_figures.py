"""Helpers for the shipped experiments' ``figures(network, split)`` hooks:
small figures drawn without pyplot (rendered by Agg off the training thread)."""
import numpy as np


def figure(width=4.0, height=3.0):
    """A small matplotlib Figure, not registered with pyplot (nothing to close)."""
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=80, layout="constrained")


def predict(network, *inputs):
    """The network's output(s) on numpy inputs, as numpy arrays."""
    from mindspore import Tensor
    out = network(*(Tensor(np.ascontiguousarray(a)) for a in inputs))
    if isinstance(out, (tuple, list)):
        return tuple(o.asnumpy() for o in out)
    return out.asnumpy()


def sample(arrays, limit, seed=0):
    """At most ``limit`` rows of equal-length arrays (the same rows of each)."""
    n = len(arrays[0])
    if n <= limit:
        return tuple(np.asarray(a) for a in arrays)
    rows = np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))
    return tuple(np.asarray(a)[rows] for a in arrays)


def confusion_matrix(labels, predicted, classes):
    """The confusion matrix (rows: true class, columns: predicted) as a figure."""
    counts = np.zeros((classes, classes), dtype=int)
    np.add.at(counts, (np.asarray(labels, int), np.asarray(predicted, int)), 1)
    fig = figure(3.6, 3.2)
    ax = fig.add_subplot()
    image = ax.imshow(counts, cmap="Blues")
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    if classes <= 12:
        ax.set_xticks(range(classes))
        ax.set_yticks(range(classes))
    return fig


def misclassified(images, labels, predicted, limit=16):
    """A grid of up to ``limit`` misclassified images titled true -> predicted."""
    wrong = np.flatnonzero(np.asarray(labels) != np.asarray(predicted))[:limit]
    side = max(1, int(np.ceil(np.sqrt(max(len(wrong), 1)))))
    fig = figure(0.9 * side + 0.4, 0.9 * side + 0.4)
    axes = fig.subplots(side, side, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, i in zip(axes.flat, wrong):
        image = np.asarray(images[i], dtype=float)
        if image.ndim == 3 and image.shape[0] in (1, 3):  # CHW -> HWC
            image = np.moveaxis(image, 0, -1)
        ax.imshow(image.squeeze(), cmap="gray")
        ax.set_title(f"{labels[i]}->{predicted[i]}", fontsize=7)
    if not len(wrong):
        axes.flat[0].text(0.5, 0.5, "none misclassified", ha="center", va="center")
    fig.suptitle("misclassified (true->predicted)", fontsize=8)
    return fig


def classifier_figures(network, images, labels, classes):
    """The confusion matrix and a grid of misclassified images of a classifier."""
    predicted = np.concatenate([predict(network, images[i:i + 256]).argmax(1)
                                for i in range(0, len(images), 256)])
    return {"confusion": confusion_matrix(labels, predicted, classes),
            "misclassified": misclassified(images, labels, predicted)}


def first_samples(dataset, limit):
    """Up to ``limit`` samples of an unbatched MindSpore dataset as stacked numpy columns."""
    rows = []
    for row in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
        rows.append(row)
        if len(rows) >= limit:
            break
    return tuple(np.stack(column) for column in zip(*rows))
