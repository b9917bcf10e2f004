"""FedAwS (Yu et al. 2020), FedALC and FedALC-fixed: federated learning with one label per client.

Each client holds positives of a single class only. The model is a feature extractor ``g`` (an MLP
``F -> hidden -> d``) and class embeddings ``W [p, d]``; scores are cosines ``cos(g(x), w_c)``.
A client downloads ``g`` and only its own class's embedding, trains on the positive loss
``max(0, pos_margin - cos(g(x), w_c))^2`` and uploads ``g`` (and ``w_c``). The server averages ``g``
(weighted by sample counts), averages the returned embeddings per class, then takes a spreadout step
on ``W`` so classes do not collapse (compiled ``spreadout_loss``, forward and fused backward):

- FedAwS: ``W <- normalize(W - lr_sp * grad spreadout_loss(W, margin, k))`` (all pairs weigh 1).
- FedALC: the same with the pair weights ``alpha = 1 - cooc(c, c') / count(c)`` the server collects
  privately before training (:mod:`fedkernels.fl.labelsets`), so co-occurring labels are pushed
  apart less.
- FedALC-fixed: ``W`` is learned once in ``setup`` from the same label sets
  (:func:`fedkernels.nn.learn_fixed_class_embeddings`) and then held fixed: clients still download
  their ``w_c`` (they need it for the loss) but never upload it, and the server takes no spreadout steps.

The class a client holds travels in its request as a row of ``W`` (the server must know which row to
send). FedAwS uses the class id as the row. FedALC and FedALC-fixed use a row the server cannot
relate to a class id: ``perm[c]``, a keyed random permutation under ``client_secret``, a secret the
clients hold and the server does not (given to the clients' side of the run out of band, or made with
:func:`fedkernels.fl.labelsets.new_client_secret`; never derived from the run seed). Label-set
collection uses keyed digests under the same secret, so the server learns co-occurrence counts
between opaque rows, never label ids, instance contents or which feature row an instance digest is
(see ``docs/api/spread.md`` for what it does learn). In this one-process simulation the strategy
object also plays the clients: only the methods marked "client side" touch the secret, and the
server-side state (``State``, checkpoints, run identity) never holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ...nn.spreadout import FORMS, learn_fixed_class_embeddings, positive_pull, spreadout_objective
from ...ops.spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss
from .. import labelsets as ls
from ..aggregate import weighted_average, weighted_rows_mean
from ..batched import LocalProblem, call_module
from ..local import train_local
from ..models import embed_mlp, embed_mlp_skeleton, load_state, mlp, mlp_skeleton, state_of, topk_ids
from ..payload import Payload, PayloadError, PayloadSpec, TensorSpec, encode, state_spec
from ..seeding import derive_seed, generator
from ..strategy import SERVER, State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

_G = "g."  # prefix of the feature extractor's tensors in the state
# FedALC's setup result, kept in the state (checkpointed, never sent to clients): the pair weights
# as CSR tensors, and FedALC-fixed's class embeddings.
PW_INDPTR, PW_INDICES, PW_VALUES = SERVER + "pair_indptr", SERVER + "pair_indices", SERVER + "pair_values"
FIXED_W = SERVER + "fixed_W"
ROW_SCALE = SERVER + "row_scale"  # float32 [C]: FedALC weights="counts": count(c) per server row
# FedALC init="cooc": the correlation-placed embeddings round 0 starts from, emptied ([0, d]) once
# round 0 has folded them into W (the setup may add state entries, never replace W)
INIT_W = SERVER + "init_W"
INITS = ("random", "cooc")


def client_class(data: ClientData) -> int:
    """The one class a client holds (every sample's label set must be exactly that class)."""
    labels = torch.unique(data.indices)
    if labels.numel() != 1 or not bool((data.indptr.diff() == 1).all()):
        raise ValueError("FedAwS/FedALC need one label per client: every sample labelled with the same single class")
    return int(labels[0])


def positive_loss(z: torch.Tensor, w: torch.Tensor, margin: float) -> torch.Tensor:
    """``mean_n max(0, margin - cos(z_n, w))^2`` for embeddings ``z [n, d]`` and one class ``w [d]``."""
    cos = F.normalize(z, dim=1) @ F.normalize(w, dim=0)
    return torch.clamp(margin - cos, min=0).pow(2).mean()


def positive_rows(
    module: torch.nn.Module, params: dict, consts: dict, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Each row's :func:`positive_loss` term ``max(0, margin - cos(g(x), w))^2``: ``[B]`` (the class
    embedding ``w`` is a trained parameter or, for fixed embeddings, a constant; ``y`` is unused: every
    row of a one-label client is a positive of its class)."""
    w = params["w"] if "w" in params else consts["w"]
    z = call_module(module, {n: t for n, t in params.items() if n != "w"}, x)
    cos = F.normalize(z, dim=1) @ F.normalize(w, dim=0)
    return torch.clamp(consts["pos_margin"] - cos, min=0).pow(2)


def label_report(data: ClientData, key: bytes, class_rows: torch.Tensor) -> Payload:
    """Client side of the label-set collection: keyed digests of this client's (instance, label)
    pairs and, for each label it holds, the link from its label digest to the server row it trains.

    Returns:
        ``pairs`` uint8 ``[n, 64]`` (instance digest, label digest; sorted, unique), ``label_digests``
        uint8 ``[m, 32]`` and ``rows`` int64 ``[m]``: the row ``class_rows[label]`` of each held label.
    """
    report = ls.client_report(
        key,
        [row.numpy() for row in data.x],
        [data.indices[data.indptr[i] : data.indptr[i + 1]].tolist() for i in range(len(data))],
    )
    held = sorted({int(lab) for lab in data.indices.tolist()})
    digests = b"".join(ls.label_digest(key, lab) for lab in held)
    return {
        "pairs": report.to_tensor(),
        "label_digests": torch.frombuffer(bytearray(digests), dtype=torch.uint8).reshape(len(held), ls.DIGEST_BYTES),
        "rows": torch.tensor([int(class_rows[lab]) for lab in held], dtype=torch.int64, device="cpu"),
    }


MAX_REPORT_PAIRS = 1 << 16
"""The default bound on a setup report's (instance, label) pairs (64 bytes each: a 4 MiB report).
An honest FedALC client reports one pair per sample it holds; raise ``max_report_pairs`` for
clients with more samples."""


def label_report_spec(
    num_classes: int, max_pairs: int = MAX_REPORT_PAIRS, max_labels: int | None = None
) -> PayloadSpec:
    """What a well-formed :func:`label_report` looks like: at most ``max_pairs`` pairs and
    ``max_labels`` (default ``num_classes``) label digests linked to distinct server rows of
    ``num_classes``. Every tensor is bounded, so a longer report is refused on its length alone."""
    m = num_classes if max_labels is None else max_labels
    return PayloadSpec(
        {
            "pairs": TensorSpec(torch.uint8, (None, 2 * ls.DIGEST_BYTES), max_numel=max_pairs * 2 * ls.DIGEST_BYTES),
            "label_digests": TensorSpec(torch.uint8, ("m", ls.DIGEST_BYTES), max_numel=m * ls.DIGEST_BYTES),
            "rows": TensorSpec(torch.int64, ("m",), min_value=0, max_value=num_classes, unique=True, max_numel=m),
        }
    )


def check_label_report(report: Payload) -> Payload:
    """Content check of a decoded report: every label digest of its pairs has a link, each once.
    Raises ValueError (PayloadError) otherwise."""
    links = report["label_digests"].contiguous().numpy().tobytes()
    linked = {links[o : o + ls.DIGEST_BYTES] for o in range(0, len(links), ls.DIGEST_BYTES)}
    if len(linked) != report["label_digests"].shape[0]:
        raise PayloadError("label report links a label digest twice")
    used = {lab for _, lab in ls.LabelReport.from_tensor(report["pairs"]).pairs}
    if not used <= linked:
        raise PayloadError(f"label report has {len(used - linked)} label digests without a row")
    return report


def pair_weights_from_reports(reports: Sequence[Payload], num_classes: int) -> PairWeights:
    """Server side of the label-set collection: merge the checked reports into label sets over
    digests, build ``alpha`` and move it to the linked server rows. Where clients link one digest to
    different rows, or different digests to one row, the first report's link holds (reports in
    ascending client id) and the pairs of the digest that lost are dropped."""
    return label_statistics_from_reports(reports, num_classes)[0]


def label_statistics_from_reports(reports: Sequence[Payload], num_classes: int) -> tuple[PairWeights, torch.Tensor]:
    """:func:`pair_weights_from_reports` and each server row's instance count ``count(c)`` (float32
    ``[num_classes]``, 0 for rows no report links)."""
    links: dict[bytes, int] = {}
    taken: set[int] = set()
    for r in reports:
        raw = r["label_digests"].contiguous().numpy().tobytes()
        for i, row in enumerate(r["rows"].tolist()):
            digest = raw[i * ls.DIGEST_BYTES : (i + 1) * ls.DIGEST_BYTES]
            # one digest per row, first come: an honest run links each class's one digest to its row,
            # so a second digest claiming a taken row comes from a lying client (its pairs are dropped;
            # kept, they would give the row two sets of pairs and the weights duplicate entries)
            if digest not in links and int(row) not in taken:
                links[digest] = int(row)
                taken.add(int(row))
    sets = ls.merge_reports(
        ls.LabelReport(tuple(p for p in ls.LabelReport.from_tensor(r["pairs"]).pairs if p[1] in links)) for r in reports
    )
    to_row = torch.tensor([links[d] for d in sets.label_digests], dtype=torch.int64, device="cpu")
    pw = sets.pair_weights()
    rows = torch.repeat_interleave(torch.arange(sets.num_classes, device=pw.indptr.device), pw.indptr.diff())
    counts = torch.zeros(num_classes, dtype=torch.float32, device="cpu")
    counts[to_row] = sets.counts().to(torch.float32)
    return PairWeights.from_pairs(to_row[rows], to_row[pw.indices], pw.values, num_classes), counts


def class_pair_weights(
    clients: Sequence[ClientData], key: bytes, num_classes: int, class_rows: torch.Tensor | None = None
) -> tuple[PairWeights, int]:
    """FedALC weights over server rows from private label-set collection, all sides in one call.

    Client side: every client makes its :func:`label_report` (keyed digests of its (instance, label)
    pairs and the links from its label digests to the server rows it trains, ``class_rows[c]``;
    default: the class id itself). Server side: :func:`pair_weights_from_reports`. The server sees
    only digests and rows, never ``key`` or a class id (when ``class_rows`` is a keyed permutation).
    Also returns the bytes the reports take serialised (safetensors), the collection's one-off upload.
    """
    if any(c.x.layout == torch.sparse_csr for c in clients):
        raise TypeError(
            "clients: the label-set collection digests dense feature rows; pass dense features (x.to_dense())"
        )
    rows_of_class = torch.arange(num_classes, device="cpu") if class_rows is None else class_rows
    reports = [label_report(c, key, rows_of_class) for c in clients]
    return pair_weights_from_reports(reports, num_classes), sum(len(encode(r)) for r in reports)


class FedAwS(Strategy):
    """FedAwS: positive-only local training plus a server-side spreadout step on the class embeddings.

    Args:
        dim: class embedding size d.
        hidden: hidden widths of the feature extractor ``F -> hidden -> d``.
        pos_margin: cosine the positive loss asks for.
        margin: the spreadout regulariser's margin (on unit-norm embeddings). With
            ``metric="l2"`` random unit rows in d dimensions sit near distance sqrt(2), so a margin
            well below that (e.g. 1.0 for d = 64) leaves almost no pair inside it: the regulariser
            and FedALC's pair weights then do nothing (on Bibtex almost no k-NN pair is active with margin
            1.0, all of them are with 1.414).
        k: neighbours per class in the spreadout regulariser.
        metric: ``"l2"`` or ``"cosine"``, the regulariser's distance.
        spread_lr: the server's spreadout step size. The papers' regulariser weight lambda multiplies
            the client learning rate (FedAwS: the server step is ``lambda * lr``), so
            ``spread_lr = lambda * lr``.
        spread_steps: the server's spreadout steps per round.
        model: ``"mlp"`` (``F -> hidden -> d``) or ``"embed"``, the papers' text model
            (:func:`~fedkernels.fl.models.embed_mlp`: an ``embed_dim`` embedding layer, then linear
            layers of widths ``hidden`` with ReLU, then ``d``).
        embed_dim: the embedding layer's width (``model="embed"`` only).
        pull: weight of the co-occurrence pull ``sum (1 - alpha) ||w_c - w_c'||^2`` in the server
            step (FedALC only: "keep correlated labels close"; 0 is the push-only regulariser).
        regularizer: ``"hinge"``, FedAwS's spreadout ``max(0, margin - d)^2`` over the k nearest
            classes, or ``"unhinged"``, ``-d^2`` over them (every neighbour pushed, no margin; the
            FedALC paper's form). See :func:`fedkernels.nn.spreadout.spreadout_objective`.
    """

    dp_sgd_training = True  # its client_update trains with train_local (DP-SGD applies)

    name = "FedAwS"
    uses_pair_weights = False
    fixed_embeddings = False

    def __init__(
        self,
        dim: int = 32,
        hidden: Sequence[int] = (64,),
        pos_margin: float = 0.9,
        margin: float = 1.0,
        k: int = 10,
        metric: str = "l2",
        spread_lr: float = 0.1,
        spread_steps: int = 1,
        model: str = "mlp",
        embed_dim: int = 256,
        pull: float = 0.0,
        regularizer: str = "hinge",
    ) -> None:
        if model not in ("mlp", "embed"):
            raise ValueError(f"model must be 'mlp' or 'embed', got {model!r}")
        if pull < 0:
            raise ValueError(f"pull must be >= 0, got {pull}")
        if regularizer not in FORMS:
            raise ValueError(f"regularizer must be one of {FORMS}, got {regularizer!r}")
        if spread_steps < 0:
            raise ValueError(f"spread_steps must be >= 0, got {spread_steps}")
        self.regularizer = regularizer
        self.model, self.embed_dim, self.pull = model, int(embed_dim), float(pull)
        self.dim, self.hidden, self.pos_margin = int(dim), tuple(hidden), float(pos_margin)
        self.margin, self.k, self.metric = float(margin), int(k), metric
        self.spread_lr, self.spread_steps = float(spread_lr), int(spread_steps)

    def private_form(self, segments_every: int = 0):
        """The extractor plus the class embeddings over the round's row set, then the server's spreadout
        step (fixed embeddings: clients neither train nor upload them)."""
        from ..privacy.forms import RowsForm

        self.check_private_form(segments_every)
        return RowsForm(
            self,
            fedss=False,
            key="W",
            body_prefix=_G,
            table_key=FIXED_W,
            uploads_rows=not self.fixed_embeddings,
            after_rows=lambda state, W: self._spread(W, pair_weights_of(state)),
        )

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        state = {_G + n: t for n, t in state_of(self._make_extractor(num_features, seed)).items()}
        g = generator(seed, "class-embeddings")
        state["W"] = F.normalize(torch.randn(num_classes, self.dim, generator=g, device="cpu"), dim=1)
        return state

    def _make_extractor(self, num_features: int, seed: int = 0) -> torch.nn.Module:
        if self.model == "embed":
            return embed_mlp(num_features, self.dim, self.embed_dim, self.hidden, seed)
        return mlp(num_features, self.dim, self.hidden, seed)

    def _extractor(self, state: Payload) -> torch.nn.Module:
        # F: the first layer's input width (Linear or embedding, both [out, F]); dims live in the state
        return load_state(
            self._make_extractor(state[_G + "0.weight"].shape[1]),
            {n[len(_G) :]: t for n, t in state.items() if n.startswith(_G)},
        )

    def client_request(self, data: ClientData, round: int, seed: int) -> Payload:
        return {"class_id": torch.tensor([client_class(data)], dtype=torch.int64, device="cpu")}

    def request_spec(self, state: State) -> PayloadSpec:
        return PayloadSpec({"class_id": TensorSpec(torch.int64, (1,), min_value=0, max_value=state["W"].shape[0])})

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        assert request is not None
        c = int(request["class_id"][0])
        out = {n: t for n, t in state.items() if n.startswith(_G)}
        out["w"] = self._embeddings(state)[c].clone()
        return out

    def _embeddings(self, state: State) -> torch.Tensor:
        return state[FIXED_W] if FIXED_W in state else state["W"]

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        g = self._extractor(payload)
        w = payload["w"].clone().requires_grad_(not self.fixed_embeddings)
        params = list(g.parameters()) + ([] if self.fixed_embeddings else [w])
        train_local(
            params, lambda b: positive_loss(g(b.x), w, self.pos_margin), data, config, generator(seed, "shuffle")
        )
        out = {_G + n: t for n, t in state_of(g).items()}
        if not self.fixed_embeddings:
            out["w"] = w.detach().clone()
        return out

    def local_problem(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int
    ) -> LocalProblem | None:
        num_features = int(payload[_G + "0.weight"].shape[1])
        g = (
            embed_mlp_skeleton(num_features, self.dim, self.embed_dim, self.hidden)
            if self.model == "embed"
            else mlp_skeleton(num_features, self.dim, self.hidden)
        )
        names = [n for n, _ in g.named_parameters()]  # the extractor's state: parameters only
        params = {n: payload[_G + n] for n in names}
        device = payload["w"].device
        consts = {"pos_margin": torch.tensor(self.pos_margin, device=device)}
        if self.fixed_embeddings:
            consts["w"] = payload["w"]
        else:
            params["w"] = payload["w"]

        def finish(p: dict[str, torch.Tensor]) -> Payload:
            out = {_G + n: p[n] for n in names}
            if not self.fixed_embeddings:
                out["w"] = p["w"]
            return out

        n = len(data)
        return LocalProblem(
            g,
            params,
            positive_rows,
            torch.zeros(n, device=device),
            torch.ones(n, device=device),
            finish,
            generator(seed, "shuffle"),
            consts,
        )

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        names = [n for n in state if n.startswith(_G)]
        spec = state_spec(state, names)
        if not self.fixed_embeddings:
            spec["w"] = TensorSpec(torch.float32, (self.dim,))
        return PayloadSpec(spec)

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """The upload with the class row the client's checked request asked for (aggregate needs it)."""
        assert request is not None, "FedAwS clients always send a request"
        return {**upload, "class_id": request["class_id"]}

    def _spread(
        self, W: torch.Tensor, pair_weight: PairWeights | None, row_scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``spread_steps`` gradient steps on the spreadout loss (compiled kernels), then unit rows."""
        kk = min(self.k, W.shape[0] - 1)
        for _ in range(self.spread_steps):
            Wg = W.detach().requires_grad_(True)
            if self.regularizer == "hinge" and row_scale is None:
                loss = spreadout_loss(Wg, self.margin, kk, pair_weight, self.metric)
            else:
                loss = spreadout_objective(Wg, kk, self.margin, pair_weight, row_scale, self.regularizer, self.metric)
            if self.pull > 0 and pair_weight is not None:
                loss = loss + self.pull * positive_pull(Wg, pair_weight)
            (grad,) = torch.autograd.grad(loss, Wg)
            W = F.normalize(W - self.spread_lr * grad, dim=1)
        return W

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        weights = [float(r.num_examples) for r in results]
        new = weighted_average([{n: t for n, t in r.payload.items() if n.startswith(_G)} for r in results], weights)
        W = state["W"].clone()
        if not self.fixed_embeddings:
            # per class: the sample-weighted mean of its clients' embeddings (scatter_rows_mean, client order);
            # each client's class id comes from check_upload
            ids = [r.payload["class_id"].reshape(1).to(torch.int64) for r in results]
            W = weighted_rows_mean(W, ids, [r.payload["w"].reshape(1, -1) for r in results], weights)
            W = self._spread(W, pair_weights_of(state), state.get(ROW_SCALE))
        new["W"] = W
        new.update({n: t for n, t in state.items() if n.startswith(SERVER)})  # the setup's result, unchanged
        return new

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        z = F.normalize(self._extractor(state)(x), dim=1)
        return topk_ids(z, F.normalize(self._embeddings(state), dim=1), k)  # cosines, fused: no [N, p]

    def model_bytes(self, state: State) -> int:
        """A client holds the extractor and one class embedding."""
        return sum(t.numel() * t.element_size() for n, t in state.items() if n.startswith(_G)) + 4 * self.dim


def pair_weights_of(state: State) -> PairWeights | None:
    """The pair weights FedALC's setup put in ``state`` (None: FedAwS, unweighted)."""
    if PW_INDPTR not in state:
        return None
    return PairWeights(state[PW_INDPTR], state[PW_INDICES], state[PW_VALUES])


class FedALC(FedAwS):
    """FedAwS with label-correlation pair weights collected privately in ``setup``.

    Args (beyond FedAwS's):
        weights: the pair weights' form. ``"ratio"``: ``alpha[c, c'] = 1 - cooc(c, c') / count(c)``
            (count-normalised, in [0, 1]); ``"counts"``: ``count(c) - cooc(c, c')``, the unnormalised
            form (``count(c)`` times the ratio: frequent classes push harder; the regulariser's scale
            grows by the mean count, so its weight lambda shrinks by as much).
        client_secret: the clients' shared secret (bytes, >= 16), handed to the clients' side of the
            run out of band; ``None`` makes a fresh one with :mod:`secrets` (then the server state's
            row order differs between runs, while class-space results do not). Never derived from the
            run seed: the server knows the seed. Keys the label digests and the class-to-row
            permutation; the server-side state never holds it. Same seed and same secret give
            bit-identical runs; resuming a checkpoint needs the same secret (its run identity holds
            :func:`~fedkernels.fl.labelsets.key_id`, a one-way tag of it). A ``str`` is taken as its
            UTF-8 bytes (how a config file gives one; a preset's fixed secret makes its runs
            reproducible and is no secret: never ship one to real clients).
        client_secret_file: read the secret from this file (64 hex digits, mode 0600), making it there
            with a fresh secret if it is missing (:func:`~fedkernels.fl.labelsets.secret_from_file`):
            how ``fedkernels run --checkpoint`` keeps it for ``--resume`` without writing it anywhere else.
        max_report_pairs: the most (instance, label) pairs a client's setup report may hold (one per
            sample it holds; default 2**16, a 4 MiB report): longer reports are refused on their length.
        init: the class embeddings round 0 starts from. ``"random"``: FedAwS's random unit rows.
            ``"cooc"`` (an ablation): the embeddings FedALC-fixed learns once from the collected label
            sets (:func:`fedkernels.nn.learn_fixed_class_embeddings`: co-occurring labels pulled
            together, the nearest others pushed apart), then trained and spread as usual; so the k
            nearest classes start as correlated labels and the pair weights act on them from round 0.
            Not for private rounds.
    """

    name = "FedALC"
    uses_pair_weights = True
    # class_permutation(secret, C) memoised per C: configuration (the constructor's secret), not run state
    config_caches = ("_perms",)

    def __init__(
        self,
        *args,
        client_secret: bytes | str | None = None,
        weights: str = "ratio",
        max_report_pairs: int = MAX_REPORT_PAIRS,
        client_secret_file: str | None = None,
        init: str = "random",
        **kw,
    ) -> None:
        super().__init__(*args, **kw)
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        if init != "random" and self.fixed_embeddings:
            raise ValueError(f"init={init!r} is for trained embeddings, not {self.name}'s fixed ones")
        self.init = init
        if isinstance(client_secret, str):  # a config file's secret (TOML has no bytes): its UTF-8 bytes
            client_secret = client_secret.encode("utf-8")
        if weights not in ("ratio", "counts"):
            raise ValueError(f"weights must be 'ratio' or 'counts', got {weights!r}")
        self.weights = weights
        if isinstance(max_report_pairs, bool) or not isinstance(max_report_pairs, int) or max_report_pairs < 1:
            raise ValueError(f"max_report_pairs must be an integer >= 1, got {max_report_pairs!r}")
        if client_secret is not None and client_secret_file is not None:
            raise ValueError("pass client_secret or client_secret_file, not both")
        if client_secret_file is not None:
            client_secret = ls.secret_from_file(client_secret_file)
        self._secret = ls.new_client_secret() if client_secret is None else ls.check_secret(client_secret)
        self.max_report_pairs = max_report_pairs
        self.client_secret_file = client_secret_file
        self._perms: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _permutation(self, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client side: class -> server row and server row -> class under the secret (C HMACs, memoised)."""
        perms = self._perms.get(num_classes)
        if perms is None:  # two threads may both compute it: the same tensors, one is kept
            perm = ls.class_permutation(self._secret, num_classes)
            perms = self._perms.setdefault(num_classes, (perm, torch.argsort(perm)))
        return perms

    def options(self) -> dict:
        """FedAwS's options plus the secret's one-way tag (a resumed run must use the same secret,
        wherever its file lives: the file's path is not part of the identity)."""
        out = {**super().options(), "client_key_id": ls.key_id(self._secret)}
        out.pop("client_secret_file", None)
        return out

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        state = super().init_state(num_features, num_classes, seed)
        W = torch.empty_like(state["W"])
        # class c's initial embedding sits at its row, as in FedAwS at c
        W[self._permutation(num_classes)[0]] = state["W"]
        state["W"] = W
        return state

    def client_request(self, data: ClientData, round: int, seed: int) -> Payload:
        """Client side: ask for the row of this client's class (never the class id)."""
        return {"class_id": self._permutation(data.num_classes)[0][client_class(data)].reshape(1).clone()}

    def setup_report(self, data: ClientData) -> Payload:
        """Client side: this client's :func:`label_report` under the clients' secret."""
        return label_report(data, self._secret, self._permutation(data.num_classes)[0])

    def setup_report_spec(self, state: State) -> PayloadSpec:
        """A client holds one class, so its report links one label digest; its pairs are bounded by
        ``max_report_pairs``. So one report is at most ``64 max_report_pairs`` bytes plus a small
        header, and adds at most ``2 (C - 1)`` pair weights (its row's co-occurrences)."""
        return label_report_spec(state["W"].shape[0], self.max_report_pairs, max_labels=1)

    def check_setup_report(self, report: Payload) -> Payload:
        return check_label_report(report)

    def setup_from_reports(self, state: State, reports: list[Payload], seed: int) -> State:
        """Server side: the pair weights from the clients' checked label reports, as state entries
        (with ``weights="counts"`` also each row's count, the regulariser's row scale; with
        ``init="cooc"`` the embeddings round 0 starts from, learned from the weights)."""
        pw, counts = label_statistics_from_reports(reports, state["W"].shape[0])
        out = {PW_INDPTR: pw.indptr, PW_INDICES: pw.indices, PW_VALUES: pw.values}
        if self.weights == "counts":
            out[ROW_SCALE] = counts
        if self.init == "cooc":
            out[INIT_W] = learn_fixed_class_embeddings(
                pw,
                self.dim,
                margin=self.margin,
                k=self.k,
                metric=self.metric,
                seed=derive_seed(seed, "init-embeddings"),
            )
        return out

    def private_form(self, segments_every: int = 0):
        if self.init != "random":
            raise ValueError(f"{self.name} with init={self.init!r} has no private form; run it without --secagg/--dp-*")
        return super().private_form(segments_every)

    def _embeddings(self, state: State) -> torch.Tensor:
        if INIT_W in state and state[INIT_W].numel():  # init="cooc" before round 0's aggregate
            return state[INIT_W]
        return super()._embeddings(state)

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        if INIT_W in state and state[INIT_W].numel():  # round 0 moves the initial embeddings, then drops them
            state = {**state, "W": state[INIT_W].clone(), INIT_W: state[INIT_W][:0].clone()}
        return super().aggregate(state, results, round)

    def diagnostics(self, state: State) -> dict[str, float]:
        """How far the pair weights move FedALC from FedAwS on ``state``'s embeddings: the fraction of
        the k-nearest-neighbour pairs with ``alpha < 0.9`` and the mean ``alpha`` over those pairs
        and over all pairs (``alpha`` in its ratio form, whatever ``weights`` is)."""
        pw = pair_weights_of(state)
        if pw is None:
            return {}
        W = self._embeddings(state)
        c = W.shape[0]
        _, idx = knn_classes(W, min(self.k, c - 1), self.metric)
        knn_alpha = pair_weight_gather(pw, idx)
        total = c * (c - 1)
        all_mean = (pw.values.double().sum() + (total - pw.nnz)) / max(1, total)  # absent pairs weigh 1
        return {
            "knn_pairs_alpha_below_0.9": float((knn_alpha < 0.9).double().mean()),
            "knn_pairs_mean_alpha": float(knn_alpha.double().mean()),
            "all_pairs_mean_alpha": float(all_mean),
        }

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        """Client side (it maps rows back to class ids with the secret's permutation)."""
        rows = super().predict_topk(state, x, k)
        return self._permutation(state["W"].shape[0])[1].to(rows.device)[rows]


class FedALCFixed(FedALC):
    """FedALC-fixed: class embeddings learned once on the server, then never trained or uploaded.

    Args (beyond FedAwS's): fixed_steps, fixed_lr: the one-off embedding training.
    """

    name = "FedALC-fixed"
    fixed_embeddings = True

    def __init__(self, *args, fixed_steps: int = 200, fixed_lr: float = 0.05, **kw) -> None:
        super().__init__(*args, **kw)
        self.fixed_steps, self.fixed_lr = int(fixed_steps), float(fixed_lr)

    def setup_from_reports(self, state: State, reports: list[Payload], seed: int) -> State:
        """FedALC's pair weights plus the class embeddings learned once from them."""
        out = super().setup_from_reports(state, reports, seed)
        out[FIXED_W] = learn_fixed_class_embeddings(
            PairWeights(out[PW_INDPTR], out[PW_INDICES], out[PW_VALUES]),
            self.dim,
            margin=self.margin,
            k=self.k,
            steps=self.fixed_steps,
            lr=self.fixed_lr,
            metric=self.metric,
            seed=derive_seed(seed, "fixed-embeddings"),
        )
        return out

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        new = super().aggregate(state, results, round)
        new["W"] = new[FIXED_W].clone() if FIXED_W in new else new["W"]
        return new


class FedAvgPositive(FedAwS):
    """The FedAwS and FedALC papers' "FedAvg" baseline: FedAwS's model, clients and positive loss with
    no server spreadout (``spread_steps = 0``): the class embeddings are only averaged, so with one
    label per client they collapse. Takes FedAwS's options; ``spread_steps`` must stay 0."""

    name = "FedAvg-positive"

    def __init__(self, *args, **kw) -> None:
        if kw.setdefault("spread_steps", 0) != 0:
            raise ValueError(f"FedAvg-positive takes no spreadout steps, got spread_steps={kw['spread_steps']}")
        super().__init__(*args, **kw)


class FedAvgFixed(FedAwS):
    """The FedALC paper's "FedAvg-fixed" baseline: class embeddings fixed at their random unit-norm
    initialisation (never trained, spread or uploaded; no label-set collection), the extractor
    trained and averaged as in FedAwS. FedALC-fixed with no embedding learning."""

    name = "FedAvg-fixed"
    fixed_embeddings = True
