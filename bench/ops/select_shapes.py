"""Parameter shapes of ResNet-50 and BERT-base, derived from the architectures (no downloads)."""

from __future__ import annotations

Shape = tuple[int, ...]


def resnet50_shapes(num_classes: int = 1000) -> list[Shape]:
    """torchvision resnet50's 161 trainable tensors (25,557,032 parameters), in state_dict order."""
    shapes: list[Shape] = [(64, 3, 7, 7), (64,), (64,)]  # conv1, bn1 weight and bias
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [
                (planes, inplanes, 1, 1),
                (planes,),
                (planes,),  # conv1, bn1
                (planes, planes, 3, 3),
                (planes,),
                (planes,),  # conv2, bn2
                (planes * 4, planes, 1, 1),
                (planes * 4,),
                (planes * 4,),
            ]  # conv3, bn3
            if b == 0:  # downsample: 1x1 conv and its bn
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(num_classes, 2048), (num_classes,)]  # fc
    return shapes


def bert_base_shapes(
    vocab: int = 30522,
    hidden: int = 768,
    layers: int = 12,
    intermediate: int = 3072,
    max_positions: int = 512,
    type_vocab: int = 2,
) -> list[Shape]:
    """bert-base-uncased's 199 tensors (109,482,240 parameters): embeddings, 12 layers, pooler."""
    h = hidden
    shapes: list[Shape] = [(vocab, h), (max_positions, h), (type_vocab, h), (h,), (h,)]
    for _ in range(layers):
        shapes += [(h, h), (h,)] * 3  # query, key, value
        shapes += [(h, h), (h,), (h,), (h,)]  # attention output dense + LayerNorm
        shapes += [(intermediate, h), (intermediate,)]  # intermediate dense
        shapes += [(h, intermediate), (h,), (h,), (h,)]  # output dense + LayerNorm
    shapes += [(h, h), (h,)]  # pooler
    return shapes
