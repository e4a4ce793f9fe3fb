"""Shared fixtures: small datasets made by the tests themselves (the synthetic task)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus


def make_synth_dataset(root: Path, n_train: int = 1500, n_eval: int = 60, vocab_size: int = 600) -> Path:
    corpus = root / "corpus"
    write_corpus(SynthConfig(seed=3, n_train=n_train, n_valid=n_eval, n_test=n_eval), corpus)
    out = root / "data-bin"
    prepare(
        PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                      validpref=str(corpus / "valid"), testprefs=[str(corpus / "test")], vocab_size=vocab_size),
        out, progress=False, log=lambda *_: None,
    )
    return out


# Property tests pass, slower, on a busy machine: no example deadline and no health check that reads the
# machine's speed ("input generation is slow"), for every test (a test's own @settings adds to this).
settings.register_profile("structnmt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("structnmt")


def train_tiny(data: Path, save: Path) -> Path:
    """A Transformer trained for 2 updates on ``data`` into ``save``; its last checkpoint's path."""
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig

    train(Config(data=DataConfig(path=str(data), max_tokens=600),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(save), max_updates=2, validate_interval_updates=2, warmup_updates=1,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=2, max_len_b=3)), log=lambda *_: None)
    return save / "checkpoint_last.pt"


def decode_in_this_process(monkeypatch) -> list[int]:
    """translate's DecodePool replaced by one that decodes here with the checkpoint's own model: the sizes of the
    pools translate started (a test reads how many processes it would have used)."""
    import structnmt.decode.translate as translate

    started: list[int] = []

    class HerePool:
        def __init__(self, checkpoint, workers, threads=1, data_dir=None):
            started.append(workers)
            self.workers = workers
            self.model = translate.Translator(checkpoint, device="cpu").model

        def decode(self, batches, dcfg, max_positions):
            model = translate.model_for_dtype(self.model, dcfg.dtype)
            return [(k, translate.decode_batch(model, *translate.pad_sources(b), dcfg, max_positions))
                    for k, b in enumerate(batches)]

        def close(self):
            pass

    monkeypatch.setattr(translate, "DecodePool", HerePool)
    return started


def random_sources(seed: int = 0, n: int = 6, S: int = 9, vocab: int = 40, shortest: int = 3):
    """(src (n, S) ids from 4 to ``vocab``, mask (n, S) bool): n padded sources of random lengths shortest..S."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (n, S), generator=g)
    mask = torch.ones_like(src, dtype=torch.bool)
    for i in range(n):
        mask[i, int(torch.randint(shortest, S + 1, (1,), generator=g)) :] = False
    src[~mask] = 0
    return src, mask


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory) -> Path:
    """A prepared synthetic dataset (1500 train / 60 valid / 60 test pairs)."""
    return make_synth_dataset(tmp_path_factory.mktemp("synth"))


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``structnmt ARGS`` in this process (the console script's entry point); (exit status, stdout, stderr)."""
    from structnmt.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code: int, err: str, *fragments: str) -> None:
    """A user's error as the command line must give it: exit 2, no traceback, one ``structnmt: error:`` line
    holding every fragment."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("structnmt: error:")]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class CtrlCDuringTwoLaunches:
    """For the interrupt tests: a fake launcher whose "processes" run until stopped (or a minute, so that
    code which fails to stop them fails the test instead of hanging), and a Ctrl-C sent to this process
    once two of them run. Used as a context manager, it installs Python's own SIGINT handler meanwhile:
    a shell that starts a command in the background hands it SIGINT ignored, and pytest keeps that.

    ``launch(name, live)`` starts one such process, records ``name`` and keeps it in ``live`` until it ends;
    ``started`` and ``procs`` say what was launched."""

    def __init__(self):
        import threading

        self.started: list[str] = []
        self.procs: list = []
        self.both = threading.Event()

    def launch(self, name: str, live: set) -> int:
        import subprocess
        import sys

        proc = subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(300): time.sleep(0.2)"])
        self.procs.append(proc)
        live.add(proc)
        self.started.append(name)
        if len(self.started) == 2:
            self.both.set()
        try:
            return proc.wait()
        finally:
            live.discard(proc)

    def __enter__(self):
        import os
        import signal
        import threading

        self.old = signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=lambda: (self.both.wait(), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        import signal

        signal.signal(signal.SIGINT, self.old)


def pytest_configure(config):
    """Under pytest-xdist each worker process (and every process it starts) computes with one thread:
    the workers already use the cores, and more threads than cores make every one of them wait. The
    measurements ``STRUCTNMT_CPU_GEMM=auto`` caches (structnmt.machine.gemm_choice) go to a folder made for this
    test run, never the user's ~/.cache."""
    import os
    import tempfile

    os.environ["STRUCTNMT_CACHE_DIR"] = tempfile.mkdtemp(prefix="structnmt-test-cache-")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
