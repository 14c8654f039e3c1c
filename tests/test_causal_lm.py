"""The built-in `causal_lm` handler in a real worker process, stepped as the server steps a
continuous batch: each call one token of every running request, new requests joining,
a request the server stops sending forgotten. Its answers are compared with `generate()`
on the same folder in this process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lm_models import greedy, prompt_ids, tiny_lm
from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.handlers.causal_lm import BURST_POSITIONS, CausalLM, context_window, device_for
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Kind, decode_results
from jupyter_serve.worker.context import Context

__all__ = ["tiny_lm"]

PROMPT = "The list type"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a dict?"}]


@pytest.fixture(scope="module")
def worker(tiny_lm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One worker with the tiny LM loaded (continuous batching: the handler's default)."""
    folder = tmp_path_factory.mktemp("causal-lm") / "tinylm"
    shutil.copytree(tiny_lm, folder)
    write_model(folder, {}, handler="causal_lm")
    with WorkerProcess() as process:
        loaded = process.load(folder, "causal_lm", model_yaml_config={})
        assert loaded.header["status"] == 200, process.errors()
        yield process


class Stepper:
    """Drives a worker as ContinuousBatch does: new requests with their body, running ones
    by id alone, until each answer says it ends."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.running: list[str] = []
        self.new: list[InferenceRequest] = []
        self.chunks: dict[str, list[InferenceResult]] = {}
        self.early: list[list[str]] = []  # per step: who got a chunk before its answer

    def add(self, request_id: str, body: dict[str, Any]) -> None:
        self.new.append(request(request_id, body))
        self.chunks[request_id] = []

    def step(self, leave: tuple[str, ...] = ()) -> None:
        self.running = [rid for rid in self.running if rid not in leave]
        batch = [InferenceRequest(rid, {}) for rid in self.running] + self.new
        self.running += [r.request_id for r in self.new]
        self.new = []
        streamed, reply = self.worker.streamed(*batch)  # a step may stream early chunks
        self.early.append([result.request_id for chunk in streamed for result in chunk.results])
        for chunk in streamed:
            for result in chunk.results:
                self.chunks[result.request_id].append(result)
        assert reply.kind is Kind.RESULT, reply.header
        for result in decode_results(reply):
            self.chunks[result.request_id].append(result)
            if result.headers.get("ts_stream_next") != "true":
                self.running.remove(result.request_id)

    def run(self) -> None:
        while self.running or self.new:
            self.step()

    def text(self, request_id: str) -> str:
        return b"".join(r.body for r in self.chunks[request_id]).decode()


def test_greedy_answers_are_generate_s_alone_and_beside_others(
    worker: WorkerProcess, tiny_lm: Path
) -> None:
    alone = Stepper(worker)
    alone.add("a", {"prompt": PROMPT, "max_new_tokens": 12})
    alone.run()
    assert alone.text("a") == greedy(tiny_lm, 12, prompt=PROMPT)
    assert len(alone.chunks["a"]) == 12  # one chunk per token, the last one ends it
    assert alone.chunks["a"][-1].headers["ts_stream_next"] == "false"

    joined = Stepper(worker)
    joined.add("long", {"prompt": "def main():", "max_new_tokens": 20})
    joined.step()
    joined.step()
    joined.add("b", {"prompt": PROMPT, "max_new_tokens": 12})  # joins a running batch
    joined.add("chat", {"messages": CHAT, "max_new_tokens": 9})
    joined.run()
    assert joined.text("b") == alone.text("a")
    assert joined.text("long") == greedy(tiny_lm, 20, prompt="def main():")
    assert joined.text("chat") == greedy(tiny_lm, 9, messages=CHAT)


def test_prompts_joining_at_once_prefill_cheapest_group_first(
    worker: WorkerProcess, tiny_lm: Path
) -> None:
    """A short, a medium and a long prompt join together: apart they cost less
    (lm_prefill.py), so each gets its first token a step after the cheaper one, streamed
    early once others run; one still waiting gets nothing early. All answer generate()'s."""
    sentence = "The list type is a mutable sequence of items."
    prompts = {"long": " ".join([sentence] * 9), "medium": " ".join([sentence] * 3),
               "short": "x"}  # fmt: skip
    sizes = [len(prompt_ids(tiny_lm, prompt)) for prompt in prompts.values()]
    assert sizes[0] > 120, sizes
    assert 35 < sizes[1] < 50, sizes
    assert sizes[2] < 4, sizes
    stepper = Stepper(worker)
    for request_id, prompt in prompts.items():
        stepper.add(request_id, {"prompt": prompt, "max_new_tokens": 6, "details": True})

    def tokens() -> tuple[int, ...]:
        return tuple(int(json.loads(stepper.chunks[rid][-1].body)["completion_tokens"])
                     for rid in prompts)  # fmt: skip

    stepper.step()
    assert tokens() == (0, 0, 1)
    assert json.loads(stepper.chunks["long"][0].body)["text"] == ""
    stepper.step()
    assert tokens() == (0, 1, 2)
    stepper.step()
    assert tokens() == (1, 2, 3)
    assert stepper.early == [[], ["medium"], ["long"]]  # none early for one still waiting
    stepper.run()
    for request_id, prompt in prompts.items():
        lines = [json.loads(result.body) for result in stepper.chunks[request_id]]
        assert "".join(line["text"] for line in lines) == greedy(tiny_lm, 6, prompt=prompt)


def test_a_joining_request_gets_its_first_token_before_the_running_ones_decode(
    worker: WorkerProcess, tiny_lm: Path
) -> None:
    """Its prompt runs first; its first token is streamed at once (an intermediate
    response), and the step's answer for it is empty: it does not wait for the decode."""
    stepper = Stepper(worker)
    stepper.add("running", {"prompt": "def main():", "max_new_tokens": 8})
    stepper.step()
    stepper.add("new", {"prompt": PROMPT, "max_new_tokens": 5})
    stepper.step()
    assert stepper.early == [[], ["new"]]
    first, answered = stepper.chunks["new"]
    assert first.body == greedy(tiny_lm, 1, prompt=PROMPT).encode()
    assert answered.body == b""
    assert answered.headers["ts_stream_next"] == "true"
    stepper.run()
    assert stepper.text("new") == greedy(tiny_lm, 5, prompt=PROMPT)
    assert stepper.text("running") == greedy(tiny_lm, 8, prompt="def main():")
    assert all(early == [] for early in stepper.early[2:])  # only a joining step


def test_a_seed_reproduces_a_sampled_answer_whatever_runs_beside_it(worker: WorkerProcess) -> None:
    sampled = {"prompt": PROMPT, "max_new_tokens": 10, "temperature": 1.0, "top_p": 0.9}
    alone = Stepper(worker)
    alone.add("s", {**sampled, "seed": 7})
    alone.run()
    crowded = Stepper(worker)
    crowded.add("other", {**sampled, "max_new_tokens": 4})
    crowded.step()
    crowded.add("s", {**sampled, "seed": 7})
    crowded.add("s8", {**sampled, "seed": 8})
    crowded.run()
    assert crowded.text("s") == alone.text("s")
    assert crowded.text("s8") != alone.text("s")


def test_penalties_and_biases_are_openai_s_alone_and_beside_others(
    worker: WorkerProcess, tiny_lm: Path
) -> None:
    """OpenAI's presence and frequency penalties and logit_bias, against generate() with a
    logits processor written from OpenAI's definition: the same greedy answer alone and in
    a batch beside running requests (which the penalties leave alone)."""
    fields: dict[str, Any] = {"frequency_penalty": 1.5, "presence_penalty": 0.5,
                              "logit_bias": {"300": 3.5, "311": -100}}  # fmt: skip
    expected = greedy(tiny_lm, 16, prompt=PROMPT, **fields)
    assert expected != greedy(tiny_lm, 16, prompt=PROMPT)  # the penalties change the answer
    presence = greedy(tiny_lm, 16, prompt=PROMPT, presence_penalty=-2.0)
    assert presence not in (expected, greedy(tiny_lm, 16, prompt=PROMPT))
    alone = Stepper(worker)
    alone.add("p", {"prompt": PROMPT, "max_new_tokens": 16, **fields})
    alone.run()
    assert alone.text("p") == expected
    crowded = Stepper(worker)
    crowded.add("plain", {"prompt": "def main():", "max_new_tokens": 20})
    crowded.step()
    crowded.add("p", {"prompt": PROMPT, "max_new_tokens": 16, **fields})
    crowded.add("presence", {"prompt": PROMPT, "max_new_tokens": 16, "presence_penalty": -2})
    crowded.run()
    assert crowded.text("p") == expected
    assert crowded.text("presence") == presence
    assert crowded.text("plain") == greedy(tiny_lm, 20, prompt="def main():")
    [beyond] = worker.results(request("b", {"prompt": PROMPT, "logit_bias": {"512": 1}}))
    assert (beyond.status, json.loads(beyond.body)["param"]) == (400, "logit_bias")


def test_a_stop_sequence_ends_the_answer_before_it(worker: WorkerProcess, tiny_lm: Path) -> None:
    full = greedy(tiny_lm, 16, prompt=PROMPT)
    stop = full[5:7]  # two characters from the middle of the greedy answer
    stepper = Stepper(worker)
    stepper.add("s", {"prompt": PROMPT, "max_new_tokens": 16, "stop": [stop], "details": True})
    stepper.run()
    lines = [json.loads(r.body) for r in stepper.chunks["s"]]
    assert "".join(line["text"] for line in lines) == full[: full.index(stop)]
    assert lines[-1]["finish_reason"] == "stop"
    assert [line["finish_reason"] for line in lines[:-1]] == [None] * (len(lines) - 1)
    assert lines[-1]["completion_tokens"] < 16
    assert lines[-1]["prompt_tokens"] == len(prompt_ids(tiny_lm, PROMPT))


def test_every_chunk_is_whole_utf8_text(worker: WorkerProcess, tiny_lm: Path) -> None:
    """Each chunk decodes as UTF-8 on its own (tests/test_lm_text.py holds a character
    split across tokens back), and together they are the whole answer."""
    stepper = Stepper(worker)
    stepper.add("u", {"prompt": "x é", "max_new_tokens": 40})
    stepper.run()
    for chunk in stepper.chunks["u"]:
        chunk.body.decode("utf-8")  # strict: raises on half a character
        assert chunk.content_type == "text/plain; charset=utf-8"
    assert stepper.text("u") == greedy(tiny_lm, 40, prompt="x é")


def test_a_request_the_server_stops_sending_is_forgotten(worker: WorkerProcess) -> None:
    stepper = Stepper(worker)
    stepper.add("gone", {"prompt": PROMPT, "max_new_tokens": 50})
    stepper.add("stays", {"prompt": PROMPT, "max_new_tokens": 3})
    stepper.step()
    stepper.step(leave=("gone",))  # its client left: not in the next step
    stepper.run()
    [again] = worker.results(InferenceRequest("gone", {}))  # by id alone: a new request now
    assert again.status == 400
    assert "prompt" in json.loads(again.body)["message"]


def test_refusals_are_400s_with_openai_s_param_and_code(worker: WorkerProcess) -> None:
    too_long = request("long", {"prompt": "word " * 600})
    too_many = request("many", {"prompt": "hi", "max_new_tokens": 5000})
    bad_role = request("role", {"messages": [{"role": "wizard", "content": "hi"}]})
    fine = request("fine", {"prompt": "hi", "max_new_tokens": 1})
    results = {r.request_id: r for r in worker.results(too_long, too_many, bad_role, fine)}
    bodies = {rid: json.loads(r.body) for rid, r in results.items() if rid != "fine"}
    assert {rid: r.status for rid, r in results.items()} == \
        {"long": 400, "many": 400, "role": 400, "fine": 200}  # fmt: skip
    assert (bodies["long"]["param"], bodies["long"]["error_code"]) == \
        ("prompt", "context_length_exceeded")  # fmt: skip
    assert "maximum context length is 512 tokens" in bodies["many"]["message"]
    assert bodies["role"]["param"] == "messages[0].role"
    assert "ts_stream_next" not in results["fine"].headers  # one token: a plain answer


def test_an_empty_prompt_is_a_400_and_its_batch_goes_on(
    worker: WorkerProcess, tiny_lm: Path
) -> None:
    """Empty prompts join a running batch beside a new request: each is refused alone
    (TorchServe's error JSON, OpenAI's param), the others answer what generate() does."""
    stepper = Stepper(worker)
    stepper.add("running", {"prompt": "def main():", "max_new_tokens": 8})
    stepper.step()
    stepper.add("empty", {"prompt": "", "max_new_tokens": 4})
    stepper.add("joined", {"prompt": PROMPT, "max_new_tokens": 5})
    stepper.add("listed", {"prompt": [""], "details": True})
    stepper.new.append(request("text", b"", "text/plain"))  # a plain-text body: the prompt
    stepper.chunks["text"] = []
    stepper.run()
    for request_id in ("empty", "listed", "text"):
        [refused] = stepper.chunks[request_id]
        error = json.loads(refused.body)
        assert (refused.status, error["code"], error["type"]) == (400, 400, "InvalidRequest")
        assert (error["param"], error["error_code"]) == ("prompt", None)
        assert "empty" in error["message"]
    assert stepper.text("joined") == greedy(tiny_lm, 5, prompt=PROMPT)
    assert stepper.text("running") == greedy(tiny_lm, 8, prompt="def main():")


def test_chat_messages_that_make_no_token_are_refused(tiny_lm: Path) -> None:
    """A chat template that renders the messages to nothing: refused like an empty prompt
    (and the other request of the call still runs)."""
    handler = CausalLM()
    context = Context("tinylm", str(tiny_lm), {}, 8, None, "")
    handler.initialize(context)
    handler.tokenizer.chat_template = "{% for message in messages %}{{ message['content'] }}" \
        "{% endfor %}"  # fmt: skip
    empty = {"body": {"messages": [{"role": "user", "content": ""}]}}
    fine = {"body": {"prompt": PROMPT, "max_new_tokens": 1}}
    chunks = handler.handle([empty, fine], context.with_requests(["e", "f"], [{}, {}]))
    assert context.get_response_status(0)[0] == 400
    assert json.loads(chunks[0])["param"] == "messages"
    assert (context.get_response_status(1)[0], chunks[1]) == \
        (200, greedy(tiny_lm, 1, prompt=PROMPT).encode())  # fmt: skip


def test_without_continuous_batching_a_call_streams_its_batch_to_the_end(
    tiny_lm: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "tinylm"
    shutil.copytree(tiny_lm, folder)
    write_model(folder, {}, handler="causal_lm")
    with WorkerProcess() as process:
        config = {"continuousBatching": False}
        assert process.load(folder, "causal_lm", model_yaml_config=config).header["status"] == 200
        first = request("a", {"prompt": PROMPT, "max_new_tokens": 5})
        chunks, final = process.streamed(first, request("b", {"prompt": "x", "max_new_tokens": 2}))
    texts: dict[str, bytes] = {"a": b"", "b": b""}
    for chunk in chunks:
        for result in chunk.results:
            texts[result.request_id] += result.body
    for result in decode_results(final):
        texts[result.request_id] += result.body
    assert texts["a"].decode() == greedy(tiny_lm, 5, prompt=PROMPT)
    assert texts["b"].decode() == greedy(tiny_lm, 2, prompt="x")
    assert len(chunks) == 4  # five steps: four streamed, the last one is the answer


def test_devices_and_windows_from_what_the_worker_is_given() -> None:
    class Config:
        max_position_embeddings = 2048

    class Tokenizer:
        model_max_length = 1024

    assert str(device_for(None, cuda_available=True)) == "cpu"
    assert str(device_for(1, cuda_available=False)) == "cpu"
    assert str(device_for(0, cuda_available=True)) == "cuda:0"
    assert context_window(Config(), Tokenizer()) == 2048
    assert context_window(object(), Tokenizer()) == 1024


def test_a_large_prefill_runs_on_the_burst_threads(tiny_lm: Path) -> None:
    """A prompt group of at least BURST_POSITIONS positions runs on the context's
    `torch_burst_threads`; decode passes and a small prompt on the steady threads, which
    the handler gives back after the prefill."""
    steady = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        handler = CausalLM()
        context = Context("tinylm", str(tiny_lm), {}, 8, None, "", torch_burst_threads=2)
        handler.initialize(context)
        passes: list[tuple[int, int, int]] = []  # (rows, positions, threads) of each pass
        handler.model.model.embed_tokens.register_forward_hook(
            lambda _module, args, _out: passes.append((*args[0].shape, torch.get_num_threads()))
        )
        context.chunk_sink = lambda _chunk: None
        long_prompt = {"body": {"prompt": "the quick brown fox " * 10, "max_new_tokens": 3}}
        short_prompt = {"body": {"prompt": "hello there", "max_new_tokens": 2}}
        batches: list[list[Any]] = [[long_prompt] * 4, [{}] * 4, [{}] * 4 + [short_prompt]]
        for data in batches:
            handler.handle(data, context.with_requests([f"r{i}" for i in range(len(data))],
                                                       [{}] * len(data)))  # fmt: skip
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(steady)
    (rows, positions, threads), *others = passes
    assert (rows, threads) == (4, 2)
    assert rows * positions >= BURST_POSITIONS
    assert others  # the decode passes and the small prompt's prefill
    assert all(threads == 1 for _, _, threads in others)
    assert any(rows == 1 and positions > 1 for rows, positions, _ in others)  # the short one
