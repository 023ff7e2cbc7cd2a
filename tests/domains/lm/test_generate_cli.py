"""`titans-seq generate` on a tiny saved model."""

import pytest
import torch

from titans_seq.cli import main
from titans_seq.domains.lm import ByteTokenizer, TitansLM
from titans_seq.domains.lm.cli import TextStream


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = TitansLM.from_preset("tiny", mixer="mag", mixer_options={"window": 8, "chunk_size": 4})
    path = tmp_path_factory.mktemp("lm") / "model"
    model.save(path, tokenizer="byte")
    return model, path


def run(capsys, *argv):
    try:
        code = main(["generate", *map(str, argv)])
    except SystemExit as exit_:  # an option refused when the line is parsed
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_greedy_output(saved, capsys):
    model, path = saved
    code, out, _ = run(
        capsys, "--model", path, "--prompt", "To be", "--max-new-tokens", 12, "--temperature", 0
    )
    assert code == 0
    tok = ByteTokenizer()
    expected = model.generate(tok.encode("To be"), 12, temperature=0)[5:]
    assert out == "To be" + tok.decode(expected) + "\n"


def test_seeded_sampling(saved, capsys):
    model, path = saved
    args = ["--model", path, "--prompt", "Hi", "--max-new-tokens", 10, "--seed", 3]
    args += ["--top-k", 20, "--top-p", 0.9, "--temperature", 0.8, "--device", "cpu"]
    first, second = run(capsys, *args), run(capsys, *args)
    assert first == second and first[0] == 0
    gen = torch.Generator().manual_seed(3)
    ids = model.generate([72, 105], 10, temperature=0.8, top_k=20, top_p=0.9, generator=gen)
    assert first[1] == "Hi" + ByteTokenizer().decode(ids[2:]) + "\n"


def test_errors(saved, tmp_path, capsys):
    _, path = saved
    code, _, err = run(capsys, "--model", path, "--prompt", "x", "--top-p", 1.5)
    assert code == 2 and "argument --top-p: must be a number in (0, 1], got 1.5" in err
    for option, value in (("--temperature", -1), ("--top-k", 0), ("--max-new-tokens", -5)):
        code, _, err = run(capsys, "--model", path, "--prompt", "x", option, value)
        assert code == 2 and f"argument {option}: must be" in err
    code, _, err = run(capsys, "--model", tmp_path / "none", "--prompt", "x")
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "--model", path, "--prompt", "")
    assert code == 2 and "the prompt is empty" in err


class _Collect:
    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass


def test_text_stream_holds_back_cut_characters():
    sink = _Collect()
    stream = TextStream(ByteTokenizer(), sink)
    for byte in "né🚀".encode():
        stream.add(byte)
    stream.close()
    assert "".join(sink.parts) == "né🚀\n"
    assert "\ufffd" not in "".join(sink.parts)
    assert sink.parts[:2] == ["n", "é"]  # each character as soon as it is whole
