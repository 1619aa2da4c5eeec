"""What every reading of a probe shares: the generator is the task's data, the probe decides
the vocabulary (and the padding id), and its options are saved beside the checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

from formers.data.probes import Probe, make_probe
from formers.errors import FormersError
from formers.train.config import RunConfig, with_data_fields
from formers.train.run_folder import write_text_atomically
from formers.train.tasks.base import Task


class ProbeTask(Task):
    """What the causal and the classification reading of a probe share: the generator (its
    data), the vocabulary it decides, and its options saved beside the checkpoints."""

    data: Probe

    def load_data(self) -> Probe:
        return make_probe(self.cfg.train.probe)

    @property
    def probe(self) -> Probe:
        """The run's own generator (a generator handed in for another run's options is not)."""
        if isinstance(self.data, Probe) and self.data.cfg == self.cfg.train.probe:
            return self.data
        return make_probe(self.cfg.train.probe)

    def model_config(self, cfg: RunConfig) -> RunConfig:
        probe = make_probe(cfg.train.probe)
        fields = {"vocab_size": probe.vocab_size}
        if probe.pad_id is not None:
            fields["pad_id"] = probe.pad_id
        return with_data_fields(cfg, fields, f"the {cfg.train.probe.kind} probe")

    def save_files(self, run_dir: Path) -> None:
        probe = self.cfg.to_dict()["train"]["probe"]
        write_text_atomically(run_dir / "probe.json", json.dumps(probe, indent=2) + "\n")

    def check_eval_options(self, seq_len: int | None, context_len: int) -> None:
        """A probe's held-out sequences have the lengths its options say: refuse others."""
        trained = self.cfg.train.seq_len
        if (seq_len is not None and seq_len != trained) or context_len:
            raise FormersError(
                f"a {self.cfg.train.probe.kind} probe scores its own held-out sequences (at "
                f"train.seq_len {trained}): leave seq_len and context_len out (passkey: "
                "train.probe.eval_lengths lists other lengths)"
            )
