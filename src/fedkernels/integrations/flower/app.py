"""The ServerApp side of a Flower App: :func:`server_app` and the run settings from Flower's
``run_config`` (``[tool.flwr.app.config]`` of the app's pyproject.toml, overridden by
``flwr run --run-config``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from ...experiments.configuration import ExperimentConfig, parse_toml
from ...fl.privacy_settings import check_dp_sgd
from ...fl.server import RunConfig
from ...fl.strategy import State, Strategy
from ...fl.types import RoundRecord, TrainConfig
from .server import DEFAULT_STARTUP_GRACE, FlowerStrategy

# The run_config keys the fedkernels apps read (declare each in [tool.flwr.app.config]: Flower
# refuses an override of a key the app does not declare).
RUN_CONFIG_KEYS = (
    "rounds",
    "clients-per-round",
    "seed",
    "timeout",
    "checkpoint",
    "max-upload-bytes",
    "eval-every",
    "eval-k",
    "eval-clients",
    "epochs",
    "batch-size",
    "lr",
    "optimizer",
    "weight-decay",
    "autocast",
    "device",
    "dp-sample-clip",
    "dp-sample-noise",
)
FLOWER_KEYS = ("num-clients", "federated-eval", "startup-grace", "partition-keys", "max-in-flight")
# with any of these set (the privacy extra), flower_strategy_from makes a PrivateFlowerStrategy
PRIVACY_KEYS = (
    "secagg",
    "secagg-dropouts",
    "secagg-bits",
    "secagg-bound",
    "secagg-degree",
    "secagg-corrupt-fraction",
    "secagg-dropout-fraction",
    "secagg-weight-cap",
    "l1diff-segments",
    "dp-clip",
    "dp-noise",
    "target-epsilon",
    "dp-delta",
    "dp-mechanism",
    "dp-seeded",
)
# keys of a mechanism that was removed (server-side DP of the class embeddings: it noised only the rows some
# chosen client touched, so it was no DP mechanism); a run config that sets one is refused, never ignored
REMOVED_PRIVACY_KEYS = ("embedding-dp-clip", "embedding-dp-noise")


# run-config keys whose declared default (this value) means "unset"
_UNSET_VALUE = {
    "secagg-dropouts": -1,
    "secagg-degree": 0,
    "dp-clip": 0,
    "dp-noise": 0,
    "target-epsilon": 0,
    "dp-sample-clip": 0,
}


def flower_spelling(setting: str) -> str:
    """A privacy setting's run-config key (``dp_clip`` -> ``dp-clip``)."""
    return setting.replace("_", "-")


def run_config_settings(context: Context, names: Iterable[str]) -> dict[str, object]:
    """The settings ``names`` present in ``run_config``, by their setting names; a key at its
    "unset" value becomes None. Integer settings given as whole floats (TOML ``3.0``) become ints."""
    out: dict[str, object] = {}
    for name in names:
        key = flower_spelling(name)
        if key not in context.run_config:
            continue
        value: object = context.run_config[key]
        if key in _UNSET_VALUE and type(value) in (int, float) and value == _UNSET_VALUE[key]:
            value = None
        elif name in _INT_SETTINGS and isinstance(value, float) and value.is_integer():
            value = int(value)
        out[name] = value
    return out


_INT_SETTINGS = ("secagg_dropouts", "secagg_bits", "secagg_degree", "l1diff_segments")


def run_config_from(context: Context, **defaults: object) -> RunConfig:
    """A :class:`RunConfig` from Flower's ``run_config``. Keys (each optional, else ``defaults`` by
    field name, else RunConfig's default): ``rounds``, ``clients-per-round``, ``seed``,
    ``timeout`` (seconds per message; 0 waits up to an hour), ``checkpoint`` ("" for none),
    ``max-upload-bytes`` (0 for no extra bound), ``eval-every``, ``eval-k`` (e.g. "1,3,5"),
    ``eval-clients`` (clients per federated evaluation; 0 for all), ``epochs``, ``batch-size``,
    ``lr``, ``optimizer``, ``weight-decay``, ``autocast`` ("off" or "bf16"), ``device`` (the server's;
    each node takes its own from its node config, see :func:`~fedkernels.integrations.flower.client.node_device`),
    ``dp-sample-clip`` (DP-SGD's per-example clip; 0: no DP-SGD) and ``dp-sample-noise``."""
    c = context.run_config
    base = _loop_defaults(defaults)
    t: TrainConfig = base["train"]

    def get(key: str, default: object) -> object:
        return c.get(key, default)

    timeout = float(get("timeout", base["client_timeout"] or 0))  # type: ignore[arg-type]
    max_up = int(get("max-upload-bytes", base["max_upload_bytes"] or 0))  # type: ignore[call-overload]
    eval_clients = int(get("eval-clients", base["eval_clients"] or 0))  # type: ignore[call-overload]
    ks = get("eval-k", ",".join(str(k) for k in base["eval_k"]))
    dp_sgd = {"dp_sample_clip": t.dp_sample_clip, "dp_sample_noise": t.dp_sample_noise, "dp_seeded": False}
    dp_sgd.update(run_config_settings(context, dp_sgd))  # type: ignore[arg-type]
    check_dp_sgd(dp_sgd["dp_sample_clip"], dp_sgd["dp_sample_noise"], flower_spelling)
    if not isinstance(dp_sgd["dp_seeded"], bool):
        raise ValueError(f"dp-seeded must be true or false, got {dp_sgd['dp_seeded']!r}")
    # the run's description first (as the CLI's), then its RunConfig from the one place that builds one;
    # what run_config never read from ``defaults`` keeps RunConfig's defaults
    loop = _loop_defaults({})
    cfg = ExperimentConfig(
        rounds=int(get("rounds", base["rounds"])),
        clients_per_round=int(get("clients-per-round", base["clients_per_round"])),
        seed=int(get("seed", base["seed"])),
        eval_every=int(get("eval-every", base["eval_every"])),
        ks=[int(k) for k in str(ks).split(",") if k.strip()],
        device=str(get("device", base["device"])),
        client_weighting=loop["client_weighting"],
        batch_clients=loop["batch_clients"],
        dp_delta=loop["sample_delta"],
        local_epochs=int(get("epochs", t.epochs)),
        batch_size=int(get("batch-size", t.batch_size)),
        lr=float(get("lr", t.lr)),
        optimizer=str(get("optimizer", t.optimizer)),
        autocast=str(get("autocast", t.autocast)),
        dp_sample_clip=None if dp_sgd["dp_sample_clip"] is None else float(dp_sgd["dp_sample_clip"]),
        dp_sample_noise=float(dp_sgd["dp_sample_noise"]),
        dp_seeded=bool(dp_sgd["dp_seeded"]) and dp_sgd["dp_sample_clip"] is not None,
    )
    return cfg.run_config(
        client_timeout=timeout or None,
        checkpoint=str(get("checkpoint", base["checkpoint"] or "")) or None,
        max_upload_bytes=max_up or None,
        eval_clients=eval_clients or None,
        weight_decay=float(get("weight-decay", t.weight_decay)),
    )


def _loop_defaults(defaults: dict[str, object]) -> dict[str, Any]:
    """RunConfig's field defaults, by field name, under ``defaults`` (without building a RunConfig).

    Raises:
        TypeError: a name in ``defaults`` that is no RunConfig field.
    """
    out: dict[str, Any] = {
        f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[operator]
        for f in dataclasses.fields(RunConfig)
    }
    unknown = sorted(set(defaults) - set(out))
    if unknown:
        raise TypeError(f"run_config_from: RunConfig has no field(s) {unknown}")
    return {**out, **defaults}


def read_partition_keys(path: str | Path) -> dict[int, bytes]:
    """Client -> registered public key, from a TOML file of ``<client id> = "<OpenSSH public key>"``
    lines (the keys given to ``flwr supernode register``), as the PEM bytes Flower stores.

    Raises:
        ValueError: a client id that is not an int >= 0, or a key that is not an EC public key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = {}
    for cid, text in parse_toml(Path(path).read_text()).items():
        if not cid.isdigit() or not isinstance(text, str):
            raise ValueError(f'{path}: entries must be <client id> = "<public key>", got {cid!r}')
        key = serialization.load_ssh_public_key(text.encode())
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError(f"{path}: the key of client {cid} is not an EC public key")
        pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        out[int(cid)] = pem
    return out


def flower_strategy_from(
    context: Context,
    strategy: Strategy,
    num_features: int,
    num_classes: int,
    num_clients: int | None = None,
    **defaults: object,
) -> FlowerStrategy:
    """A :class:`FlowerStrategy` with everything from ``run_config``: the :func:`run_config_from`
    keys plus ``num-clients`` (unless given), ``federated-eval`` (bool), ``startup-grace``
    (seconds), ``partition-keys`` (a :func:`read_partition_keys` file; "" for none) and
    ``max-in-flight`` (messages out at once; 0 for all). With secure aggregation or DP asked for
    (:data:`PRIVACY_KEYS`, see :func:`~.private_server.privacy_config_from`), a
    :class:`~.private_server.PrivateFlowerStrategy` (needs the extra ``fedkernels[privacy]``)."""
    c = context.run_config
    n = int(c["num-clients"]) if num_clients is None else num_clients
    keys_file = str(c.get("partition-keys", ""))
    flower: dict[str, Any] = dict(
        federated_evaluation=bool(c.get("federated-eval", False)),
        startup_grace=float(c.get("startup-grace", DEFAULT_STARTUP_GRACE)),
        partition_keys=read_partition_keys(keys_file) if keys_file else None,
        max_in_flight=int(c.get("max-in-flight", 0)) or None,
    )
    config = run_config_from(context, **defaults)
    if any(k in c for k in PRIVACY_KEYS + REMOVED_PRIVACY_KEYS):
        from .private_server import PrivateFlowerStrategy, privacy_config_from

        privacy = privacy_config_from(context)
        if privacy is not None:
            return PrivateFlowerStrategy(strategy, num_features, num_classes, n, config, privacy, **flower)
    return FlowerStrategy(strategy, num_features, num_classes, n, config, **flower)


EvaluateFn = Callable[[int, Strategy, State, Context], Mapping[str, float]]


def server_app(
    make_strategy: Callable[[Context], FlowerStrategy],
    evaluate_fn: EvaluateFn | None = None,
    on_done: Callable[[Context, FlowerStrategy], None] | None = None,
    on_round: Callable[[Context, FlowerStrategy, RoundRecord], None] | None = None,
) -> ServerApp:
    """A Flower ServerApp running ``make_strategy(context)`` for ``config.rounds`` rounds, resuming
    from ``config.checkpoint`` when it exists (a ServerApp killed mid-run and started again goes on
    from its last completed round, to the same final state).

    Args:
        make_strategy: builds the FlowerStrategy (e.g. :func:`flower_strategy_from`).
        evaluate_fn: optional centralised evaluation on the server's own data,
            ``(server_round, strategy, state, context) -> {metric: value}``, run before round 1
            (``server_round`` 0) and after every ``config.eval_every`` rounds; its metrics also land
            in ``history[-1].metrics``.
        on_done: optional ``(context, flower_strategy)`` called after the last round.
        on_round: optional ``(context, flower_strategy, record)`` called after each round (after
            its checkpoint is written).

    Example::

        app = server_app(
            lambda ctx: FlowerStrategy(FedAvg(hidden=(256,)), F, p, num_clients=10, config=run_config_from(ctx)),
            evaluate_fn=lambda rnd, strategy, state, ctx: my_test_metrics(strategy, state),
        )
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        fk = make_strategy(context)

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            assert evaluate_fn is not None
            metrics = {k: float(v) for k, v in evaluate_fn(server_round, fk.strategy, fk.state, context).items()}
            if server_round > 0 and fk.history:
                fk.history[-1].metrics.update(metrics)
            return MetricRecord(dict(metrics.items()))

        fk.start(
            grid,
            evaluate_fn=central if evaluate_fn is not None else None,
            on_round=(lambda rec: on_round(context, fk, rec)) if on_round is not None else None,
        )
        if on_done is not None:
            on_done(context, fk)

    return app
