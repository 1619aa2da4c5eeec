"""Long-range probes, generated on the fly and seeded: multi-query associative recall (MQAR),
passkey retrieval and ListOps. A run trains on one when `train.probe` names it."""

from __future__ import annotations

from formers.data.probes.base import EVAL_SEED, IGNORE, Probe, ProbeConfig, Sample, seeded_random
from formers.data.probes.listops import ListOps, ListOpsConfig
from formers.data.probes.mqar import MQAR, MQARConfig
from formers.data.probes.passkey import Passkey, PasskeyConfig
from formers.errors import ConfigError

PROBES: dict[str, type[Probe]] = {"mqar": MQAR, "passkey": Passkey, "listops": ListOps}
PROBE_CONFIGS: dict[str, type[ProbeConfig]] = {
    "mqar": MQARConfig,
    "passkey": PasskeyConfig,
    "listops": ListOpsConfig,
}


def probe_config_class(path: str, kind: str) -> type[ProbeConfig]:
    """The options class of probe `kind` (an unknown one names the probes there are)."""
    if kind not in PROBE_CONFIGS:
        raise ConfigError(
            f"unknown task {kind!r} ({path}.kind): the probes are {', '.join(PROBE_CONFIGS)}"
        )
    return PROBE_CONFIGS[kind]


def make_probe(cfg: ProbeConfig) -> Probe:
    """The generator of the probe `cfg` describes."""
    probe_config_class("train.probe", cfg.kind)
    return PROBES[cfg.kind](cfg)


__all__ = [
    "EVAL_SEED",
    "IGNORE",
    "MQAR",
    "PROBES",
    "PROBE_CONFIGS",
    "ListOps",
    "ListOpsConfig",
    "MQARConfig",
    "Passkey",
    "PasskeyConfig",
    "Probe",
    "ProbeConfig",
    "Sample",
    "make_probe",
    "probe_config_class",
    "seeded_random",
]
