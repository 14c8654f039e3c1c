"""`DIR/README.md`: what the export holds, how to run it, and what did not carry over.

Language models (handler `causal_lm`) get their own paragraphs (readme_lm.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jupyter_serve.export.facts import ArchiveFacts
from jupyter_serve.export.kserve import Service
from jupyter_serve.export.plan import ExportItem, Skipped
from jupyter_serve.export.readme_lm import (
    LM_BODY,
    lm_kserve,
    lm_names,
    lm_not_carried,
    lm_torchserve,
    lm_upload,
)
from jupyter_serve.export.samples import Sample

__all__ = ["Exported", "readme"]

TABLE_HEAD = (
    "| model | version | workers (min-max) | batch size | max batch delay (ms) "
    "| response timeout (s) | device | archive |\n|---|---|---|---|---|---|---|---|"
)


@dataclass(frozen=True)
class Exported:
    """One exported version: its item, archive file name and facts."""

    item: ExportItem
    mar: str
    facts: ArchiveFacts


PLACEHOLDER_BODY = "[1.0, 2.0, 3.0, 4.0]"


def readme(
    name: str,
    exported: Sequence[Exported],
    skipped: Sequence[Skipped],
    protocol: str,
    samples: Mapping[str, Sample] | None = None,
    services: Sequence[Service] = (),
) -> str:
    """The README's Markdown; `samples`: the example bodies written, by model name;
    `services`: the InferenceServices of inferenceservice.yaml."""
    parts = [
        _intro(name, exported),
        _run_locally(exported, samples or {}),
        _kserve(name, exported, protocol, services),
        _not_carried(exported, skipped, services),
        PORTABLE,
    ]
    return "\n\n".join(part for part in parts if part).rstrip() + "\n"


def _intro(name: str, exported: Sequence[Exported]) -> str:
    rows = "\n".join(
        f"| {e.item.name} | {e.item.version}{' (default)' if e.item.default else ''} | "
        f"{e.item.min_workers}-{e.item.max_workers} | {e.item.batch_size} | "
        f"{e.item.max_batch_delay_ms} | {e.item.response_timeout} | {e.item.device_type} | "
        f"`model-store/{e.mar}` |"
        for e in exported
    )
    upload = lm_upload(exported)
    return f"""# {name}: exported by `jupyter serve export`

What a jupyter_serve notebook server served, laid out as KServe's TorchServe runtime
expects it:

- `model-store/*.mar`: one archive per model version (handler, weights, requirements,
  model-config.yaml, as they were served);
- `config/config.properties`: TorchServe 0.12's settings, with a `model_snapshot` that
  brings back every version below with its workers, batching and timeouts;
- `inferenceservice.yaml`: KServe `InferenceService`s (`serving.kserve.io/v1beta1`).{upload}

{TABLE_HEAD}
{rows}"""


def _run_locally(exported: Sequence[Exported], samples: Mapping[str, Sample]) -> str:
    names = list(dict.fromkeys(e.item.name for e in exported))
    language = lm_names(exported)
    calls = "\n".join(_predict_call(name, samples.get(name), name in language) for name in names)
    return f"""## Run it with TorchServe

With TorchServe 0.12 (`pip install torchserve==0.12.0 torch-model-archiver==0.12.0`,
Java 17), from this folder:

```bash
torchserve --start --model-store model-store --ts-config config/config.properties
curl http://localhost:8081/models                      # the models and versions
{calls}
torchserve --stop
```

{_about_bodies(names, samples, language)}

The addresses are KServe's (`0.0.0.0:8085` for inference, `8081` for management,
`8082` for metrics) and token authorization is off, as KServe's runtime needs: on a
shared machine, bind to loopback instead (`enable_envvars_config` is on, so the
environment overrides the file):

```bash
TS_INFERENCE_ADDRESS=http://127.0.0.1:8085 TS_MANAGEMENT_ADDRESS=http://127.0.0.1:8081 \\
TS_METRICS_ADDRESS=http://127.0.0.1:8082 \\
torchserve --start --model-store model-store --ts-config config/config.properties
```

Back into a notebook server: `jupyter serve --model-store model-store --ts-config
config/config.properties` serves the same models, versions and settings.

{lm_torchserve(exported)}"""


def _predict_call(name: str, sample: Sample | None, language_model: bool = False) -> str:
    """A curl of `name`'s default version with its sample, or a JSON body to replace (a
    prompt for a language model, whose answer streams)."""
    if sample is None and language_model:
        return (
            f"curl -N http://localhost:8085/predictions/{name} -H "
            f"\"Content-Type: application/json\" \\\n     -d '{LM_BODY}'"
        )
    if sample is None:
        body = f"-d '{PLACEHOLDER_BODY}'   # replace with an input of {name}"
        kind = "application/json"
    else:
        body, kind = f"--data-binary @{sample.path}", sample.content_type
    return (
        f'curl http://localhost:8085/predictions/{name} -H "Content-Type: {kind}" \\\n     {body}'
    )


def _about_bodies(names: Sequence[str], samples: Mapping[str, Sample],
                  language: Sequence[str] = ()) -> str:  # fmt: skip
    shipped = [name for name in names if name in samples]
    missing = [name for name in names if name not in samples and name not in language]
    lines = []
    if shipped:
        lines.append(
            "`samples/` holds the example request its archive ships for "
            + ", ".join(shipped) + "."
        )  # fmt: skip
    if missing:
        lines.append(
            f"The archive of {', '.join(missing)} ships no example request, so its curl sends a "
            "placeholder JSON body: replace it with what the handler takes. An archive with a "
            "`sample.json` (or `sample*`/`example*`/`input*`/`request*` `.json`, `.txt`, `.jpg`, "
            "`.png`; `--extra-files sample.json`) gets it written to `samples/` by the export."
        )
    return "\n".join(lines)


def _kserve(
    name: str, exported: Sequence[Exported], protocol: str, services: Sequence[Service]
) -> str:
    language = lm_names(exported) if services else []
    served = [e.item.name for e in exported if e.item.name not in language]
    step = "`kubectl get inferenceservice` until each service is READY"
    if served:
        first = served[0]
        route = (
            f'/v1/models/{first}:predict  # body: {{"instances": [...]}}'
            if protocol == "v1"
            else f'/v2/models/{first}/infer  # body: {{"inputs": [...]}} (Open Inference Protocol)'
        )
        step += f", and predict at\n   `http://<its host>{route}`"
        about = (
            f"The TorchServe service (`{name}`) speaks the KServe {protocol} protocol "
            "(`--protocol v1|v2` when exporting)."
        )
    else:
        about = ""
    parts = [
        f"""## Deploy it on KServe

1. Upload this folder (`config/` and `model-store/` at its top) where KServe's storage
   initializer can read it, for example `gsutil cp -r . gs://BUCKET/{name}` or
   `aws s3 cp --recursive . s3://BUCKET/{name}`, or a PVC (`pvc://NAME/{name}`).
2. Put that URI in `inferenceservice.yaml`'s `storageUri` (or export again with
   `--storage-uri URI`).
3. `kubectl apply -f inferenceservice.yaml`, then
   {step}.""",
        about,
        lm_kserve(services),
    ]
    return "\n\n".join(part for part in parts if part)


def _not_carried(
    exported: Sequence[Exported], skipped: Sequence[Skipped], services: Sequence[Service]
) -> str:
    lines = [f"- **{s}**: not exported." for s in skipped]
    for e in exported:
        what = f"{e.item.name} {e.item.version}"
        if e.facts.kernel:
            lines.append(
                f"- **{what}** ran in the Python of the Jupyter kernel `{e.facts.kernel}`: "
                "the packages it imports must be in the runtime's image (or in the archive's "
                "requirements file)."
            )
        lines += [
            f"- **{what}**: `jupyter_serve: {{{setting}}}` is jupyter_serve's alone; "
            "TorchServe ignores it."
            for setting in e.facts.notebook_only
        ]
    lines += lm_not_carried(exported, services)
    listed = "\n".join(lines) or "- Every chosen model version was exported."
    return f"""## What did not carry over

{listed}
- Batching: jupyter_serve sends a lone request at once; TorchServe waits up to the
  max batch delay for a batch to fill, so a lone request may take that much longer.
- The Jupyter server's login (token, JupyterHub) and its inference keys stay behind:
  protect the cluster's endpoint with KServe's or your ingress's authentication."""


PORTABLE = """## What is TorchServe's, and what you keep with another runtime

TorchServe is in limited maintenance. Its own parts here are `config/config.properties`
(addresses, `model_snapshot`, metrics settings), the `pytorch` runtime KServe picks
for this model format, and the handler contract the archives' handlers implement
(`handle(data, context)` on TorchServe's Python backend).

What you keep if you move to another runtime (KServe's own Python model server,
Triton, Ray Serve, BentoML, MLServer...):

- the `.mar` archives: zip files with the handler, weights and requirements, readable
  by any tool (`MAR-INF/MANIFEST.json` names the handler and files);
- the KServe v1 and v2 (Open Inference Protocol) request and response formats your
  clients speak, served by every KServe runtime: only `inferenceservice.yaml`'s
  `modelFormat` (and the runtime) would change;
- jupyter_serve itself, which serves the same archives with the same REST routes."""
