"""The exported README's paragraphs about language models (handler `causal_lm`).

readme.py adds them when the export holds one: how TorchServe gets the handler and its
packages (lm_archive.py), the request to send, the Hugging Face runtime's services on
KServe (kserve.py) and what does not carry over. Each function returns "" (or no
lines) for an export without a language model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jupyter_serve.export.kserve import Service, model_folder
from jupyter_serve.export.lm_archive import REQUIREMENTS

if TYPE_CHECKING:  # readme.py imports this module
    from jupyter_serve.export.readme import Exported

__all__ = ["LM_BODY", "lm_kserve", "lm_names", "lm_not_carried", "lm_torchserve", "lm_upload"]

LM_BODY = '{"prompt": "Once upon a time", "max_new_tokens": 32}'


def lm_names(exported: Sequence[Exported]) -> list[str]:
    """The language models, in order."""
    return list(dict.fromkeys(e.item.name for e in exported if e.facts.language_model))


def lm_upload(exported: Sequence[Exported]) -> str:
    """The intro's line on `huggingface/` (or "")."""
    if not lm_names(exported):
        return ""
    return (
        "\n- `huggingface/<model>/`: each language model's folder (its `save_pretrained` files,\n"
        "  again: KServe's Hugging Face runtime reads a plain folder; not needed by TorchServe)."
    )


def lm_torchserve(exported: Sequence[Exported]) -> str:
    """How TorchServe runs the language models: handler file, packages, request."""
    names = lm_names(exported)
    if not names:
        return ""
    listed = ", ".join(names)
    packages = " ".join(f'"{requirement}"' for requirement in REQUIREMENTS)
    return f"""### Language models ({listed})

TorchServe 0.12 has no `causal_lm` handler, so each language model's archive carries it
as `causal_lm.py`: one file made from jupyter_serve's own handler modules, which needs
torch, transformers and tokenizers, not jupyter_serve. Beside it, `requirements.txt`
({", ".join(f"`{r}`" for r in REQUIREMENTS)}) and a `model-config.yaml` with
`continuousBatching: true` (each handler call is one token of every running request, new
requests join between tokens, as in the notebook), `batchSize` (how many requests decode
together) and `useVenv: true`.

The packages: `install_py_dep_per_model=true` (in `config/config.properties`) makes
TorchServe create a virtual environment for the model as it loads it, which sees
TorchServe's own packages (torch), and pip-install there what is missing. That needs
PyPI at every start. Offline, install them into TorchServe's Python once and turn it off:

```bash
pip install {packages}    # in TorchServe's environment
TS_INSTALL_PY_DEP_PER_MODEL=false \\
torchserve --start --model-store model-store --ts-config config/config.properties
```

The request is the notebook server's: a JSON object with `prompt` (or chat `messages`),
`max_new_tokens`, `temperature` (absent: 0, greedy), `top_p`, `seed`, `stop` and OpenAI's
`frequency_penalty`, `presence_penalty` and `logit_bias`, or the prompt as plain text. The
answer streams the text as it is decoded (`curl -N`); at temperature 0 it is what the
notebook server answered."""


def lm_kserve(services: Sequence[Service]) -> str:
    """The Hugging Face runtime's services and how to call them."""
    served = [service for service in services if service.model is not None]
    if not served:
        return ""
    rows = "\n".join(
        f"- `{service.name}` serves {service.model} from `{model_folder(str(service.model))}/`"
        for service in served
    )
    first = served[0].model
    return f"""Language models run on KServe's Hugging Face runtime instead (model format
`huggingface`; its `storageUri` is the model's folder under `huggingface/`), one
InferenceService each:

{rows}

They speak OpenAI's API (the `predictions/` request above is TorchServe's):

```bash
curl http://<its host>/openai/v1/completions -H "Content-Type: application/json" \\
     -d '{{"model": "{first}", "prompt": "Once upon a time", "max_tokens": 32}}'
```

(`/openai/v1/chat/completions` takes `messages`.)"""


def lm_not_carried(exported: Sequence[Exported], services: Sequence[Service]) -> list[str]:
    """The README's "What did not carry over" lines about language models."""
    names = lm_names(exported)
    if not names:
        return []
    listed = ", ".join(names)
    lines = [
        f"- **{listed}**: the notebook server's OpenAI routes (`serve/v1/completions`, "
        "`serve/v1/chat/completions`) are not TorchServe's: there, send the request above "
        "to `predictions/<model>`.",
        f"- **{listed}** on KServe: the Hugging Face runtime serves the default version's "
        "folder with its own generation code, so answers sampled at a temperature above 0 "
        "differ from the notebook's.",
    ]
    if any(service.model is None for service in services):
        lines.append(
            "- The TorchServe InferenceService loads every archive of `config.properties`, "
            f"{listed} too (installing transformers for it): export the language models "
            "separately (`--models`) to keep them out of its pod."
        )
    return lines
