"""Distributed batch inference: each rank predicts its shard of the data, the chief gathers them.

    tfdist launch --slots 3 -- examples/inference/predict.py --out predictions.json
    python examples/inference/predict.py --out predictions.json      # the same, one process

Every rank builds the same model (fixed seed here; load your trained one with keras.models.load_model),
takes every size-th example starting at its rank, and sends (index, class, probabilities) to the chief
with ctx.gather, which puts them back in input order and writes them. ctx.gather carries small values
(at most 1 MiB per rank and call): for large outputs, have each rank write its shard to shared storage and
gather the paths instead.
"""

import argparse
import json
import os

import tfdist

ctx = tfdist.init()

import keras  # noqa: E402
import numpy as np  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="where the chief writes the predictions (JSON)")
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

digits = np.loadtxt(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "digits.csv.gz"),
                    delimiter=",")  # the UCI digits, 8x8 pixels 0..16 and the label (examples/data/README.md)
images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
keras.utils.set_random_seed(0)  # the same weights on every rank
model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])

mine = np.arange(ctx.rank, len(images), ctx.size)  # this rank's shard: every size-th example
probabilities = model.predict(images[mine], batch_size=args.batch_size, verbose=0) if len(mine) else np.zeros((0, 10))
shard = [[int(i), int(p.argmax()), [round(float(v), 7) for v in p]] for i, p in zip(mine, probabilities)]
shards = ctx.gather(shard)  # a list of every rank's shard on the chief, None elsewhere
if ctx.is_chief:
    rows = sorted((row for part in shards for row in part), key=lambda row: row[0])
    assert [row[0] for row in rows] == list(range(len(images))), "every example exactly once"
    with open(args.out, "w") as f:
        json.dump({"examples": len(rows), "classes": [r[1] for r in rows], "probabilities": [r[2] for r in rows]}, f)
    print(f"predicted {len(rows)} examples on {ctx.size} ranks; wrote {args.out}", flush=True)
