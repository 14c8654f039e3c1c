"""`TextHandler` (TorchServe's `ts.torch_handler.text_handler`): helpers and a real worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from worker_harness import WorkerProcess, request

from jupyter_serve.handlers.text_handler import TextHandler


@pytest.fixture
def handler() -> TextHandler:
    return TextHandler()


def test_text_clean_up_helpers(handler: TextHandler) -> None:
    assert handler._remove_html_tags("<b>great</b> film<br/>") == "great film"
    assert handler._remove_accented_characters("café naïve") == "cafe naive"
    assert handler._expand_contractions("Don't stop, it's fine; we can't, won't.") == (
        "Do not stop, it is fine; we cannot, will not."
    )
    assert handler._remove_puncutation("a, b! (c)") == "a b c"
    assert handler._tokenize("Hello, World") == ["hello", ",", "world"]
    assert handler.get_word_token(["a", "b"]) == ["a", "b"]


def test_summarize_attributions_gives_one_unit_vector_over_tokens(handler: TextHandler) -> None:
    attributions = torch.tensor([[[3.0, 1.0], [0.0, 0.0], [0.0, -3.0]]])
    summary = handler.summarize_attributions(attributions)
    assert summary.shape == (3,)
    assert torch.allclose(summary.norm(), torch.tensor(1.0))
    assert summary[0] > 0 > summary[2]


HANDLER = """
import torch
from ts.torch_handler.text_handler import TextHandler


class WordIds(TextHandler):
    def preprocess(self, data):
        texts = [self._remove_html_tags(bytes(row["body"]).decode()) for row in data]
        return [[self.source_vocab.get(tok, 0) for tok in self._tokenize(t)] for t in texts]

    def inference(self, data):
        return [self.model(torch.tensor(ids, dtype=torch.float32)).item() for ids in data]

    def postprocess(self, data):
        return data
"""


MODEL = """
import torch


class Total(torch.nn.Module):
    def forward(self, ids):
        return ids.sum()
"""


def test_a_torchserve_text_handler_serves_unchanged(tmp_path: Path) -> None:
    model = tmp_path / "words"
    (model / "MAR-INF").mkdir(parents=True)
    (model / "handler.py").write_text(HANDLER)
    (model / "source_vocab.json").write_text(json.dumps({"<unk>": 0, "good": 3, "film": 4}))
    (model / "model.py").write_text(MODEL)
    torch.save({}, model / "model.pt")  # the eager model's (empty) state dict
    manifest = {
        "modelName": "words", "serializedFile": "model.pt", "modelFile": "model.py",
        "handler": "handler.py",
    }  # fmt: skip
    (model / "MAR-INF" / "MANIFEST.json").write_text(
        json.dumps({"runtime": "python", "model": manifest})
    )
    with WorkerProcess() as worker:
        loaded = worker.load(model, "handler.py")
        assert loaded.header["status"] == 200, worker.output()
        assert worker.json_bodies(
            request("a", b"<p>good film</p>"), request("b", b"unknown good")
        ) == [7.0, 3.0]
