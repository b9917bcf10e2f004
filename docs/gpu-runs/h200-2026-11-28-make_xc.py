"""Write a synthetic XC dataset (train_X/Y.npz, test_X/Y.npz) for the loop-at-scale run."""

import sys
from pathlib import Path

import scipy.sparse as sp

from fedkernels.data import synthetic_xc

p, n_train, n_test, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
out.mkdir(parents=True, exist_ok=True)
d = synthetic_xc(num_samples=n_train + n_test, num_classes=p, num_features=2**15, seed=1)
X, Y = d.features.tocsr(), d.labels.tocsr()
for part, rows in (("train", slice(0, n_train)), ("test", slice(n_train, n_train + n_test))):
    sp.save_npz(out / f"{part}_X.npz", X[rows])
    sp.save_npz(out / f"{part}_Y.npz", Y[rows])
print(f"wrote {out}: p={p} train={n_train} test={n_test} nnz(X)={X.nnz} nnz(Y)={Y.nnz}")
