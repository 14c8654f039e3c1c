"""The default handlers with tiny models: classifier, segmenter, detector, text classifier."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from handler_fakes import FakeContext, eager_manifest, image_bytes, write_eager_model

from jupyter_serve.handlers import text
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.image_classifier import ImageClassifier
from jupyter_serve.handlers.image_segmenter import ImageSegmenter
from jupyter_serve.handlers.object_detector import ObjectDetector
from jupyter_serve.handlers.text_classifier import TextClassifier

RED, GREEN, BLUE, WHITE, BLACK = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255,) * 3, (0, 0, 0)


@pytest.fixture(autouse=True)
def _forget_model_module() -> Any:
    yield
    sys.modules.pop("model", None)


def _served(model_dir: Path, cls: type[Any], **context_args: Any) -> tuple[Any, FakeContext]:
    context = FakeContext(model_dir, **context_args)
    handler = cls()
    handler.initialize(context)
    return handler, context


@pytest.mark.parametrize(
    "module",
    ["image_classifier", "image_segmenter", "object_detector", "text_classifier", "vision", "base"],
)
def test_each_handler_module_defines_exactly_one_class(module: str) -> None:
    imported = importlib.import_module(f"jupyter_serve.handlers.{module}")
    own = [
        obj
        for obj in vars(imported).values()
        if inspect.isclass(obj) and obj.__module__ == imported.__name__
    ]
    assert len(own) == 1
    assert callable(own[0].handle)


# --- image classifier -------------------------------------------------------------------------

CLASSIFIER = """
import torch


class ColourNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))
"""


def _colour_weights(model: Any) -> None:
    model.conv.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
    model.conv.bias.zero_()
    model.fc.weight.copy_(torch.cat([torch.eye(3), torch.zeros(1, 3)]))
    model.fc.bias.zero_()


@pytest.fixture
def classifier_dir(tmp_path: Path) -> Path:
    mapping = {"0": "red", "1": "green", "2": "blue", "3": "none"}
    write_eager_model(tmp_path, CLASSIFIER, _colour_weights, mapping=mapping)
    return tmp_path


def test_image_classifier_returns_labelled_top_classes(classifier_dir: Path) -> None:
    handler, context = _served(classifier_dir, ImageClassifier)
    rows = [{"body": image_bytes([RED], size=(12, 10))}, {"data": image_bytes([GREEN])}]
    first, second = handler.handle(rows, context)
    assert max(first, key=first.get) == "red"
    assert max(second, key=second.get) == "green"
    assert set(first) == {"red", "green", "blue", "none"}  # top 5 of 4 classes: all
    assert sum(first.values()) == pytest.approx(1.0)
    assert list(first.values()) == sorted(first.values(), reverse=True)


def test_image_classifier_topk_is_adjustable(classifier_dir: Path) -> None:
    handler, context = _served(classifier_dir, ImageClassifier)
    handler.set_max_result_classes(2)
    [result] = handler.handle([{"body": image_bytes([BLUE])}], context)
    assert handler.get_max_result_classes() == 2
    assert list(result) == ["blue", "none"]


def test_image_classifier_crops_to_224(classifier_dir: Path) -> None:
    handler, _ = _served(classifier_dir, ImageClassifier)
    assert handler.preprocess([{"body": image_bytes([RED], size=(30, 20))}]).shape == (
        1, 3, 224, 224,
    )  # fmt: skip


# --- image segmenter --------------------------------------------------------------------------

SEGMENTER = """
import torch


class Segmenter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.classify = torch.nn.Conv2d(3, 2, 1)

    def forward(self, x):
        return {"out": self.classify(x)}
"""


def _red_is_class_one(model: Any) -> None:
    model.classify.weight.copy_(torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]).view(2, 3, 1, 1))
    model.classify.bias.zero_()


def test_image_segmenter_returns_top_class_and_probability_per_pixel(tmp_path: Path) -> None:
    write_eager_model(tmp_path, SEGMENTER, _red_is_class_one)
    handler, context = _served(tmp_path, ImageSegmenter)
    [mask] = handler.handle([{"body": image_bytes([RED, BLUE], size=(6, 4))}], context)
    assert (len(mask), len(mask[0]), len(mask[0][0])) == (4, 6, 2)
    assert [pixel[0] for pixel in mask[0]] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert all(0.5 < pixel[1] <= 1.0 for row in mask for pixel in row)


def test_image_segmenter_accepts_a_plain_tensor_output() -> None:
    scores = torch.tensor([[[[2.0]], [[0.0]]]])  # one image, two classes, 1x1 pixels
    [[[pixel]]] = ImageSegmenter().postprocess(scores)
    assert pixel[0] == 0.0
    assert pixel[1] == pytest.approx(torch.softmax(torch.tensor([2.0, 0.0]), 0)[0].item())


# --- object detector --------------------------------------------------------------------------

DETECTOR = """
import torch


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(1))

    def forward(self, images):
        found = []
        for image in images:
            score = image.mean() * self.gain
            found.append({
                "boxes": torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 5.0, 5.0]]),
                "labels": torch.tensor([1, 2]),
                "scores": torch.stack([score, score * 0.4]).flatten(),
            })
        return found
"""


def test_object_detector_keeps_detections_over_the_threshold(tmp_path: Path) -> None:
    write_eager_model(tmp_path, DETECTOR, mapping={"1": "person", "2": "bicycle"})
    handler, context = _served(tmp_path, ObjectDetector)
    rows = [{"body": image_bytes([WHITE])}, {"body": image_bytes([BLACK])}]
    white, black = handler.handle(rows, context)
    assert white == [{"person": [1.0, 2.0, 3.0, 4.0], "score": pytest.approx(1.0)}]
    assert black == []


def test_object_detector_labels_are_indices_without_a_mapping(tmp_path: Path) -> None:
    write_eager_model(tmp_path, DETECTOR)
    handler, context = _served(tmp_path, ObjectDetector)
    handler.threshold = 0.3
    [found] = handler.handle([{"body": image_bytes([WHITE])}], context)
    assert [next(iter(item)) for item in found] == ["1", "2"]


def test_object_detector_rejects_other_model_outputs() -> None:
    with pytest.raises(TypeError, match="boxes/labels/scores"):
        ObjectDetector().postprocess(torch.zeros(1, 4))


# --- text classifier --------------------------------------------------------------------------

TEXT = """
import torch


class TextNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(6, 2, mode="mean")
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))
"""
VOCAB = {"<unk>": 0, "good": 1, "bad": 2, "movie": 3, "good movie": 4, "bad movie": 5}


def _sentiment(model: Any) -> None:
    vectors = [[0, 0], [2, 0], [0, 2], [0, 0], [1, 0], [0, 1]]
    model.embedding.weight.copy_(torch.tensor(vectors, dtype=torch.float32))
    model.fc.weight.copy_(torch.eye(2))
    model.fc.bias.zero_()


@pytest.fixture
def text_dir(tmp_path: Path) -> Path:
    write_eager_model(tmp_path, TEXT, _sentiment, mapping={"0": "positive", "1": "negative"})
    (tmp_path / "source_vocab.json").write_text(json.dumps(VOCAB))
    return tmp_path


def test_basic_english_tokenizer() -> None:
    tokens = text.basic_english('A <b>Good</b> movie, "really": it\'s great!')
    assert tokens == ["a", "good", "movie", ",", "really", "it", "'", "s", "great", "!"]
    assert text.with_ngrams(["a", "b", "c"], 2) == ["a", "b", "c", "a b", "b c"]
    assert text.with_ngrams(["a", "b"], 1) == ["a", "b"]


def test_text_classifier_softmax_over_all_classes_per_text(text_dir: Path) -> None:
    handler, context = _served(text_dir, TextClassifier)
    rows = [{"data": "A good movie!"}, {"body": b"Bad movie."}, {"data": {"text": "bad"}}]
    good, bad, worse = handler.handle(rows, context)
    assert set(good) == {"positive", "negative"}
    assert good["positive"] > 0.5 > good["negative"]
    assert bad["negative"] > 0.5
    assert worse["negative"] > bad["negative"]
    assert sum(bad.values()) == pytest.approx(1.0)


def test_text_classifier_reads_a_token_list_from_source_vocab_pt(text_dir: Path) -> None:
    (text_dir / "source_vocab.json").unlink()
    tokens = sorted(VOCAB, key=VOCAB.__getitem__)
    torch.save(tokens, text_dir / "source_vocab.pt")
    handler, context = _served(text_dir, TextClassifier)
    assert handler.vocab == VOCAB
    [result] = handler.handle([{"data": "good"}], context)
    assert result["positive"] > 0.5


class _Opaque:
    """Stands in for a pickled torchtext Vocab object."""


def test_text_classifier_refuses_vocab_objects_it_cannot_load_safely(text_dir: Path) -> None:
    (text_dir / "source_vocab.json").unlink()
    torch.save(_Opaque(), text_dir / "source_vocab.pt")
    with pytest.raises(ValueError, match="get_stoi"):
        _served(text_dir, TextClassifier)


def test_text_classifier_needs_a_vocabulary(text_dir: Path) -> None:
    (text_dir / "source_vocab.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"source_vocab\.json, source_vocab\.pt"):
        _served(text_dir, TextClassifier)


def test_text_classifier_rejects_non_text_input(text_dir: Path) -> None:
    handler, context = _served(text_dir, TextClassifier)
    with pytest.raises(PredictionException) as info:
        handler.handle([{"body": b"\xff\xfe"}], context)
    assert info.value.error_code == 400


def test_text_explanations_attribute_the_prediction_to_tokens(text_dir: Path) -> None:
    handler, context = _served(text_dir, TextClassifier)
    context.set_header("explain", "True")
    [explanation, empty] = handler.handle([{"data": "good movie"}, {"data": ""}], context)
    assert explanation["words"] == ["good", "movie", "good movie"]
    good, movie, bigram = explanation["importances"]
    assert good > bigram > 0
    assert movie == pytest.approx(0.0)
    ids = torch.tensor([1, 3, 4])
    everything = handler.model(ids, torch.tensor([0]))[0, 0]
    nothing = handler.model.fc.bias[0]
    total = sum(explanation["importances"]) + explanation["delta"]
    assert total == pytest.approx((everything - nothing).item(), abs=1e-5)
    assert empty == {"words": [], "importances": [], "delta": 0.0}


EMBEDDING_MODEL = """
import torch


class SequenceNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(6, 2)
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text).mean(0, keepdim=True))
"""


def test_text_explanations_need_an_embedding_bag(tmp_path: Path) -> None:
    write_eager_model(tmp_path, EMBEDDING_MODEL)
    (tmp_path / "source_vocab.json").write_text(json.dumps(VOCAB))
    handler, context = _served(tmp_path, TextClassifier, manifest=eager_manifest())
    assert len(handler.handle([{"data": "good"}], context)) == 1
    context.set_header("explain", "True")
    with pytest.raises(NotImplementedError, match="EmbeddingBag"):
        handler.handle([{"data": "good"}], context)
