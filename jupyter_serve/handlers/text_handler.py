"""`TextHandler`: TorchServe's base class for text models (`ts.torch_handler.text_handler`).

Handlers written for TorchServe subclass it to get a vocabulary and the text
clean-up helpers its subclasses call: `_remove_html_tags`, `_remove_accented_characters`,
`_expand_contractions`, `_remove_puncutation` (TorchServe's spelling) and `_tokenize`,
plus `get_word_token` and `summarize_attributions` for explanations.

The vocabulary is the manifest's `sourceVocab` file, else `source_vocab.json` or
`source_vocab.pt` in the model folder, read by `text.load_vocab` into a
`{token: index}` dict (torchtext is not a dependency; a pickled torchtext `Vocab`
is refused with a hint). A model folder without one loads with an empty vocabulary,
so handlers that tokenize with their own tokenizer still load.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers import text
from jupyter_serve.handlers.base import BaseHandler

if TYPE_CHECKING:
    import torch

    from jupyter_serve.handlers.contract import HandlerContext

VOCAB_FILES = ("source_vocab.json", "source_vocab.pt")
_TAGS = re.compile(r"<[^>]*>")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
# Common English contractions, longest forms first where one is a prefix of another.
CONTRACTIONS = {
    "won't": "will not", "can't": "cannot", "shan't": "shall not", "ain't": "is not",
    "let's": "let us", "y'all": "you all", "n't": " not", "'re": " are", "'ve": " have",
    "'ll": " will", "'d": " would", "'m": " am", "it's": "it is", "that's": "that is",
    "there's": "there is", "he's": "he is", "she's": "she is", "what's": "what is",
    "where's": "where is", "who's": "who is", "how's": "how is",
}  # fmt: skip
_CONTRACTION = re.compile(
    "|".join(re.escape(key) for key in sorted(CONTRACTIONS, key=len, reverse=True)),
    re.IGNORECASE,
)


class TextHandler(BaseHandler):
    """Base of text handlers: the model, a vocabulary and TorchServe's text helpers."""

    def __init__(self) -> None:
        super().__init__()
        self.source_vocab: dict[str, int] = {}
        self.tokenizer = text.basic_english
        self.input_text: Any = None
        self.lig: Any = None

    def initialize(self, context: HandlerContext) -> None:
        """Load the model (BaseHandler) and the source vocabulary when there is one."""
        super().initialize(context)
        self.initialized = False
        assert self.model_dir is not None
        named = (self.manifest or {}).get("model", {}).get("sourceVocab")
        names = (named, *VOCAB_FILES) if named else VOCAB_FILES
        try:
            self.source_vocab = text.load_vocab(self.model_dir, names)
        except FileNotFoundError:
            self.source_vocab = {}
        self.initialized = True

    def _remove_html_tags(self, text_in: str) -> str:
        return _TAGS.sub("", text_in)

    def _remove_accented_characters(self, text_in: str) -> str:
        decomposed = unicodedata.normalize("NFKD", text_in)
        return decomposed.encode("ascii", "ignore").decode("ascii")

    def _expand_contractions(self, text_in: str) -> str:
        def expand(match: re.Match[str]) -> str:
            found = match.group(0)
            expanded = CONTRACTIONS[found.lower()]
            return expanded[0].upper() + expanded[1:] if found[0].isupper() else expanded

        return _CONTRACTION.sub(expand, text_in)

    def _remove_puncutation(self, *args: Any, **kwargs: Any) -> str:
        """Punctuation removed (TorchServe's method name, misspelling included)."""
        text_in = args[0] if args else kwargs.get("text", "")
        return str(text_in).translate(_PUNCTUATION)

    def _tokenize(self, text_in: str) -> list[str]:
        return list(self.tokenizer(text_in))

    def get_word_token(self, input_tokens: Sequence[str]) -> list[str]:
        """The tokens as words, for an explanation's labels."""
        return [str(token) for token in input_tokens]

    def summarize_attributions(self, attributions: torch.Tensor) -> torch.Tensor:
        """One attribution per token: summed over the embedding, then unit-normalised."""
        import torch

        summed = attributions.sum(dim=-1).squeeze(0)
        normalised: torch.Tensor = summed / torch.norm(summed)
        return normalised
