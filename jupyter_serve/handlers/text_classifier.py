"""`TextClassifier`: the default handler for text classification models.

The model is an `EmbeddingBag`-style classifier called as `model(text, offsets)`
(the AG_NEWS example's contract), so a batch is one flat tensor of token
indices plus the start offset of each text: batching works. Text is tokenized
with `basic_english` plus bigrams (`ngrams = 2`) and mapped through the
vocabulary file in the model folder (`source_vocab.json`, else
`source_vocab.pt`; see `text.load_vocab`). The response per text is
`{label: probability}` over all classes. Explanations give per-token
IntegratedGradients importances: `{"words", "importances", "delta"}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers import text
from jupyter_serve.handlers.base import BaseHandler
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.utils import decode_text, explain_target, map_class_to_label, row_input

if TYPE_CHECKING:
    import torch

    from jupyter_serve.handlers.contract import HandlerContext


class TextClassifier(BaseHandler):
    """Class probabilities per text from an `EmbeddingBag` classifier."""

    #: Token n-grams added to the words (2: words and bigrams).
    ngrams = 2
    #: Vocabulary files looked up in the model folder, first found wins.
    vocab_files: tuple[str, ...] = ("source_vocab.json", "source_vocab.pt")

    def __init__(self) -> None:
        super().__init__()
        self.vocab: dict[str, int] = {}

    def initialize(self, context: HandlerContext) -> None:
        """Load the model and the vocabulary."""
        super().initialize(context)
        assert self.model_dir is not None
        self.vocab = text.load_vocab(self.model_dir, self.vocab_files)

    def tokenize(self, value: Any) -> list[str]:
        """The tokens (words, then n-grams) of one row's input."""
        try:
            words = text.basic_english(decode_text(value))
        except (TypeError, UnicodeDecodeError) as exc:
            raise PredictionException(f"Expected UTF-8 text: {exc}", 400) from exc
        return text.with_ngrams(words, self.ngrams)

    def token_ids(self, tokens: Sequence[str]) -> list[int]:
        unknown = self.vocab.get(text.UNKNOWN_TOKEN, 0)
        return [self.vocab.get(token, unknown) for token in tokens]

    def preprocess(self, data: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """`(text, offsets)`: all rows' token indices and where each row starts."""
        import torch

        rows = [self.token_ids(self.tokenize(row_input(row))) for row in data]
        offsets, start = [], 0
        for ids in rows:
            offsets.append(start)
            start += len(ids)
        flat = [index for ids in rows for index in ids]
        return torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        """`self.model(text, offsets)` on the handler's device, in inference mode."""
        import torch

        tokens, offsets = data
        with torch.inference_mode():
            return self.model(tokens.to(self.device), offsets.to(self.device), *args, **kwargs)

    def postprocess(self, data: Any) -> list[Any]:
        """Softmax over all classes, labelled per text."""
        import torch

        probabilities = torch.softmax(data, dim=1)
        return map_class_to_label(probabilities.tolist(), self.mapping)

    def explain_handle(self, data_preprocess: Any, raw_data: Sequence[Any]) -> list[Any]:
        """Per text: its tokens and their importances for the row's `target` class."""
        import torch

        explanations = []
        for row in raw_data:
            self.target = explain_target(row)
            tokens = self.tokenize(row_input(row))
            ids = torch.tensor(self.token_ids(tokens), dtype=torch.long, device=self.device)
            insight = self.get_insights(ids, tokens, self.target)
            explanations.append(insight[0])
        return explanations

    def get_insights(self, tensor_data: Any, raw_data: Any, target: int = 0) -> list[Any]:
        """`[{"words", "importances", "delta"}]` for one text's token indices."""
        if tensor_data.numel() == 0:
            return [{"words": [], "importances": [], "delta": 0.0}]
        importances, delta = text.token_attributions(self.model, tensor_data, target, self.ig_steps)
        return [{"words": list(raw_data), "importances": importances, "delta": delta}]
