"""Tests only: `keras.datasets.mnist.load_data` without the network. Horovod's MNIST examples download
MNIST; on a PYTHONPATH (tfdist's worker start-up chains to an environment's own sitecustomize) this
makes the download a small synthetic digits set instead (a bright square whose place is the label), so
the scripts run unchanged and offline. OFFLINE_MNIST_SIDE sets the images' side (default 28): small
images make Horovod's convolutional model cheap on CPU; OFFLINE_MNIST_COUNT the training images."""

import importlib.abc
import importlib.util
import os
import sys
import tempfile


def _synthetic_mnist(fname, *args, **kwargs):
    import numpy as np

    side = int(os.environ.get("OFFLINE_MNIST_SIDE", "28"))
    count = int(os.environ.get("OFFLINE_MNIST_COUNT", "2048"))
    rng = np.random.RandomState(0)

    def digits(n):
        labels = rng.randint(0, 10, n).astype("uint8")
        images = rng.randint(0, 60, (n, side, side)).astype("uint8")
        cell = max(side // 4, 1)
        for i, label in enumerate(labels):
            row, col = divmod(int(label), 4)
            images[i, row * cell:(row + 1) * cell, col * cell:(col + 1) * cell] = 255
        return images, labels

    (x_train, y_train), (x_test, y_test) = digits(count), digits(count // 4)
    path = os.path.join(tempfile.mkdtemp(prefix="offline-mnist-"), os.path.basename(fname))
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


class _AfterMnist(importlib.abc.MetaPathFinder):
    """Replaces `get_file` in keras.src.datasets.mnist once that module has loaded."""

    NAME = "keras.src.datasets.mnist"

    def find_spec(self, name, path=None, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        upstream = spec.loader.exec_module

        def exec_module(module):
            upstream(module)
            module.get_file = _synthetic_mnist

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterMnist())
