"""A plain PyTorch training loop on Bibtex, three times, each with a different output layer:

- ``linear``:  ``nn.Linear`` over all classes with BCE (what you would write without fedkernels);
- ``fedmlh``:  ``fedkernels.nn.FedMLHHead`` (R hash tables of B buckets; top-k by ``bucket_merge_topk``);
- ``sampled``: ``fedkernels.nn.SampledSoftmaxHead`` (each step: the batch's positive classes plus
  ``m`` negatives from ``fedkernels.sample_negatives``, loss by the chunked ``linear_cross_entropy``).

It prints, per head, the mean training loss of the first and last epoch and the test P@1 next to
the label prior (always predicting the most frequent training label).

    python examples/bibtex_heads.py --data ../shared/data/bibtex       # a folder with train.txt, test.txt
    python examples/bibtex_heads.py --data Bibtex-mirror               # or a name fetched by `fedkernels data get`
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import fedkernels
from fedkernels.data import load_dataset
from fedkernels.fl import ClientData
from fedkernels.metrics import precision_at_k
from fedkernels.nn import FedMLHHead, SampledSoftmaxHead


def label_pairs(batch: ClientData) -> tuple[torch.Tensor, torch.Tensor]:
    """(sample row, label) for every label of every sample: a softmax head trains on each pair."""
    counts = batch.indptr[1:] - batch.indptr[:-1]
    return torch.repeat_interleave(torch.arange(len(counts)), counts), batch.indices


class Model(nn.Module):
    """An encoder ``x -> h`` followed by one of the three heads."""

    def __init__(self, kind: str, num_features: int, num_classes: int, dim: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.kind, self.num_classes = kind, num_classes
        self.encoder = nn.Sequential(nn.Linear(num_features, dim), nn.ReLU())
        if kind == "linear":
            self.head = nn.Linear(dim, num_classes)
        elif kind == "fedmlh":
            self.head = FedMLHHead(dim, num_classes, num_tables=4, num_buckets=40, seed=seed)
        else:  # the full class matrix; each step trains a SampledSoftmaxHead gathered from it
            self.classes = nn.Parameter(torch.randn(num_classes, dim) * 0.05)

    def loss(self, batch: ClientData, step: int, negatives: int) -> tuple[torch.Tensor, SampledSoftmaxHead | None]:
        h = self.encoder(batch.x)
        if self.kind == "linear":
            return F.binary_cross_entropy_with_logits(self.head(h), batch.dense_labels()), None
        if self.kind == "fedmlh":
            return self.head.loss(h, batch.indptr, batch.indices), None
        positives = torch.unique(batch.indices)
        neg = fedkernels.sample_negatives(
            positives, self.num_classes, min(negatives, self.num_classes - len(positives)), seed=step
        )
        head = SampledSoftmaxHead.gather(self.classes.detach(), positives, neg, self.num_classes)
        rows, labels = label_pairs(batch)
        return head(h[rows], labels), head

    @torch.no_grad()
    def topk(self, x: torch.Tensor, k: int) -> torch.Tensor:
        h = self.encoder(x)
        if self.kind == "linear":
            return self.head(h).topk(k, dim=1).indices
        if self.kind == "fedmlh":
            return self.head.predict_topk(h, k)[1]
        return (h @ self.classes.T).topk(k, dim=1).indices


def train(
    kind: str, train_set: ClientData, epochs: int, batch_size: int, lr: float, row_lr: float, negatives: int, seed: int
) -> tuple[Model, list[float]]:
    """Train one model; returns it and the mean loss of every epoch."""
    model = Model(kind, train_set.x.shape[1], train_set.num_classes, 128, seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p is not getattr(model, "classes", None)], lr=lr)
    g = torch.Generator().manual_seed(seed)
    losses, step = [], 0
    for _ in range(epochs):
        total, count = 0.0, 0
        for idx in torch.randperm(len(train_set), generator=g).split(batch_size):
            batch = train_set.rows(idx)
            opt.zero_grad(set_to_none=True)
            loss, head = model.loss(batch, step, negatives)
            loss.backward()
            opt.step()
            if head is not None:  # write the trained rows back into the class matrix (what a FedSS client sends)
                with torch.no_grad():
                    ids, rows = head.class_ids, head.weight - row_lr * head.weight.grad
                    model.classes[ids] = rows
            total, count, step = total + float(loss.detach()) * len(idx), count + len(idx), step + 1
        losses.append(total / count)
    return model, losses


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data", default="../shared/data/bibtex", help="Bibtex folder (train.txt, test.txt) or dataset name"
    )
    p.add_argument(
        "--heads", nargs="+", default=["linear", "fedmlh", "sampled"], choices=["linear", "fedmlh", "sampled"]
    )
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--row-lr", type=float, default=0.5, help="SGD step of the sampled class rows (sampled head)")
    p.add_argument("--negatives", type=int, default=32, help="sampled negatives per step (sampled head)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)  # these models are small: more threads only wait on each other on a busy machine
    try:
        ds = load_dataset(args.data)
    except FileNotFoundError as e:
        print(
            f"bibtex_heads.py: {e}\n(get Bibtex in XC format, train.txt + test.txt, and pass --data FOLDER)",
            file=sys.stderr,
        )
        return 2
    tr, te = ds.train, ds.test
    counts = torch.bincount(tr.indices, minlength=tr.num_classes)
    prior = precision_at_k(torch.full((len(te), 1), int(counts.argmax())), te.indptr, te.indices, 1)
    print(f"{ds.name}: {len(tr)} train / {len(te)} test, {ds.num_features} features, {ds.num_classes} classes")
    for kind in args.heads:
        t0 = time.perf_counter()
        model, losses = train(kind, tr, args.epochs, args.batch_size, args.lr, args.row_lr, args.negatives, args.seed)
        p1 = precision_at_k(model.topk(te.x, 1), te.indptr, te.indices, 1)
        print(
            f"head={kind:<8} loss {losses[0]:.4f} -> {losses[-1]:.4f}  test P@1 {p1:.3f}  "
            f"(label prior P@1 {prior:.3f})  {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
