"""The synthetic corpus and the generalization benchmark are written as they are generated: the same bytes as
when they were built whole in memory, memory that does not grow with the corpus (but for 12 bytes of keys per
sentence), and no partial file under a corpus name when a run is interrupted."""

from __future__ import annotations

import hashlib
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from conftest import assert_user_error, cli

from structnmt.data import generalization
from structnmt.data.generalization import BenchmarkConfig, write_benchmark
from structnmt.data.synthetic import SeenSentences, SynthConfig, write_corpus
from structnmt.data.synthetic import writing as writing_mod

#: SHA-256 of every file of ``write_corpus(SynthConfig(seed=3, n_train=300, n_valid=20, n_test=20, max_len=3))``,
#: recorded from the generator that built the corpus whole in memory (3-word sentences: repeats are re-drawn)
PLAIN = {
    ".structnmt-written.json": "b7a8d3137213b9a15b25f7e2e2260e0684aa2d0fc62c5c10a5354af77d78f3f8",
    "synth.json": "4a317d2615cb658ad50de0dff5959ceadb20c514cd1b2f073b2808d7faf8c372",
    "test.agreement.jsonl": "744fae7228bc4e8d77340d8d4dad21e63b9db25e7447811e405501924e522a44",
    "test.src": "a4fd3db945305cd4e0deccc568a5858a65f768689c45805f25edc164a2acfcca",
    "test.src.conllu": "9242ec734414bcb3dc3c31a2165ead67ac89a4b56a9da9bfcd3f0306d5eb0270",
    "test.src.tree": "402daee3a3677588c75f676ec3b1a0e9c9130adfa95ba27bcad5b4f012d09ecc",
    "test.tgt": "2417cfc61138056c8256bf0149b4136e9dd6ffe10cbf873c382be6d50cc9d102",
    "train.agreement.jsonl": "a7a5023fe4ab4c5698ceebf54139b6e63d1ecac09103462f5c3bc0db29e5793e",
    "train.src": "3cfa08f54fa03d13dd44955bcb86b3275e8c841bf65beb34bcd5a174249f6c48",
    "train.src.conllu": "5b0ab47ec2e44ecbf32746988e1544eb01f8ed50ac7198424b6171b3f86210c4",
    "train.src.tree": "4038801841eb0dc0bbfb14d765cb687b0af85a85319b6f80754b65d8fb6c524a",
    "train.tgt": "5cbc8c68afbe2c207cf9dde0d27bed642129237f35e20c5129e3d0c452d3933f",
    "valid.agreement.jsonl": "744fae7228bc4e8d77340d8d4dad21e63b9db25e7447811e405501924e522a44",
    "valid.src": "9aee81accb2abcc541096d1678ab837ac3ee90728dbb2d9be98ea8b7ba5da9cb",
    "valid.src.conllu": "5662df34b1800537043d089c0a3c7f920bb9676542c397ec4da94bb2498c6dd2",
    "valid.src.tree": "77a45ef1842b81e87a2551ab118d6c759a39eea39c0247c825bdd40e2f2fd339",
    "valid.tgt": "99d23d33f0caf2928e19bdccac2a66ae83082e5550ffd6524c2bbd33ce86d723",
}

#: SHA-256 of every file of ``structnmt synth --generalization --seed 1 --n-train 200 --n-valid 20 --n-test 20
#: --n-gen 20``, recorded as :data:`PLAIN`
BENCHMARK = {
    ".structnmt-written.json": "7fd6792aae93b51a97bb7f2ef1a6a1e9d068173970d9ac7bd32f84e21ef0351a",
    "attraction2.agreement.jsonl": "e7f3002322154a459f66227dfc34ae66b98fe32931a93e62d0fd5f203d09edf2",
    "attraction2.props.jsonl": "1014aaae83baa736b39577636ed1777c37e9946441649e7f2c417604d3b7583f",
    "attraction2.src": "bf3fad83d1533f1aaa4501097f3f2492e007d9fa87a65abd57af1b79599e1b78",
    "attraction2.src.conllu": "8be6cf3b303b7cdc67d5dd245b3c1bd0f353235dcede05c417d4e47809eb9ef1",
    "attraction2.src.tree": "d716c63ddc9fb0d89f5a2b38628e19ee79dc832e0d9cc235bc36620200931c62",
    "attraction2.tgt": "69364bedecd7940054044e98adef0acd45a7be1f4829871fe9daf5697922a70a",
    "attraction3.agreement.jsonl": "fdffdb149b3832ee33b2b55367c106789be9735064cdc14ffffe9a6744a8504c",
    "attraction3.props.jsonl": "cc86a7af704499983ca8d54adb99005556cd5a67f70477a17953c51d0881b9be",
    "attraction3.src": "5eb606cc90fb29236f04ee04fc1e713dbad18f227144ed75080e55987aa877b2",
    "attraction3.src.conllu": "f608f29f9b4dceeb6d2e8c5bcbc0e26bcf60457000aac082a8fd6b5ab273d193",
    "attraction3.src.tree": "16e256b3f6c7562b97f6571e17ef865dcd19f1093abc2cd7fafda382d2b81401",
    "attraction3.tgt": "e026fb26d71d93ebfa321bd5dc13cbf1812c84a4f87045de35adc95411da23b7",
    "attraction4.agreement.jsonl": "cfa588610a952a39839aaad711003ad3896e9d210e134c81525e8bae4ff7777d",
    "attraction4.props.jsonl": "089126947a61807673d967ff7cae81cc95d2284055a0ca3f64cd5853e256e94c",
    "attraction4.src": "1b25470c02757342826b54af954cd29f511368d751009ee283d1c0c6520a2dfe",
    "attraction4.src.conllu": "35fbbb0ccc5714f42f062d80f984c49b2fd4478838d24794aa473d0a8f26e558",
    "attraction4.src.tree": "1d2f6ff967c71a78ff429683688cd19786c5554a10070d94bb0e9ec14b811d9c",
    "attraction4.tgt": "1d0c267402ea3edd13dff66faf1136285e39448a74eee2f3698becbee29b1f5a",
    "benchmark.json": "7dbd0e14b05c039a9464968f868c15b0456fcd925e213a6fec885301c66d7183",
    "depth2.agreement.jsonl": "63c8a4fd5fe480501ea6cba174474c9fb36b51817355930c8b98f8c86dd36845",
    "depth2.props.jsonl": "96cd909e12813d1aa077ebec31cf2866087f505741a126391af3126043758738",
    "depth2.src": "ccffc476ebbf30bd37c1fbc679d664921123f8ad2a2e61908a246c8de304b953",
    "depth2.src.conllu": "afc2425dd74159fbeeb487978e8ee9d1366e63219955717a12c56a490b20d8b3",
    "depth2.src.tree": "c2c9c3e496b0386470f26ec12792b7acb342f7bb40ba0c21a11613d8f011f36a",
    "depth2.tgt": "f89ab921e6f6f3fdd9bee4af778923983f8d1342a3d6394cd9e4beeeb64bfb62",
    "depth3.agreement.jsonl": "23ca13e2ef4a4306af461edbc95899f94fcc227f8956a98267af44b635d446d8",
    "depth3.props.jsonl": "9f18ed9abfbe6092509d0a43f57dd4fa27939bdd716000bea5a72b578049b60d",
    "depth3.src": "b1bf4e2b06cdfae5a475ad342aa7152445cb4c542fbdaf0ce94f6efc75cf36f9",
    "depth3.src.conllu": "b36127a283f38eb05a7577078663014e64d241221513ce084746ddb3a39a4b1f",
    "depth3.src.tree": "3e800b2439ca2f3eef74b303003d82308ff1d213dada8119f4baeb2f70ff4127",
    "depth3.tgt": "b9885ea7ca6175d9e61ef577ad4319fa44c863d1e323a8fa54bab6290b652554",
    "length.agreement.jsonl": "0557ffbe9dd673ba61a87b08d38a32a278a07b39451986d4c90845fd02d9ac53",
    "length.props.jsonl": "29f05bb2d18f58b3dc58f3a549a1248716889ffe97550b019a3938cc890558cf",
    "length.src": "74452bba451bccfc82644692aefc99c12d6d41200be2f026a5a41dad3f760032",
    "length.src.conllu": "6a85a4c5fcb086dee3f7c81105350675f8697baa7c22099cfaa60fb7201534e9",
    "length.src.tree": "a225d2f5270c1d7ca286900c2887bad57abf8213d07d440883b7d128dc164116",
    "length.tgt": "531b3fdb178c18bfe74b90bcfdef024ef3ff7e818fb3f64b19c1e2e66377f48d",
    "recombination.agreement.jsonl": "01d9649fe5d786b47d42ebb5674df4ced51d345880de098714e337c76fd27c65",
    "recombination.props.jsonl": "3ebc504d475f774d3032ffd9a9554c90451dc903c02a88c59785105cf47c15af",
    "recombination.src": "179f0effdc022b8aa6fdb7a332e39d1a7ed229cf82fdb2e897bd97616c91e9e7",
    "recombination.src.conllu": "fbdc80ceaa5410e0104273eb2f66ab3069a296e084afffb87e238653bcb44fd8",
    "recombination.src.tree": "f923c3f23a73c1b7231936497da859706d75a32c7c22d6cf0ae71e2deb334b94",
    "recombination.tgt": "64341fa01ee8bc78ad3da922bf93cab43b462bf8c8fd2669e08c3f767891e9e6",
    "test.agreement.jsonl": "26330ff87d544b4e97feed3e0002a7f044c21cecc11b970f574b6363b290b46a",
    "test.props.jsonl": "530f5899d79b3cc637376cdb4b8c92061ee662829433ccb309921fafa8c59f23",
    "test.src": "ab2c63879adbdffd867f89cd99e50ebe3f700e499b9feafe27ddea5c4da10748",
    "test.src.conllu": "beb80332a99b7b5e9433f4f9e9caccc67f6e3871e05d8a9a53c234a0f2a86909",
    "test.src.tree": "d14fdcd840c47bc16da7f4a9763542e85e9d6dad278bf86a08077b19dac4bc41",
    "test.tgt": "ff0deea73f67d5f0d315b62bc1844d774f96e458cb94586d4b1e5dffdd8435c2",
    "train.agreement.jsonl": "3e8143b618a2383124ce6ecaef89fab4197d18640443621ee83d86cec7dcb2e8",
    "train.props.jsonl": "b8729446d613f6785a308878065edd632bd3622e0fdc6024622cd66a654277a4",
    "train.src": "1fa807e22d45c3da97e1435bc5d4329870d7464aad95d9bb4e560a61d91f7031",
    "train.src.conllu": "62c6c809bc1f71d3683a3a8b825b8d17842ad8867fe615916995e289db5bac13",
    "train.src.tree": "482e84dbce183adf0e34b081ac71796a1580efc60b81f12cd0911f830e751c86",
    "train.tgt": "1c951440e567bea8b7c3824612012896ccaedb5e1f7ab10cc1cdb9c499ece764",
    "valid.agreement.jsonl": "a4909e5349ec177bc70e5ce44a368db33018fd46552b5c1b32fd893c0f8ce352",
    "valid.props.jsonl": "9bec12180bce76f17ce25be0bbe020ae9178fc9b695cf1dd36bbbec824e8c724",
    "valid.src": "d165432ddb12aaabe631edc6184803fec2c499b31b7fe7733a327489ea9d1eca",
    "valid.src.conllu": "dedae4d509efc8265065b0d22c38c1de1648473d33cbb3593d0988172390f808",
    "valid.src.tree": "3d3522a7f3b1b1289937bbb85eb7a24ae0ad8f0ce442b83be59e201651ae2395",
    "valid.tgt": "13eafce12e7cd943f2721c9d2baf0ab1c122b0651400d00b51826f814a6c2843",
}


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_the_corpus_has_the_recorded_bytes(tmp_path):
    assert write_corpus(SynthConfig(seed=3, n_train=300, n_valid=20, n_test=20, max_len=3), tmp_path) == {
        "train": 300, "valid": 20, "test": 20}
    assert _digests(tmp_path) == PLAIN


def test_the_benchmark_has_the_recorded_bytes(tmp_path, capsys):
    code, out, _ = cli(capsys, "synth", "--generalization", "--seed", "1", "--n-train", "200", "--n-valid", "20",
                       "--n-test", "20", "--n-gen", "20", "--out", tmp_path, "--no-progress")
    assert code == 0 and "recombination:     20 sentences" in out
    assert _digests(tmp_path) == BENCHMARK


def _peak_and_keys(write, n: int) -> tuple[int, int]:
    """The tracemalloc peak of ``write(n, directory)`` and the bytes of its table of sentence keys."""
    with tempfile.TemporaryDirectory() as d:
        tracemalloc.start()
        try:
            total = write(n, Path(d) / "out")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak, SeenSentences(total).nbytes


def _plain(n: int, out: Path) -> int:
    return sum(write_corpus(SynthConfig(seed=1, n_train=n, n_valid=10, n_test=10), out).values())


def _benchmark(n: int, out: Path) -> int:
    meta = write_benchmark(BenchmarkConfig(seed=1, n_train=n, n_valid=10, n_test=10, n_gen=5), out)
    return sum(s["sentences"] for s in meta["splits"].values())


@pytest.mark.parametrize("write,n", [(_plain, 200), (_benchmark, 200)])
def test_memory_does_not_grow_with_the_corpus(write, n):
    _peak_and_keys(write, 20)  # first-use costs (caches, lazy imports) out of the measure
    small, small_keys = _peak_and_keys(write, n)
    large, large_keys = _peak_and_keys(write, 10 * n)
    # the table of sentence keys is the only memory that grows with the corpus: 12 bytes per sentence;
    # the rest stays level (a corpus held in memory would add about 5.4 KB per pair)
    assert large_keys - small_keys <= 12.1 * 9 * n
    assert large - large_keys <= 1.2 * (small - small_keys), (small, large)


def test_sentence_keys():
    seen = SeenSentences(3)
    for s in ("the dog sleeps", "the dogs sleep", "the dog sleeps"):
        seen.add(s)
    assert len(seen) == 2 and "the dog sleeps" in seen and "the dogs sleep" in seen and "a dog sleeps" not in seen
    assert seen.nbytes == 8 * (int(3 * 1.5) + 1)
    seen.add("a dog sleeps")
    with pytest.raises(RuntimeError, match="sized for 3 sentences"):
        seen.add("a cat sleeps")


class _Interrupt(KeyboardInterrupt):
    pass


def _interrupt_after(monkeypatch, module, k: int) -> None:
    """``module.write_example`` raises an interrupt at every ``k``-th call."""
    real, calls = module.write_example, []

    def write_example(*args):
        calls.append(1)
        if len(calls) % k == 0:
            raise _Interrupt
        real(*args)

    monkeypatch.setattr(module, "write_example", write_example)


@pytest.mark.parametrize("kind", ["corpus", "benchmark"])
def test_an_interrupted_run_leaves_no_partial_file(tmp_path, monkeypatch, kind):
    def write(out):
        if kind == "benchmark":
            write_benchmark(BenchmarkConfig(seed=2, n_train=40, n_valid=4, n_test=4, n_gen=3), out)
        else:
            write_corpus(SynthConfig(seed=2, n_train=40, n_valid=4, n_test=4), out)

    write(tmp_path / "done")
    before = _digests(tmp_path / "done")
    _interrupt_after(monkeypatch, generalization if kind == "benchmark" else writing_mod, 30)
    for out in (tmp_path / "done", tmp_path / "new"):
        with pytest.raises(_Interrupt):
            write(out)
    assert _digests(tmp_path / "done") == before  # the earlier corpus, whole; no temporary file beside it
    assert not (tmp_path / "new").exists()


def test_progress_bar_unless_asked_not_to(tmp_path, capsys):
    code, _, err = cli(capsys, "synth", "--out", tmp_path / "a", "--n-train", "30", "--n-valid", "2", "--n-test", "2")
    assert code == 0 and "synth: 100%" in err and "34/34" in err and "pairs" in err
    code, _, err = cli(capsys, "synth", "--out", tmp_path / "b", "--n-train", "30", "--n-valid", "2", "--n-test", "2",
                       "--no-progress")
    assert code == 0 and err == ""
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")


def test_a_split_that_cannot_be_drawn_is_one_sentence_and_writes_nothing(tmp_path, capsys):
    # a relative clause inside the subject takes more than 3 words: no recombination sentence exists
    code, _, err = cli(capsys, "synth", "--generalization", "--out", tmp_path / "g", "--n-gen", "1",
                       "--train-max-len", "3", "--no-progress")
    assert_user_error(code, err, "could not draw 1 different recombination sentences", "--n-gen", "--train-max-len")
    assert not (tmp_path / "g").exists()
