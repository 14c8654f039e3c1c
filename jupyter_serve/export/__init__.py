"""`jupyter serve export DIR`: what the notebook server serves, laid out for TorchServe and KServe.

    DIR/model-store/*.mar           every chosen model version's archive
    DIR/config/config.properties    TorchServe's settings, a model_snapshot of every version
    DIR/inferenceservice.yaml       KServe v1beta1 InferenceServices (pytorch, v1 or v2;
                                    huggingface for each language model)
    DIR/huggingface/<model>/        a language model's folder, for KServe's Hugging Face runtime
    DIR/samples/<model>.<ext>       the example request an archive ships (samples.py)
    DIR/README.md                   how to run it, and what did not carry over

One concern per module:

* `plan`: `ExportItem` (one version and its settings), `Skipped`, the errors;
* `gather`: items from a running server or from a snapshot file;
* `facts`: what an archive needs elsewhere (requirements, a kernelspec's Python);
* `properties`, `kserve`, `readme` (`readme_lm`: its language-model paragraphs): the
  three written files; `samples`: the example request bodies;
* `lm_handler`: the built-in `causal_lm` handler as one file TorchServe runs, assembled
  from jupyter_serve's own modules; `lm_archive`: a language model's archive rewritten to
  carry it (with requirements and model-config.yaml), and its folder for KServe;
* `layout`: writing it all beside DIR, then renaming it into place;
* `command`: the arguments and run shared by the CLI (cli.py) and `%serve export`.
"""

from __future__ import annotations

from jupyter_serve.export.command import (
    add_export_arguments,
    export_in_notebook,
    export_status,
    run_export,
)
from jupyter_serve.export.layout import ExportOptions, ExportResult, write_export
from jupyter_serve.export.plan import ExportError, ExportItem, NotExported, Skipped

__all__ = [
    "ExportError",
    "ExportItem",
    "ExportOptions",
    "ExportResult",
    "NotExported",
    "Skipped",
    "add_export_arguments",
    "export_in_notebook",
    "export_status",
    "run_export",
    "write_export",
]
