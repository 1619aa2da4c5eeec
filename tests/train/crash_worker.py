"""The fault-injection test's worker: `formers train` killed with SIGKILL at a chosen point.

It imports torch and formers once, then reads one trial per line of stdin (JSON: run_dir,
ledger, point, at, mode, args), forks a child that arranges to kill itself at the `at`-th call
of the named point (point null: not at all) and runs `formers train ARGS`, and prints the
child's wait status. Runs that are compared are all made here, so that every number comes from
processes alike (the test process's own torch settings, changed by earlier tests, can move a
float32 result in its last bit). The fork
saves the trials a second of imports each; the parent never runs a torch operation, so its
children start with no thread pools to inherit.

The child appends the step of each checkpoint the trainer completes to `ledger` (fsynced), so
the test knows which checkpoints a crash must not lose, and its output to `ledger`.log.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from formers import cli
from formers.train import run_folder, trainer
from formers.train.checkpoint import store
from formers.train.checkpoint import write as checkpoint_write
from formers.train.metrics import MetricsLog

# the points a trial can die at: (module, function) of the call that is cut short
POINTS = {
    "step": (trainer, "take_step"),  # after the gradients, before or after the update
    "file": (checkpoint_write, "save_safetensors"),  # a checkpoint file, whole or torn
    "seal": (checkpoint_write, "replace_dir"),  # the manifest written, the rename not done
    "pointer": (store, "write_latest"),  # renamed into place, `latest` not yet moved
    "prune": (store, "prune"),  # the new checkpoint in place, older ones going
    "metrics": (MetricsLog, "log"),  # a metrics record, whole or torn
    "run file": (run_folder, "os"),  # config.json / tokenizer.json: see `die_in_run_file`
    "eval": (trainer, "evaluate_now"),
}


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_at_call(owner: Any, name: str, at: int, mode: str) -> None:
    """Replace owner.name by a wrapper that dies at its `at`-th call: before the call, after
    it, or after it with its output cut in half ("torn": the file it wrote, the line it
    appended)."""
    original = getattr(owner, name)
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == at and mode == "before":
            die()
        result = original(*args, **kwargs)
        if calls == at:
            if mode == "torn":
                tear(owner, args)
            die()
        return result

    setattr(owner, name, wrapper)


def tear(owner: Any, args: tuple) -> None:
    """Cut the output of the call just made in half, as a kill in the middle of writing."""
    if owner is MetricsLog:
        log = args[0]
        log.file.flush()
        size = log.path.stat().st_size
        last = log.path.read_bytes().rstrip(b"\n").rfind(b"\n") + 1
        os.truncate(log.path, last + (size - last) // 2)
    else:  # save_safetensors(tensors, path, metadata)
        path = args[1]
        os.truncate(path, os.path.getsize(path) // 2)


def die_in_run_file(at: int) -> None:
    """Die in the `at`-th atomic write of a run file, after its temporary file is written and
    before it replaces the old one."""
    original = run_folder.os.replace
    calls = 0

    class OsWithDeath:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def replace(src: Any, dst: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == at:
                die()
            original(src, dst)

    run_folder.os = OsWithDeath()


def keep_ledger(ledger: str) -> None:
    original = trainer.save

    def save_and_record(run: Any) -> None:
        original(run)
        with open(ledger, "a") as f:
            f.write(f"{run.state.step}\n")
            f.flush()
            os.fsync(f.fileno())

    trainer.save = save_and_record


def run_trial(trial: dict[str, Any]) -> None:
    keep_ledger(trial["ledger"])
    if trial["point"] is None:  # a run that is not killed (the reference, a recovery)
        pass
    elif trial["point"] == "run file":
        die_in_run_file(trial["at"])
    else:
        owner, name = POINTS[trial["point"]]
        die_at_call(owner, name, trial["at"], trial["mode"])
    os._exit(cli.main(["train", "--run-dir", trial["run_dir"], *trial["args"]]))


def main() -> None:
    for line in sys.stdin:
        trial = json.loads(line)
        pid = os.fork()
        if pid == 0:
            log = os.open(trial["ledger"] + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(log, 1)
            os.dup2(log, 2)
            try:
                run_trial(trial)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main()
